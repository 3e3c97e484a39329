package controller

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// TestEngineUpgradeRunsForget: finished runs are dropped once their pod no longer waits, a
// failed one only once its pod is gone (a pod briefly not ready still waits out the retry
// delay); runs under way and other clusters' runs stay; a deleted cluster's all go.
func TestEngineUpgradeRunsForget(t *testing.T) {
	a, b := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}
	var u engineUpgradeRuns
	u.put("ok-recorded", &engineUpgradeRun{cluster: a, done: true})
	u.put("failed-not-ready", &engineUpgradeRun{cluster: a, done: true, err: errors.New("x")})
	u.put("failed-gone", &engineUpgradeRun{cluster: a, done: true, err: errors.New("x")})
	u.put("running", &engineUpgradeRun{cluster: a})
	u.put("other-cluster", &engineUpgradeRun{cluster: b, done: true})
	existing := map[types.UID]bool{"ok-recorded": true, "failed-not-ready": true, "running": true}
	u.forget(a, map[types.UID]bool{}, existing)
	for uid, want := range map[types.UID]bool{"ok-recorded": false, "failed-not-ready": true, "failed-gone": false, "running": true, "other-cluster": true} {
		if got := u.get(uid) != nil; got != want {
			t.Errorf("%s kept %v, want %v", uid, got, want)
		}
	}
	u.forgetCluster(a)
	if u.get("running") != nil || u.get("failed-not-ready") != nil || u.get("other-cluster") == nil {
		t.Errorf("after the cluster's deletion: %+v", u.runs)
	}
	// A run dropped while under way does not come back when it ends.
	r := &engineUpgradeRun{cluster: b}
	u.put("late", r)
	u.forgetCluster(b)
	u.finish("late", r, nil)
	if u.get("late") != nil {
		t.Error("a run of a deleted cluster came back when it ended")
	}
}
