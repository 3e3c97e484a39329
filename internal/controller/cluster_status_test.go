package controller

import (
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

func pod(name string, role dolphinv1.InstanceRole, ready bool) corev1.Pod {
	s := corev1.ConditionFalse
	if ready {
		s = corev1.ConditionTrue
	}
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if role != dolphinv1.RoleUnknown {
		p.Labels[resources.RoleLabel] = string(role)
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: s}}
	return p
}

func settledSTS(replicas int32) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Generation: 2},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 2, Replicas: replicas, UpdatedReplicas: replicas,
			ReadyReplicas: replicas, CurrentRevision: "r1", UpdateRevision: "r1"},
	}
}

func previous(phase dolphinv1.Phase, available bool) dolphinv1.MySQLClusterStatus {
	st := dolphinv1.MySQLClusterStatus{Phase: phase}
	s := metav1.ConditionFalse
	if available {
		s = metav1.ConditionTrue
	}
	st.Conditions = []metav1.Condition{{Type: dolphinv1.ConditionAvailable, Status: s, Reason: "X", LastTransitionTime: metav1.Unix(1, 0)}}
	return st
}

func withTopology(st dolphinv1.MySQLClusterStatus, t *dolphinv1.TopologyStatus) dolphinv1.MySQLClusterStatus {
	st.Topology = t
	return st
}

func TestComputeStatus(t *testing.T) {
	type want struct {
		phase                                 dolphinv1.Phase
		ready, available, progressing, degrad metav1.ConditionStatus
		reason                                string // reason of the Degraded condition
		primary                               string
		readyInstances                        int32
	}
	T, F := metav1.ConditionTrue, metav1.ConditionFalse
	cases := []struct {
		name string
		obs  observation
		want want
	}{
		{"new cluster, no StatefulSet yet",
			observation{Replicas: 3},
			want{dolphinv1.PhasePending, F, F, T, F, "AsExpected", "", 0}},
		{"pods starting, none ready",
			observation{Replicas: 3, StatefulSet: settledSTS(3), Pods: []corev1.Pod{pod("c-0", "", false), pod("c-1", "", false)}},
			want{dolphinv1.PhasePending, F, F, T, F, "AsExpected", "", 0}},
		{"instances ready, no primary elected yet",
			observation{Replicas: 3, StatefulSet: settledSTS(3), Pods: []corev1.Pod{pod("c-0", "", true), pod("c-1", "", true), pod("c-2", "", false)}},
			want{dolphinv1.PhaseInitializing, F, F, T, F, "AsExpected", "", 2}},
		{"all ready with a primary",
			observation{Replicas: 3, StatefulSet: settledSTS(3), Pods: []corev1.Pod{pod("c-0", "primary", true), pod("c-1", "replica", true), pod("c-2", "replica", true)}},
			want{dolphinv1.PhaseRunning, T, T, F, F, "AsExpected", "c-0", 3}},
		{"a replica down",
			observation{Replicas: 3, StatefulSet: settledSTS(3), Pods: []corev1.Pod{pod("c-0", "primary", true), pod("c-1", "replica", false), pod("c-2", "replica", true)},
				Previous: previous(dolphinv1.PhaseRunning, true)},
			want{dolphinv1.PhaseDegraded, F, T, F, T, "InstancesNotReady", "c-0", 2}},
		{"primary lost after running",
			observation{Replicas: 3, StatefulSet: settledSTS(3), Pods: []corev1.Pod{pod("c-0", "primary", false), pod("c-1", "replica", true), pod("c-2", "replica", true)},
				Previous: previous(dolphinv1.PhaseRunning, true)},
			want{dolphinv1.PhaseDegraded, F, F, F, T, "PrimaryUnavailable", "c-0", 2}},
		{"two pods labeled primary",
			observation{Replicas: 2, StatefulSet: settledSTS(2), Pods: []corev1.Pod{pod("c-0", "primary", true), pod("c-1", "primary", true)}},
			want{dolphinv1.PhaseInitializing, F, F, T, T, "MultiplePrimaries", "", 2}},
		{"scaling up",
			observation{Replicas: 5, StatefulSet: settledSTS(3), Pods: []corev1.Pod{pod("c-0", "primary", true), pod("c-1", "replica", true), pod("c-2", "replica", true)},
				Previous: previous(dolphinv1.PhaseRunning, true)},
			want{dolphinv1.PhaseDegraded, F, T, T, T, "InstancesNotReady", "c-0", 3}},
		{"user error",
			observation{Replicas: 3, StepErr: errors.Join(errors.New("step credentials"), &userError{Reason: "CredentialsSecretNotFound", Message: "create it"})},
			want{dolphinv1.PhaseFailed, F, F, F, T, "CredentialsSecretNotFound", "", 0}},
		{"a user error in a step nothing depends on, on a running cluster: Degraded, not Failed",
			observation{Replicas: 3, StatefulSet: settledSTS(3), StepErrSideOnly: true,
				StepErr:  errors.Join(errors.New("step storage"), &userError{Reason: "StorageNotExpandable", Message: "set allowVolumeExpansion"}),
				Pods:     []corev1.Pod{pod("c-0", "primary", true), pod("c-1", "replica", true), pod("c-2", "replica", true)},
				Previous: previous(dolphinv1.PhaseRunning, true)},
			want{dolphinv1.PhaseDegraded, F, T, F, T, "StorageNotExpandable", "c-0", 3}},
		{"a failed step is not Ready and keeps progressing",
			observation{Replicas: 1, StatefulSet: settledSTS(1), Pods: []corev1.Pod{pod("c-0", "primary", true)}, StepErr: errors.New("step statefulset: field is immutable"),
				Previous: previous(dolphinv1.PhaseRunning, true)},
			want{dolphinv1.PhaseDegraded, F, T, T, T, "ReconcileError", "c-0", 1}},
		{"errant instances make a cluster Degraded, not Running",
			observation{Replicas: 3, StatefulSet: settledSTS(3), Pods: []corev1.Pod{pod("c-0", "primary", true), pod("c-1", "", true), pod("c-2", "", true)},
				Previous: withTopology(previous(dolphinv1.PhaseRunning, true), &dolphinv1.TopologyStatus{Primary: "c-0", ErrantInstances: []string{"c-1", "c-2"}})},
			want{dolphinv1.PhaseDegraded, F, T, F, T, "ErrantInstances", "c-0", 3}},
		{"an errant former primary is named as held for consent",
			observation{Replicas: 3, StatefulSet: settledSTS(3), Pods: []corev1.Pod{pod("c-0", "primary", true), pod("c-1", "", true), pod("c-2", "", true)},
				Previous: withTopology(previous(dolphinv1.PhaseRunning, true), &dolphinv1.TopologyStatus{Primary: "c-0", ErrantInstances: []string{"c-1", "c-2"},
					ReplacedPrimaries: []string{"c-2"}})},
			want{dolphinv1.PhaseDegraded, F, T, F, T, "ErrantFormerPrimary", "c-0", 3}},
		{"a semi-sync fallback makes a cluster Degraded",
			observation{Replicas: 3, StatefulSet: settledSTS(3), Pods: []corev1.Pod{pod("c-0", "primary", true), pod("c-1", "replica", true), pod("c-2", "replica", true)},
				Previous: withTopology(previous(dolphinv1.PhaseRunning, true), &dolphinv1.TopologyStatus{Primary: "c-0", SemiSyncFallback: true})},
			want{dolphinv1.PhaseDegraded, F, T, F, T, "SemiSyncFallback", "c-0", 3}},
		{"no replica connected to acknowledge: Ready says the writes wait, before the instances that are down",
			observation{Replicas: 3, StatefulSet: settledSTS(3), Pods: []corev1.Pod{pod("c-0", "primary", true), pod("c-1", "replica", false), pod("c-2", "replica", false)},
				Durability: dolphinv1.DurabilityRequired,
				Previous:   withTopology(previous(dolphinv1.PhaseRunning, true), &dolphinv1.TopologyStatus{Primary: "c-0", NoSemiSyncReplica: true})},
			want{dolphinv1.PhaseDegraded, F, T, F, T, "WritesWaitForReplica", "c-0", 1}},
		{"no replica connected to acknowledge with durability Preferred: the writes wait, then are acknowledged alone",
			observation{Replicas: 3, StatefulSet: settledSTS(3), Pods: []corev1.Pod{pod("c-0", "primary", true), pod("c-1", "replica", false), pod("c-2", "replica", false)},
				Durability: dolphinv1.DurabilityPreferred,
				Previous:   withTopology(previous(dolphinv1.PhaseRunning, true), &dolphinv1.TopologyStatus{Primary: "c-0", NoSemiSyncReplica: true})},
			want{dolphinv1.PhaseDegraded, F, T, F, T, "NoSemiSyncReplica", "c-0", 1}},
		{"writes that wait are said before writes acknowledged alone (a stall restart with the replicas still down)",
			observation{Replicas: 3, StatefulSet: settledSTS(3), Pods: []corev1.Pod{pod("c-0", "primary", true), pod("c-1", "replica", false), pod("c-2", "replica", false)},
				Durability: dolphinv1.DurabilityRequired,
				Previous: withTopology(previous(dolphinv1.PhaseRunning, true), &dolphinv1.TopologyStatus{Primary: "c-0", CommitsWaiting: true,
					AcknowledgedAlone: &dolphinv1.AcknowledgedAlone{Primary: "c-0", UpTo: "0-1-9"}})},
			want{dolphinv1.PhaseDegraded, F, T, F, T, "WritesWaitForReplica", "c-0", 1}},
		{"a semi-sync fallback is said before the instances that are down",
			observation{Replicas: 3, StatefulSet: settledSTS(3), Pods: []corev1.Pod{pod("c-0", "primary", true), pod("c-1", "replica", false), pod("c-2", "replica", false)},
				Durability: dolphinv1.DurabilityPreferred,
				Previous: withTopology(previous(dolphinv1.PhaseRunning, true), &dolphinv1.TopologyStatus{Primary: "c-0", SemiSyncFallback: true,
					AcknowledgedAlone: &dolphinv1.AcknowledgedAlone{Primary: "c-0", UpTo: "0-1-9"}})},
			want{dolphinv1.PhaseDegraded, F, T, F, T, "SemiSyncFallback", "c-0", 1}},
		{"writes acknowledged alone that no replica holds yet keep a cluster Degraded after semi-sync is back",
			observation{Replicas: 3, StatefulSet: settledSTS(3), Pods: []corev1.Pod{pod("c-0", "primary", true), pod("c-1", "replica", true), pod("c-2", "replica", true)},
				Previous: withTopology(previous(dolphinv1.PhaseRunning, true), &dolphinv1.TopologyStatus{Primary: "c-0",
					AcknowledgedAlone: &dolphinv1.AcknowledgedAlone{Primary: "c-0", UpTo: "0-1-9"}})},
			want{dolphinv1.PhaseDegraded, F, T, F, T, "AcknowledgedAlone", "c-0", 3}},
		{"the engine's record names the primary while its label is withdrawn",
			observation{Replicas: 2, StatefulSet: settledSTS(2), Pods: []corev1.Pod{pod("c-0", "", true), pod("c-1", "replica", true)},
				Previous: withTopology(previous(dolphinv1.PhaseRunning, true), &dolphinv1.TopologyStatus{Primary: "c-0", State: "Switchover"})},
			// A switchover moves the role on purpose: planned work, not trouble.
			want{dolphinv1.PhaseProgressing, F, F, T, F, "PlannedChange", "c-0", 2}},
		{"a label that disagrees with the record is not a primary",
			observation{Replicas: 2, StatefulSet: settledSTS(2), Pods: []corev1.Pod{pod("c-0", "replica", true), pod("c-1", "primary", true)},
				Previous: withTopology(previous(dolphinv1.PhaseRunning, true), &dolphinv1.TopologyStatus{Primary: "c-0"})},
			want{dolphinv1.PhaseDegraded, F, F, F, T, "PrimaryUnavailable", "", 2}},
		{"deleting",
			observation{Replicas: 1, Deleting: true, StatefulSet: settledSTS(1), Pods: []corev1.Pod{pod("c-0", "primary", true)}},
			want{dolphinv1.PhaseDeleting, T, T, F, F, "AsExpected", "c-0", 1}},
	}
	now := metav1.NewTime(time.Unix(1000, 0))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.obs.Generation = 7
			st := computeStatus(tc.obs, now)
			cond := func(typ string) metav1.ConditionStatus {
				c := meta.FindStatusCondition(st.Conditions, typ)
				if c == nil {
					t.Fatalf("condition %s missing", typ)
				}
				if c.ObservedGeneration != 7 || c.Reason == "" || c.Message == "" {
					t.Errorf("condition %s incomplete: %+v", typ, c)
				}
				return c.Status
			}
			got := want{st.Phase, cond("Ready"), cond("Available"), cond("Progressing"), cond("Degraded"),
				meta.FindStatusCondition(st.Conditions, "Degraded").Reason, st.CurrentPrimary, st.ReadyInstances}
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			wantGen := int64(7)
			if tc.obs.StepErr != nil {
				wantGen = tc.obs.Previous.ObservedGeneration // a failed step observes nothing new
			}
			if st.ObservedGeneration != wantGen {
				t.Errorf("observedGeneration %d, want %d", st.ObservedGeneration, wantGen)
			}
		})
	}
}

func TestComputeStatusKeepsTransitionTimes(t *testing.T) {
	obs := observation{Replicas: 1, StatefulSet: settledSTS(1), Pods: []corev1.Pod{pod("c-0", "primary", true)}}
	first := computeStatus(obs, metav1.NewTime(time.Unix(1000, 0)))
	obs.Previous = first
	second := computeStatus(obs, metav1.NewTime(time.Unix(2000, 0)))
	for _, c := range second.Conditions {
		if c.LastTransitionTime.Unix() != 1000 {
			t.Errorf("%s moved its transition time without a change", c.Type)
		}
	}
	obs.Previous = second
	obs.Pods = []corev1.Pod{pod("c-0", "primary", false)}
	third := computeStatus(obs, metav1.NewTime(time.Unix(3000, 0)))
	if c := meta.FindStatusCondition(third.Conditions, "Ready"); c.LastTransitionTime.Unix() != 3000 {
		t.Errorf("Ready changed but kept transition time %v", c.LastTransitionTime)
	}
}

// A primary the engine cannot replace: Ready and Degraded say why, in the engine's words (a
// failover waiting for writes only the lost primary holds must not look like a slow one).
func TestComputeStatusSaysWhyNoPrimary(t *testing.T) {
	why := "failover from c-0 waits: c-1 received up to 0-1-12 from it, but the best candidate left, c-2, has 0-1-10"
	obs := observation{Replicas: 3, StatefulSet: settledSTS(3), Generation: 7,
		Pods:     []corev1.Pod{pod("c-0", "primary", false), pod("c-1", "replica", false), pod("c-2", "replica", true)},
		Previous: withTopology(previous(dolphinv1.PhaseRunning, true), &dolphinv1.TopologyStatus{Primary: "c-0", State: "PrimaryLost", Message: why})}
	st := computeStatus(obs, metav1.NewTime(time.Unix(1000, 0)))
	for _, typ := range []string{"Ready", "Degraded"} {
		if c := meta.FindStatusCondition(st.Conditions, typ); c == nil || !strings.Contains(c.Message, why) {
			t.Errorf("%s condition %+v does not give the engine's reason", typ, c)
		}
	}
	obs.Previous.Topology.State = "Failover"
	st = computeStatus(obs, metav1.NewTime(time.Unix(1000, 0)))
	if c := meta.FindStatusCondition(st.Conditions, "Ready"); c == nil || strings.Contains(c.Message, why) {
		t.Errorf("a failover under way is not a primary that cannot be replaced: %+v", c)
	}
}

// An errant former primary is named with its position and the annotation that lets Dolphin
// re-clone it; other errant instances keep the automatic repair's message.
func TestTopologyProblemNamesTheHeldFormerPrimary(t *testing.T) {
	p := topologyProblem(&dolphinv1.TopologyStatus{Primary: "c-0", ErrantInstances: []string{"c-1", "c-2"}, ReplacedPrimaries: []string{"c-2"},
		Instances: []dolphinv1.InstanceTopology{{Name: "c-2", GTIDExecuted: "0-1-12"}}}, dolphinv1.DurabilityRequired)
	for _, want := range []string{"c-2 was the primary before an unplanned failover", "(its position 0-1-12)", RecloneApprovedAnnotation + "=c-2",
		"c-1 hold transactions the primary lacks", "then re-clones them", "keeps a copy of those transactions"} {
		if !strings.Contains(p.message, want) {
			t.Errorf("message %q lacks %q", p.message, want)
		}
	}
}

// A former primary that cannot replicate (error 1236) is held like an errant one.
func TestTopologyProblemNamesAFormerPrimaryMeeting1236(t *testing.T) {
	p := topologyProblem(&dolphinv1.TopologyStatus{Primary: "c-0", ReplacedPrimaries: []string{"c-2"},
		Instances: []dolphinv1.InstanceTopology{{Name: "c-2", Error: "Got fatal error 1236 from master"}}}, dolphinv1.DurabilityRequired)
	if p == nil || p.reason != "ErrantFormerPrimary" || !strings.Contains(p.message, RecloneApprovedAnnotation+"=c-2") {
		t.Fatalf("problem %+v", p)
	}
}

// While a switchover or failover moves the primary role, Available says so instead of reading
// as a cluster that never had a primary (kubectl dolphin status showed that during switchovers).
func TestNoPrimaryMessageNamesTheMove(t *testing.T) {
	obs := observation{Replicas: 2, StatefulSet: settledSTS(2), Pods: []corev1.Pod{pod("c-0", "", true), pod("c-1", "replica", true)},
		Previous: withTopology(previous(dolphinv1.PhaseRunning, true), &dolphinv1.TopologyStatus{Primary: "c-0", State: "Switchover",
			SwitchoverInProgress: &dolphinv1.SwitchoverProgress{From: "c-0", To: "c-1", Fenced: true}})}
	for _, tc := range []struct {
		topo *dolphinv1.TopologyStatus
		want string
	}{
		{obs.Previous.Topology, "a planned switchover moves the primary role from c-0 to c-1"},
		{&dolphinv1.TopologyStatus{FailoverInProgress: &dolphinv1.FailoverProgress{From: "c-0"}}, "failing over from c-0"},
		{nil, "no pod is labeled primary yet"},
	} {
		obs.Previous.Topology = tc.topo
		st := computeStatus(obs, metav1.NewTime(time.Unix(1000, 0)))
		c := meta.FindStatusCondition(st.Conditions, dolphinv1.ConditionAvailable)
		if c == nil || c.Reason != "NoPrimary" || !strings.Contains(c.Message, tc.want) {
			t.Errorf("topology %+v: Available %+v, want NoPrimary saying %q", tc.topo, c, tc.want)
		}
	}
}
