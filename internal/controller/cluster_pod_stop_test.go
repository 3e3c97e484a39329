package controller

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

func TestDecidePodStop(t *testing.T) {
	held := podStopFacts{Deleting: true, Holds: true}
	primary := held
	primary.IsPrimary = true
	for _, tc := range []struct {
		name string
		f    podStopFacts
		want podStopAction
	}{
		{"the primary's pod, not deleted", podStopFacts{IsPrimary: true, Holds: true}, podStopNone},
		{"the primary's pod deleted", primary, podStopSwitchover},
		{"a replica's pod deleted", held, podStopRelease},
		{"the primary's pod deleted while the primary is lost", podStopFacts{IsPrimary: true, Deleting: true, Holds: true, PrimaryLost: true}, podStopRelease},
		{"a pod without the hold (older template, one instance)", podStopFacts{IsPrimary: true, Deleting: true}, podStopNone},
		{"the primary's pod deleted while the cluster is paused (its engine switches nothing over)", podStopFacts{IsPrimary: true, Deleting: true, Holds: true, Paused: true}, podStopRelease},
		{"a hold already over (run out, or a 1 s grace)", podStopFacts{IsPrimary: true, Deleting: true, Holds: true, HoldOver: true}, podStopNone},
	} {
		if got := decidePodStop(tc.f); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestHoldOver checks when a deleted pod's hold has ended by itself: a grace period too short
// for it, or HoldForSwitchoverSeconds since the deletion began.
func TestHoldOver(t *testing.T) {
	now := time.Now()
	deleted := func(grace int64, ago time.Duration) *corev1.Pod {
		ts := metav1.NewTime(now.Add(-ago).Add(time.Duration(grace) * time.Second))
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &ts, DeletionGracePeriodSeconds: &grace}}
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"not deleted", &corev1.Pod{}, false},
		{"60 s grace, deleted 1 s ago", deleted(60, time.Second), false},
		{"60 s grace, deleted 26 s ago", deleted(60, 26*time.Second), true},
		{"Dolphin's own 1 s grace", deleted(1, 0), true},
	} {
		if got := holdOver(tc.pod, now); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestReconcilePodStop runs the pod-stop step over a cluster whose primary's pod and one
// replica's pod are being deleted: one switchover is asked for, the replica is released at
// once, nothing is repeated, and the old primary is released once status shows another one.
func TestReconcilePodStop(t *testing.T) {
	ctx := context.Background()
	c := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db", UID: "c1"},
		Spec:   dolphinv1.MySQLClusterSpec{Instances: 3},
		Status: dolphinv1.MySQLClusterStatus{Topology: &dolphinv1.TopologyStatus{Primary: "db-0"}}}
	pod := func(name string, deleting bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name),
			Labels: resources.SelectorLabels(c)}, Status: corev1.PodStatus{PodIP: "10.0.0.1"}}
		p.Spec.Containers = []corev1.Container{{Name: resources.ContainerMySQLD, Image: "mariadb",
			Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}}}
		if deleting {
			grace := int64(60)
			p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &metav1.Time{Time: time.Now().Add(time.Minute)}, &grace
			p.Finalizers = []string{"test/hold"}
		}
		return p
	}
	sch := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{dolphinv1.AddToScheme, corev1.AddToScheme} {
		if err := add(sch); err != nil {
			t.Fatal(err)
		}
	}
	cl := fake.NewClientBuilder().WithScheme(sch).WithObjects(pod("db-0", true), pod("db-1", true), pod("db-2", false)).Build()
	runner, agents := &fakeRunner{}, &fakeAgent{}
	r := &MySQLClusterReconciler{Client: cl, Recorder: events.NewFakeRecorder(10), Topology: runner, Agents: agents}
	step := func() time.Duration {
		t.Helper()
		var out stepOutcome
		if err := r.reconcilePodStop(ctx, c, &out); err != nil {
			t.Fatal(err)
		}
		return out.requeueAfter
	}
	for pass := 1; pass <= 2; pass++ {
		if again := step(); again == 0 || again > podStopRecheck {
			t.Errorf("pass %d: requeue after %v while the primary's pod is held, want ≤ %v", pass, again, podStopRecheck)
		}
		if len(runner.switchovers) != 1 || runner.switchovers[0] != "" {
			t.Errorf("pass %d: switchovers asked %q, want one to the most advanced replica", pass, runner.switchovers)
		}
		if agents.releases != 1 || len(agents.pods) != 1 || agents.pods[0] != "db-1" {
			t.Errorf("pass %d: %d releases through the agents of %v, want 1 through db-1's", pass, agents.releases, agents.pods)
		}
	}
	c.Status.Topology.Primary = "db-2" // the switchover happened
	if again := step(); again != 0 {
		t.Errorf("requeue after %v with nothing held, want none", again)
	}
	if agents.releases != 2 || agents.pods[1] != "db-0" {
		t.Errorf("%d releases through the agents of %v, want the old primary db-0 released too", agents.releases, agents.pods)
	}
	var stored corev1.Pod
	if err := cl.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "db-0"}, &stored); err != nil || stored.DeletionTimestamp == nil {
		t.Fatalf("the fake lost the deleting pod: %v", err)
	}
}
