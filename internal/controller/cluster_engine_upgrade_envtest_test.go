package controller

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestEnvtestEngineUpgradeRunsBesideTheReconcile: the engine-upgrade step starts the agents'
// runs and returns at once, asking to be looked at again, while the agents are still busy
// (a real upgrade is ~9 s per instance under load, and the step used to hold the whole
// reconcile that long); each pod is recorded when its run ends; a failed run is retried
// after engineUpgradeRetry, not before, and never run twice at once.
func TestEnvtestEngineUpgradeRunsBesideTheReconcile(t *testing.T) {
	needEnvtest(t)
	fake := &fakeAgent{upgradeGate: make(chan struct{})}
	c, key, r := recloneFixture(t, fake)
	ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
	// The whole reconcile once: the cluster's credentials (the runs read the operator's
	// password) and its first engine-upgrade step, which must not wait for the agents either.
	reconciled := make(chan error, 1)
	go func() {
		_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
		reconciled <- err
	}()
	select {
	case err := <-reconciled:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the reconcile waited for the agents' engine upgrades")
	}
	cl := getCluster(t, c, key)

	step := func() stepOutcome {
		t.Helper()
		var out stepOutcome
		done := make(chan error, 1)
		go func() { done <- r.reconcileEngineUpgrade(ctx, cl, &out) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the engine-upgrade step waited for the agents' runs")
		}
		return out
	}
	out := step()
	if out.requeueAfter == 0 || out.requeueAfter > engineUpgradePoll {
		t.Errorf("requeue after %v while runs are under way, want %v", out.requeueAfter, engineUpgradePoll)
	}
	step() // again while they run: no second run of the same pod
	calls := func() int { fake.mu.Lock(); defer fake.mu.Unlock(); return fake.upgrades }
	testenv.Eventually(t, 10*time.Second, "three runs started", func() error {
		if n := calls(); n != 3 {
			var errs []error
			for _, n := range []string{"db-0", "db-1", "db-2"} {
				var p corev1.Pod
				if err := c.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: n}, &p); err == nil {
					if run := r.upgrades.get(p.UID); run != nil && run.err != nil {
						errs = append(errs, run.err)
					}
				}
			}
			return fmt.Errorf("%d runs (%v)", n, errors.Join(errs...))
		}
		return nil
	})
	time.Sleep(200 * time.Millisecond)
	if n := calls(); n != 3 {
		t.Fatalf("%d runs of the agents' upgrade for three pods: a pod ran twice at once", n)
	}
	recorded := func(name string) string {
		var p corev1.Pod
		if err := c.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: name}, &p); err != nil {
			t.Fatal(err)
		}
		return p.Annotations[EngineUpgradedAnnotation]
	}
	if v := recorded("db-0"); v != "" {
		t.Fatalf("db-0 recorded %q before its run ended", v)
	}

	close(fake.upgradeGate)
	testenv.Eventually(t, 10*time.Second, "every pod recorded", func() error {
		for _, n := range []string{"db-0", "db-1", "db-2"} {
			if v := recorded(n); v != "10.11.19-MariaDB" {
				return fmt.Errorf("%s recorded %q", n, v)
			}
		}
		return nil
	})
	if out := step(); out.requeueAfter != 0 {
		t.Errorf("requeue after %v with every pod recorded, want none", out.requeueAfter)
	}

	// A failing run: retried only after engineUpgradeRetry.
	fake.mu.Lock()
	fake.upgradeGate, fake.upgradeErr, fake.upgrades = nil, errors.New("mariadb-upgrade: exit status 1"), 0
	fake.mu.Unlock()
	var p corev1.Pod
	if err := c.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: "db-1"}, &p); err != nil {
		t.Fatal(err)
	}
	base := p.DeepCopy()
	delete(p.Annotations, EngineUpgradedAnnotation)
	if err := c.Patch(ctx, &p, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	step()
	testenv.Eventually(t, 10*time.Second, "db-1's run failed", func() error {
		if run := r.upgrades.get(p.UID); run == nil || !run.done {
			return errors.New("not ended")
		}
		return nil
	})
	out = step()
	if out.requeueAfter <= engineUpgradePoll || out.requeueAfter > engineUpgradeRetry {
		t.Errorf("requeue after %v after a failed run, want the rest of %v", out.requeueAfter, engineUpgradeRetry)
	}
	if n := calls(); n != 1 {
		t.Errorf("%d runs after one failure inside the retry delay, want 1", n)
	}
	if v := recorded("db-1"); v != "" {
		t.Errorf("db-1 recorded %q after a failed run", v)
	}
}
