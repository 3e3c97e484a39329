package controller

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

func TestOtherClaimants(t *testing.T) {
	at := func(name string, created time.Time, deleting bool) *dolphinv1.MySQLUser {
		u := &dolphinv1.MySQLUser{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), CreationTimestamp: metav1.NewTime(created)}}
		if deleting {
			u.DeletionTimestamp = &metav1.Time{Time: created.Add(time.Hour)}
		}
		return u
	}
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	old, young := at("old", t0, false), at("young", t0.Add(time.Minute), false)
	oldDeleting := at("old", t0, true)
	for _, tc := range []struct {
		name   string
		self   *dolphinv1.MySQLUser
		all    []*dolphinv1.MySQLUser
		older  string
		others bool
	}{
		{"alone", old, []*dolphinv1.MySQLUser{old}, "", false},
		{"the older one manages", young, []*dolphinv1.MySQLUser{old, young}, "old", true},
		{"the younger one does not stop the older", old, []*dolphinv1.MySQLUser{old, young}, "", true},
		// The older one is deleted (as the Conflict message suggests): the younger one takes
		// over, and the older one must see it, so that its cleanup drops nothing.
		{"deleted winner: the younger manages", young, []*dolphinv1.MySQLUser{oldDeleting, young}, "", false},
		{"deleted winner still sees the younger", oldDeleting, []*dolphinv1.MySQLUser{oldDeleting, young}, "", true},
	} {
		objs := make([]metav1.Object, len(tc.all))
		for i, u := range tc.all {
			objs[i] = u
		}
		older, others := otherClaimants(tc.self, objs)
		if older != tc.older || others != tc.others {
			t.Errorf("%s: older %q others %v, want %q %v", tc.name, older, others, tc.older, tc.others)
		}
	}
}
