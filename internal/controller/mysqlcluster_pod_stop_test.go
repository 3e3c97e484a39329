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
	for _, tc := range []struct {
		pod       string
		deleting  bool
		primary   string
		instances int32
		want      podStopAction
	}{
		{"db-0", false, "db-0", 3, podStopNone},
		{"db-0", true, "db-0", 3, podStopSwitchover},
		{"db-0", true, "db-0", 1, podStopNone},
		{"db-1", true, "db-0", 3, podStopRelease},
		{"db-0", true, "db-1", 3, podStopRelease}, // switched over already
		{"db-0", true, "", 3, podStopRelease},     // no primary recorded: nothing to move
	} {
		if got := decidePodStop(tc.pod, tc.deleting, tc.primary, tc.instances); got != tc.want {
			t.Errorf("decidePodStop(%s, deleting %v, primary %q, %d instances) = %v, want %v",
				tc.pod, tc.deleting, tc.primary, tc.instances, got, tc.want)
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
		if deleting {
			p.DeletionTimestamp, p.Finalizers = &metav1.Time{Time: time.Now()}, []string{"test/hold"}
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
		rctx, requeue := withRequeue(ctx)
		if err := r.reconcilePodStop(rctx, c); err != nil {
			t.Fatal(err)
		}
		return requeue()
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
