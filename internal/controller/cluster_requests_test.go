package controller

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// fakeRunner records what the reconciler hands to the topology engine.
type fakeRunner struct {
	waiting     string // the lost primary whose failover waits ("" none)
	accepted    []string
	switchovers []string // the targets of RequestSwitchover ("" the most advanced replica)
}

func (f *fakeRunner) Update(context.Context, *dolphinv1.MySQLCluster) error { return nil }
func (f *fakeRunner) Stop(types.NamespacedName)                             {}
func (f *fakeRunner) RequestSwitchover(_ context.Context, _ types.NamespacedName, to, _ string) (bool, error) {
	f.switchovers = append(f.switchovers, to)
	return len(f.switchovers) == 1, nil
}
func (f *fakeRunner) AcceptFailoverLoss(_ types.NamespacedName, from string) (bool, error) {
	f.accepted = append(f.accepted, from)
	return from == f.waiting, nil
}

// The failover-accept-loss annotation reaches the engine only for the failover it names while
// that one is in progress, stays while it is (a restarted operator hands it over again), and
// goes once none is — with an event saying nothing was given up when it came too late.
func TestForwardAcceptLoss(t *testing.T) {
	for _, tc := range []struct {
		name         string
		annotation   string
		failoverFrom string // status.topology.failoverInProgress.from ("" none)
		waiting      string
		wantHanded   bool
		wantKept     bool
		wantEvent    string
	}{
		{"the waiting failover it names", "db-0", "db-0", "db-0", true, true, "FailoverLossAccepted"},
		{"no failover in progress", "db-0", "", "", false, false, "nothing given up"},
		{"a failover from another instance", "db-1", "db-0", "db-0", false, false, "nothing given up"},
		{"status still shows the failover the engine has ended", "db-0", "db-0", "", true, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db",
				Annotations: map[string]string{FailoverAcceptLossAnnotation: tc.annotation}}}
			if tc.failoverFrom != "" {
				c.Status.Topology = &dolphinv1.TopologyStatus{FailoverInProgress: &dolphinv1.FailoverProgress{From: tc.failoverFrom, Fenced: true, ReceivedBy: "db-1"}}
			}
			sch := runtime.NewScheme()
			if err := dolphinv1.AddToScheme(sch); err != nil {
				t.Fatal(err)
			}
			cl := fake.NewClientBuilder().WithScheme(sch).WithObjects(c.DeepCopy()).Build()
			runner := &fakeRunner{waiting: tc.waiting}
			rec := events.NewFakeRecorder(10)
			r := &MySQLClusterReconciler{Client: cl, Recorder: rec, Topology: runner}
			if err := r.forwardAcceptLoss(context.Background(), c); err != nil {
				t.Fatal(err)
			}
			if handed := len(runner.accepted) > 0; handed != tc.wantHanded {
				t.Errorf("handed to the engine: %v (%v), want %v", handed, runner.accepted, tc.wantHanded)
			}
			var stored dolphinv1.MySQLCluster
			if err := cl.Get(context.Background(), client.ObjectKeyFromObject(c), &stored); err != nil {
				t.Fatal(err)
			}
			if _, kept := stored.Annotations[FailoverAcceptLossAnnotation]; kept != tc.wantKept {
				t.Errorf("annotation kept: %v, want %v", kept, tc.wantKept)
			}
			select {
			case e := <-rec.Events:
				if tc.wantEvent == "" || !strings.Contains(e, tc.wantEvent) {
					t.Errorf("event %q, want one with %q", e, tc.wantEvent)
				}
			default:
				if tc.wantEvent != "" {
					t.Errorf("no event, want one with %q", tc.wantEvent)
				}
			}
		})
	}
}
