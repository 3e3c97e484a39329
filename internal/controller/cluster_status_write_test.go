package controller

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// TestReconcilerStatusPatchCoversEveryField checks that the reconcile's status patch names
// every field of the status (its value, or null to clear it) but those other writers own, so
// that a field added to the API is written without a change to the patch.
func TestReconcilerStatusPatchCoversEveryField(t *testing.T) {
	b, err := reconcilerStatusPatch(dolphinv1.MySQLClusterStatus{Phase: dolphinv1.PhaseRunning,
		Topology: &dolphinv1.TopologyStatus{Primary: "db-0"}, Backup: &dolphinv1.BackupStatus{}})
	if err != nil {
		t.Fatal(err)
	}
	var patch struct{ Status map[string]any }
	if err := json.Unmarshal(b, &patch); err != nil {
		t.Fatal(err)
	}
	others := ownedByOthers(&dolphinv1.MySQLClusterStatus{})
	typ := reflect.TypeFor[dolphinv1.MySQLClusterStatus]()
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		_, inPatch := patch.Status[name]
		if want := !slices.Contains(others, name); inPatch != want {
			t.Errorf("status.%s in the reconcile's patch: %v, want %v", name, inPatch, want)
		}
	}
	if patch.Status["phase"] != string(dolphinv1.PhaseRunning) || patch.Status["currentPrimary"] != nil {
		t.Errorf("patch %s: want phase Running and currentPrimary null", b)
	}
	if backup, ok := patch.Status["backup"].(map[string]any); !ok || len(backup) == 0 {
		t.Errorf("status.backup %v: want an object with a null for each field it lacks", patch.Status["backup"])
	}
}

// TestStatusFieldsAreOmitempty checks what recordOwnedStatus relies on: every field of the
// status is omitted from JSON when empty, so a patch of one field touches no other.
func TestStatusFieldsAreOmitempty(t *testing.T) {
	st := reflect.TypeFor[dolphinv1.MySQLClusterStatus]()
	for f := range st.Fields() {
		if tag := f.Tag.Get("json"); !strings.Contains(tag, ",omitempty") && !strings.Contains(tag, ",omitzero") {
			t.Errorf("status field %s (json %q) is not omitempty: recordOwnedStatus would clear it", f.Name, tag)
		}
	}
}

// TestOwnedStatusPatchNamesOneField checks that each owned field's record patches that field
// only, under its JSON name.
func TestOwnedStatusPatchNamesOneField(t *testing.T) {
	for want, part := range map[string]dolphinv1.MySQLClusterStatus{
		"restoredFrom":     {RestoredFrom: &dolphinv1.RestoreStatus{Path: "p"}},
		"lastReclone":      {LastReclone: &dolphinv1.RecloneRecord{Instance: "db-1"}},
		"keptTransactions": {KeptTransactions: []dolphinv1.KeptTransactions{{Name: "k"}}},
	} {
		b, err := ownedStatusPatch(part)
		if err != nil {
			t.Fatal(err)
		}
		var got struct{ Status map[string]json.RawMessage }
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if len(got.Status) != 1 || got.Status[want] == nil {
			t.Errorf("patch of %s is %s, want that field alone", want, b)
		}
	}
}
