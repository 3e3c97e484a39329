package controller

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/utils/ptr"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// A replica that is not ready because of planned work — a rollout or a person deleting its
// pod, its replacement starting, a clone running, a new pod waiting for a node — leaves the
// cluster Progressing with Degraded False; the same replica crash-looping, stuck past the
// bounds, lost after being ready, or restarting after a failover away from it is trouble:
// Degraded, with a message that says which and why.
func TestComputeStatusSeparatesPlannedWorkFromTrouble(t *testing.T) {
	now := time.Unix(100000, 0)
	ago := func(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }
	// replica builds c-2 created created ago, its server running since started ago (0: not
	// started), never ready.
	replica := func(created, started time.Duration, mod func(*corev1.Pod)) corev1.Pod {
		p := pod("c-2", "replica", false)
		p.CreationTimestamp = ago(created)
		p.Status.Conditions[0].LastTransitionTime = ago(created)
		if started > 0 {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: resources.ContainerMySQLD,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: ago(started)}}}}
		}
		if mod != nil {
			mod(&p)
		}
		return p
	}
	healthy := []corev1.Pod{pod("c-0", "primary", true), pod("c-1", "replica", true)}
	for _, tc := range []struct {
		name    string
		c2      *corev1.Pod // nil: c-2 does not exist
		topo    *dolphinv1.TopologyStatus
		phase   dolphinv1.Phase
		reason  string // the Degraded condition's
		message string // a part of the Degraded condition's message
	}{
		{"deleted by a rollout, stopping", ptr.To(replica(time.Hour, time.Hour, func(p *corev1.Pod) {
			p.DeletionTimestamp, p.DeletionGracePeriodSeconds = ptr.To(metav1.NewTime(now.Add(50*time.Second))), ptr.To(int64(60))
		})), nil, dolphinv1.PhaseProgressing, "PlannedChange", "c-2: stopping (deleted)"},
		{"gone, about to be re-created", nil, nil, dolphinv1.PhaseProgressing, "PlannedChange", "c-2: being created"},
		{"re-created, its server starting", ptr.To(replica(20*time.Second, 15*time.Second, nil)), nil,
			dolphinv1.PhaseProgressing, "PlannedChange", "c-2: the server is starting"},
		{"a clone running for an hour", ptr.To(replica(time.Hour, 0, func(p *corev1.Pod) {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "seed",
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: ago(time.Hour)}}}}
		})), nil, dolphinv1.PhaseProgressing, "PlannedChange", "c-2: initializing (seed)"},
		{"waiting a minute for a node", ptr.To(replica(time.Minute, 0, func(p *corev1.Pod) {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Message: "0/3 nodes are available"})
		})), nil, dolphinv1.PhaseProgressing, "PlannedChange", "c-2: waiting for a node"},

		{"crash-looping", ptr.To(replica(time.Hour, 10*time.Second, func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].RestartCount = 3
			p.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1}
		})), nil, dolphinv1.PhaseDegraded, "InstancesNotReady", "c-2: container mysqld restarted 3 times (last: Error, exit 1)"},
		{"stuck stopping", ptr.To(replica(time.Hour, time.Hour, func(p *corev1.Pod) {
			p.DeletionTimestamp, p.DeletionGracePeriodSeconds = ptr.To(ago(9*time.Minute)), ptr.To(int64(60))
		})), nil, dolphinv1.PhaseDegraded, "InstancesNotReady", "c-2: stopping since 1970-01-02T03:36:40Z"},
		{"not scheduled for ten minutes", ptr.To(replica(10*time.Minute, 0, func(p *corev1.Pod) {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Message: "0/3 nodes are available"})
		})), nil, dolphinv1.PhaseDegraded, "InstancesNotReady", "not scheduled since 1970-01-02T03:36:40Z: 0/3 nodes are available"},
		{"its server never ready in 20 minutes", ptr.To(replica(21*time.Minute, 20*time.Minute, nil)), nil,
			dolphinv1.PhaseDegraded, "InstancesNotReady", "c-2: not ready since the server started at"},
		{"ready once, then not", ptr.To(replica(time.Hour, time.Hour, func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State.Running.StartedAt = ago(2 * time.Minute)
			p.Status.Conditions[0].LastTransitionTime = ago(30 * time.Second)
		})), nil, dolphinv1.PhaseDegraded, "InstancesNotReady", "c-2: the server stopped answering its readiness probe"},
		{"the old primary restarting after a failover", ptr.To(replica(20*time.Second, 15*time.Second, nil)),
			&dolphinv1.TopologyStatus{Primary: "c-0", LastPromotion: &dolphinv1.PromotionRecord{From: "c-2", To: "c-0", Time: ago(time.Minute)}},
			dolphinv1.PhaseDegraded, "InstancesNotReady", "c-2: restarting after the failover away from it"},
		{"the old primary restarting after a switchover", ptr.To(replica(20*time.Second, 15*time.Second, nil)),
			&dolphinv1.TopologyStatus{Primary: "c-0", LastPromotion: &dolphinv1.PromotionRecord{From: "c-2", To: "c-0", Planned: true, Time: ago(time.Minute)}},
			dolphinv1.PhaseProgressing, "PlannedChange", "c-2: the server is starting"},
		{"the old primary's pod, deleted by Dolphin after a failover", ptr.To(replica(time.Hour, time.Hour, func(p *corev1.Pod) {
			p.DeletionTimestamp, p.DeletionGracePeriodSeconds = ptr.To(metav1.NewTime(now.Add(time.Second))), ptr.To(int64(1))
		})), &dolphinv1.TopologyStatus{Primary: "c-0", LastPromotion: &dolphinv1.PromotionRecord{From: "c-2", To: "c-0", Time: ago(5 * time.Second)}},
			dolphinv1.PhaseDegraded, "InstancesNotReady", "c-2: restarting after the failover away from it"},
		{"the old primary's pod gone after a failover", nil,
			&dolphinv1.TopologyStatus{Primary: "c-0", LastPromotion: &dolphinv1.PromotionRecord{From: "c-2", To: "c-0", Time: ago(5 * time.Second)}},
			dolphinv1.PhaseDegraded, "InstancesNotReady", "c-2: re-created after the failover away from it"},
		{"planned, but an instance is errant", ptr.To(replica(20*time.Second, 15*time.Second, nil)),
			&dolphinv1.TopologyStatus{Primary: "c-0", ErrantInstances: []string{"c-1"}},
			dolphinv1.PhaseDegraded, "ErrantInstances", "c-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pods := append([]corev1.Pod(nil), healthy...)
			if tc.c2 != nil {
				pods = append(pods, *tc.c2)
			}
			prev := previous(dolphinv1.PhaseRunning, true)
			prev.Topology = tc.topo
			st := computeStatus(observation{Generation: 7, Replicas: 3, StatefulSet: settledSTS(3), StatefulSetName: "c",
				Pods: pods, Previous: prev}, metav1.NewTime(now))
			deg := meta.FindStatusCondition(st.Conditions, dolphinv1.ConditionDegraded)
			if st.Phase != tc.phase || deg == nil || deg.Reason != tc.reason || !strings.Contains(deg.Message, tc.message) {
				t.Fatalf("phase %s, Degraded %+v; want phase %s, reason %s, a message with %q", st.Phase, deg, tc.phase, tc.reason, tc.message)
			}
			if wantDegraded := tc.phase == dolphinv1.PhaseDegraded; (deg.Status == metav1.ConditionTrue) != wantDegraded {
				t.Fatalf("Degraded %s for phase %s", deg.Status, st.Phase)
			}
			prog := meta.FindStatusCondition(st.Conditions, dolphinv1.ConditionProgressing)
			if tc.phase == dolphinv1.PhaseProgressing && (prog == nil || prog.Status != metav1.ConditionTrue) {
				t.Fatalf("Progressing %+v while the phase is Progressing", prog)
			}
			if meta.IsStatusConditionTrue(st.Conditions, dolphinv1.ConditionReady) {
				t.Fatal("Ready with an instance not ready")
			}
		})
	}
}

// A pod missing for a moment is being created; one missing at two observations 10 minutes
// into the cluster's progress cannot be (a quota, a webhook): trouble, pointing at the
// StatefulSet.
func TestComputeStatusMissingPodIsBounded(t *testing.T) {
	now := time.Unix(100000, 0)
	pods := []corev1.Pod{pod("c-0", "primary", true), pod("c-1", "replica", true)}
	for _, tc := range []struct {
		progressingFor time.Duration
		phase          dolphinv1.Phase
		message        string
	}{{time.Minute, dolphinv1.PhaseProgressing, "c-2: being created"}, {20 * time.Minute, dolphinv1.PhaseDegraded, "c-2: its pod has not been created since"}} {
		prev := previous(dolphinv1.PhaseProgressing, true)
		prev.Instances = []dolphinv1.InstanceStatus{{Name: "c-0"}, {Name: "c-1"}} // c-2 was missing before too
		prev.Conditions = append(prev.Conditions, metav1.Condition{Type: dolphinv1.ConditionProgressing, Status: metav1.ConditionTrue,
			Reason: "InstancesStarting", LastTransitionTime: metav1.NewTime(now.Add(-tc.progressingFor))})
		st := computeStatus(observation{Generation: 7, Replicas: 3, StatefulSet: settledSTS(3), StatefulSetName: "c", Pods: pods, Previous: prev}, metav1.NewTime(now))
		deg := meta.FindStatusCondition(st.Conditions, dolphinv1.ConditionDegraded)
		if st.Phase != tc.phase || deg == nil || !strings.Contains(deg.Message, tc.message) {
			t.Errorf("progressing for %s: phase %s, Degraded %+v; want %s with %q", tc.progressingFor, st.Phase, deg, tc.phase, tc.message)
		}
	}
}

// Only the errors a retry can fix are returned for a retry: a user error alone is not, a
// transient error joined with one is.
func TestNotUserErrors(t *testing.T) {
	ue := &userError{Reason: "StorageNotExpandable", Message: "set allowVolumeExpansion"}
	transient := errors.New("step binlog-archive: connection refused")
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"a user error", fmt.Errorf("step storage: %w", ue), ""},
		{"a user error and a transient one", errors.Join(fmt.Errorf("step storage: %w", ue), transient), transient.Error()},
		{"two user errors", errors.Join(fmt.Errorf("step storage: %w", ue), fmt.Errorf("step backup-store: %w", ue)), ""},
		{"a transient error", transient, transient.Error()},
	} {
		got := notUserErrors(tc.err)
		if (got == nil) != (tc.want == "") || (got != nil && got.Error() != tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, got, tc.want)
		}
	}
}
