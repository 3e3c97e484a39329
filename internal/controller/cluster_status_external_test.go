package controller

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// A cluster that follows the server it was copied from says so: phase Following once every
// instance is ready and its primary replicates, Ready and Available False with that reason
// (no instance takes writes until the cutover), and a stopped replication is trouble with the
// server's words.
func TestComputeStatusFollowingAnExternalSource(t *testing.T) {
	now := metav1.NewTime(time.Unix(100000, 0))
	pods := []corev1.Pod{pod("c-0", "", true), pod("c-1", "replica", true), pod("c-2", "replica", true)}
	source := "old-db.example:3306"
	for _, tc := range []struct {
		name      string
		external  *dolphinv1.ExternalReplication
		phase     dolphinv1.Phase
		following metav1.ConditionStatus
		reason    string // of FollowingExternalSource
		message   string // a part of it
		degraded  metav1.ConditionStatus
	}{
		{"replicating", &dolphinv1.ExternalReplication{Source: source, Instance: "c-0", Replicating: true, LagSeconds: ptr.To[int64](3), Received: "0-9-120"},
			dolphinv1.PhaseFollowing, metav1.ConditionTrue, "Replicating", "c-0 replicates from old-db.example:3306, 3 s behind, received up to 0-9-120", metav1.ConditionFalse},
		{"stopped with an error", &dolphinv1.ExternalReplication{Source: source, Instance: "c-0", Error: "Could not find GTID state requested by slave in any binlog files"},
			dolphinv1.PhaseDegraded, metav1.ConditionFalse, "ReplicationStopped", "c-0 does not replicate from old-db.example:3306: Could not find GTID state", metav1.ConditionTrue},
		{"not reported yet", nil, dolphinv1.PhaseInitializing, metav1.ConditionFalse, "NotReplicating", "no instance replicates", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prev := withTopology(previous(dolphinv1.PhaseInitializing, false), &dolphinv1.TopologyStatus{State: "Healthy", Primary: "c-0", ExternalSource: tc.external})
			st := computeStatus(observation{Generation: 1, Replicas: 3, StatefulSet: settledSTS(3), StatefulSetName: "c", Pods: pods,
				Previous: prev, FollowsExternal: true}, now)
			f := meta.FindStatusCondition(st.Conditions, dolphinv1.ConditionFollowingExternalSource)
			if st.Phase != tc.phase || f == nil || f.Status != tc.following || f.Reason != tc.reason || !strings.Contains(f.Message, tc.message) {
				t.Fatalf("phase %s, FollowingExternalSource %+v; want phase %s, %s %s with %q", st.Phase, f, tc.phase, tc.following, tc.reason, tc.message)
			}
			for _, ty := range []string{dolphinv1.ConditionReady, dolphinv1.ConditionAvailable} {
				if c := meta.FindStatusCondition(st.Conditions, ty); c == nil || c.Status != metav1.ConditionFalse || c.Reason != "FollowingExternalSource" {
					t.Errorf("%s %+v, want False FollowingExternalSource", ty, c)
				}
			}
			if d := meta.FindStatusCondition(st.Conditions, dolphinv1.ConditionDegraded); tc.degraded != "" && (d == nil || d.Status != tc.degraded) {
				t.Errorf("Degraded %+v, want %s", d, tc.degraded)
			}
			if p := meta.FindStatusCondition(st.Conditions, dolphinv1.ConditionProgressing); tc.phase == dolphinv1.PhaseFollowing && (p == nil || p.Status != metav1.ConditionFalse) {
				t.Errorf("Progressing %+v while following with every instance ready", p)
			}
		})
	}
	// A cluster that does not follow one has no such condition.
	st := computeStatus(observation{Generation: 1, Replicas: 3, StatefulSet: settledSTS(3), StatefulSetName: "c", Pods: pods,
		Previous: previous(dolphinv1.PhaseRunning, true)}, now)
	if meta.FindStatusCondition(st.Conditions, dolphinv1.ConditionFollowingExternalSource) != nil {
		t.Error("FollowingExternalSource on a cluster that follows no server")
	}
}

// TestComputeStatusFellBack: a cluster whose writes moved back to the server is retired as
// planned — phase FellBack, Ready and Available False with that reason saying where the
// writes went and what the cluster keeps, not Degraded — although no pod is its primary.
func TestComputeStatusFellBack(t *testing.T) {
	now := metav1.NewTime(time.Unix(100000, 0))
	pods := []corev1.Pod{pod("c-0", "", true), pod("c-1", "", true), pod("c-2", "", true)}
	x := &dolphinv1.ExternalReplication{Source: "old-db.example:3306", CutOver: &dolphinv1.CutoverRecord{Instance: "c-0", At: now, Position: "0-9-120"},
		FellBack: &dolphinv1.CutoverRecord{Instance: "old-db.example:3306", At: now, Position: "0-1000-42", WritePauseMilliseconds: 30}}
	prev := withTopology(previous(dolphinv1.PhaseRunning, true), &dolphinv1.TopologyStatus{State: "FellBack", Primary: "c-0", ExternalSource: x})
	st := computeStatus(observation{Generation: 1, Replicas: 3, StatefulSet: settledSTS(3), StatefulSetName: "c", Pods: pods, Previous: prev}, now)
	if st.Phase != dolphinv1.PhaseFellBack {
		t.Errorf("phase %s, want FellBack", st.Phase)
	}
	for _, ty := range []string{dolphinv1.ConditionReady, dolphinv1.ConditionAvailable} {
		if c := meta.FindStatusCondition(st.Conditions, ty); c == nil || c.Status != metav1.ConditionFalse || c.Reason != "FellBack" ||
			!strings.Contains(c.Message, "writes moved back to old-db.example:3306") || !strings.Contains(c.Message, "0-1000-42") {
			t.Errorf("%s %+v, want False FellBack naming the server and the position", ty, c)
		}
	}
	if d := meta.FindStatusCondition(st.Conditions, dolphinv1.ConditionDegraded); d == nil || d.Status != metav1.ConditionFalse {
		t.Errorf("Degraded %+v, want False: retired as planned", d)
	}
}
