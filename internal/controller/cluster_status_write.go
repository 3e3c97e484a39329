package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/metrics"
)

// The status of a MySQLCluster has four writers. The reconcile writes every field once per
// run, from computeStatus (writeStatus), except the fields the others own:
//
//   - topology: the topology engine's reporter (internal/clustermanager), as it observes;
//   - restoredFrom, lastReclone, keptTransactions: the bootstrap and re-clone steps, which
//     record what they are about to do before doing it (cluster_bootstrap.go,
//     cluster_reclone.go, cluster_reclone_keep.go).
//
// A status field added to the API is written by the reconcile with no further change here.

// ownedByOthers clears in s the fields another writer owns, so that comparing or patching s
// leaves them alone; it returns their JSON names.
func ownedByOthers(s *dolphinv1.MySQLClusterStatus) []string {
	s.Topology, s.RestoredFrom, s.LastReclone, s.KeptTransactions = nil, nil, nil, nil
	return []string{"topology", "restoredFrom", "lastReclone", "keptTransactions"}
}

// writeStatus writes the status once per reconcile, and not at all when nothing changed.
func (r *MySQLClusterReconciler) writeStatus(ctx context.Context, c *dolphinv1.MySQLCluster, st dolphinv1.MySQLClusterStatus) error {
	healthy := 0.0
	if st.Phase == dolphinv1.PhaseRunning {
		healthy = 1
	}
	metrics.ClusterHealth.WithLabelValues(c.Namespace, c.Name).Set(healthy)
	metrics.SetClusterState(c.Namespace, c.Name, healthState(st.Phase))
	metrics.SetConditions(c.Namespace, c.Name, st.Conditions)
	mine := func(s dolphinv1.MySQLClusterStatus) dolphinv1.MySQLClusterStatus { ownedByOthers(&s); return s }
	if equality.Semantic.DeepEqual(mine(c.Status), mine(st)) {
		return nil
	}
	before := c.Status.Phase
	patch, err := reconcilerStatusPatch(st)
	if err != nil {
		return err
	}
	others := c.Status
	c.Status = mine(st)
	c.Status.Topology, c.Status.RestoredFrom, c.Status.LastReclone, c.Status.KeptTransactions =
		others.Topology, others.RestoredFrom, others.LastReclone, others.KeptTransactions
	if err := r.Client.Status().Patch(ctx, c, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("writing status: %w", err)
	}
	if before != st.Phase {
		r.event(c, corev1.EventTypeNormal, "PhaseChanged", "Reconcile", "phase %s -> %s", phaseOrNone(before), st.Phase)
	}
	return nil
}

// recordOwnedStatus writes, as a JSON merge patch, the status fields set in part and only
// those: how a step that owns a field (ownedByOthers) records what it is about to do before
// doing it. Every status field is omitempty (TestStatusFieldsAreOmitempty), so part's empty
// fields stay out of the patch; what names the fields in errors.
func (r *MySQLClusterReconciler) recordOwnedStatus(ctx context.Context, c *dolphinv1.MySQLCluster, part dolphinv1.MySQLClusterStatus, what string) error {
	patch, err := ownedStatusPatch(part)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", what, err)
	}
	if err := r.Client.Status().Patch(ctx, c, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("recording %s: %w", what, err)
	}
	return nil
}

// ownedStatusPatch is recordOwnedStatus's patch: {"status": part}, part's empty fields omitted.
func ownedStatusPatch(part dolphinv1.MySQLClusterStatus) ([]byte, error) {
	return json.Marshal(struct {
		Status dolphinv1.MySQLClusterStatus `json:"status"`
	}{part})
}

// reconcilerStatusPatch is a JSON merge patch that sets every status field the reconcile owns
// to st's value, with an explicit null for each one st leaves empty (recursively: a field no
// longer set inside status.backup goes too), and leaves the other writers' fields alone. It
// carries no resourceVersion: the reconcile is the only writer of these fields, so a
// concurrent write of status.topology by the reporter is no conflict.
func reconcilerStatusPatch(st dolphinv1.MySQLClusterStatus) ([]byte, error) {
	others := ownedByOthers(&st)
	data, ok := replacing(st).(map[string]any)
	if !ok {
		return nil, fmt.Errorf("encoding the status patch: %T is not an object", st)
	}
	for _, name := range others {
		delete(data, name)
	}
	b, err := json.Marshal(map[string]any{"status": data})
	if err != nil {
		return nil, fmt.Errorf("encoding the status patch: %w", err)
	}
	return b, nil
}

// replacing returns v (a struct or a pointer to one) as JSON data in which every field the
// encoding omits is an explicit null, recursively: in a JSON merge patch it replaces the
// stored object instead of merging into it, so a field that is no longer set (an archive
// status after archiving was turned off, a failed backup older than the last success) goes.
func replacing(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var data any
	if err := json.Unmarshal(b, &data); err != nil {
		return v
	}
	return withNulls(reflect.TypeOf(v), data)
}

// withNulls adds to data (the JSON of a value of type t) an explicit null for every field of
// t it lacks, recursively into nested objects.
func withNulls(t reflect.Type, data any) any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	obj, ok := data.(map[string]any)
	if !ok || t.Kind() != reflect.Struct {
		return data
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		if val, ok := obj[name]; ok {
			obj[name] = withNulls(f.Type, val)
		} else {
			obj[name] = nil
		}
	}
	return obj
}
