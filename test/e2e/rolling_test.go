package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestLocalRollingChange makes three changes that need a restart on `dolphin local` under an
// application writer through the primary Service: a static setting (performance_schema), a
// patch-version change (10.11 → 10.11.x: a new image tag; make images tags one image both
// ways, so the server binary itself does not change here — the 10.11 → 11.8 upgrade does), and
// TLS turned on (replicas then replicate over TLS); a typo in a mysqlConfig key is refused at
// admission first. Each
// is rolled replicas first, one at a time, then one switchover, then the old primary; no
// acknowledged write is lost, and the cluster is Progressing, never Degraded, meanwhile
// (planned work is not trouble: docs/design/0053).
func TestLocalRollingChange(t *testing.T) {
	s := upStack(t)
	const name = "roll"
	cluster, key := s.healthyAppCluster(name)
	w := s.startSteadyAppWriter(name)
	patch := s.mariadbPatchVersion()

	// A typo in a mysqlConfig key is refused at admission by the webhook the operator's pods
	// serve, with what to change; nothing rolls.
	typo, _ := json.Marshal(map[string]any{"spec": map[string]any{"mysqlConfig": map[string]any{"innodb_buffer_pool_size": "32M", "innodb_bufer_pool_instances": 2}}})
	if err := s.c.Patch(s.ctx, cluster, client.RawPatch(types.MergePatchType, typo)); err == nil ||
		!strings.Contains(err.Error(), "innodb_bufer_pool_instances not known for mariadb") || !strings.Contains(err.Error(), "check the spelling") {
		t.Fatalf("a mysqlConfig typo: %v; want a refusal at admission naming the key", err)
	} else {
		t.Logf("a mysqlConfig typo is refused at admission: %v", err)
	}

	for _, change := range []struct {
		what  string
		patch map[string]any
		check func() error
	}{
		// max_connections written as YAML writes a number (a JSON number, not a string).
		{"static setting performance_schema=ON",
			map[string]any{"mysqlConfig": map[string]any{"innodb_buffer_pool_size": "32M", "performance_schema": "ON", "max_connections": 213}},
			func() error {
				s.waitConfigApplied(key, "performance_schema", "ON")
				s.waitConfigApplied(key, "max_connections", "213")
				return nil
			}},
		{"patch version 10.11 -> " + patch,
			map[string]any{"engine": map[string]string{"version": patch}},
			func() error { return s.imageIs(name, "docker.io/library/mariadb:"+patch) }},
		// Turning TLS on restarts every instance; while some serve TLS and others do not,
		// Dolphin reaches each the way it serves, and replicas are re-pointed over TLS once
		// both ends serve it.
		{"TLS turned on",
			map[string]any{"tls": map[string]bool{"enabled": true}},
			func() error {
				testenv.Eventually(t, 30*time.Second, "every replica replicating over TLS", func() error {
					primary := s.currentPrimary(key)
					for i := range 3 {
						pod := fmt.Sprintf("%s-%d", name, i)
						if pod == primary {
							continue
						}
						ssl, _, _, io, err := s.replicationTLS(name, pod)
						if err != nil {
							return err
						}
						if ssl != "Yes" || io != "Yes" {
							return fmt.Errorf("%s: Master_SSL_Allowed %q, IO %q", pod, ssl, io)
						}
					}
					return nil
				})
				return nil
			}},
	} {
		if err := s.c.Get(s.ctx, key, cluster); err != nil {
			t.Fatal(err)
		}
		primary := cluster.Status.Topology.Primary
		before := s.servers(name, 3)
		order := s.recordReplacements(name, before)
		phases := s.recordPhases(key)
		body, _ := json.Marshal(map[string]any{"spec": change.patch})
		if err := s.c.Patch(s.ctx, cluster, client.RawPatch(types.MergePatchType, body)); err != nil {
			t.Fatal(err)
		}
		s.waitRolled(key, name, before)
		if err := change.check(); err != nil {
			t.Fatalf("%s: %v", change.what, err)
		}
		replaced := order()
		seen := phases()
		t.Logf("%s: phases seen %v", change.what, seen.phases)
		if len(seen.degraded) > 0 {
			t.Errorf("%s: a planned rollout made the cluster Degraded: %v", change.what, seen.degraded)
		}
		if !slices.Contains(seen.phases, dolphinv1.PhaseProgressing) {
			t.Errorf("%s: the rollout was never seen as Progressing (phases %v)", change.what, seen.phases)
		}
		pause := w.takeGap()
		if err := s.c.Get(s.ctx, key, cluster); err != nil {
			t.Fatal(err)
		}
		lp := cluster.Status.Topology.LastPromotion
		t.Logf("%s: replaced %v (primary was %s), switchover %+v, longest write pause %s", change.what, replaced, primary, lp, pause.Round(time.Millisecond))
		if len(replaced) != 3 || replaced[2] != primary || slices.Contains(replaced[:2], primary) {
			t.Errorf("%s: pods replaced in order %v; want both replicas first, then the old primary %s", change.what, replaced, primary)
		}
		if lp == nil || !lp.Planned || lp.From != primary || lp.To == primary {
			t.Errorf("%s: no switchover away from %s before its restart: %+v", change.what, primary, lp)
		}
	}

	w.finish()
	acked, failed := w.ackedIDs()
	s.waitAllInstances(key, 3, len(acked))
	if err := s.c.Get(s.ctx, key, cluster); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if lost := lostOn(t, s.sqlDB(s.podAddr(fmt.Sprintf("%s-%d", name, i))), acked); lost > 0 {
			t.Errorf("%s-%d lacks %d acknowledged writes", name, i, lost)
		}
	}
	t.Logf("%d writes acknowledged, %d failed (refused while a primary was fenced or restarting)", len(acked), failed)
}

// phasesSeen is what recordPhases saw: every phase, in the order first seen, and each time
// the cluster was Degraded (the phase or the condition), with why.
type phasesSeen struct {
	phases   []dolphinv1.Phase
	degraded []string
}

// recordPhases polls a cluster's status every 100 ms and returns a function that stops
// polling and gives what it saw.
func (s *stack) recordPhases(key client.ObjectKey) func() phasesSeen {
	var mu sync.Mutex
	var seen phasesSeen
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			var c dolphinv1.MySQLCluster
			if err := s.c.Get(s.ctx, key, &c); err == nil {
				mu.Lock()
				if p := c.Status.Phase; p != "" && !slices.Contains(seen.phases, p) {
					seen.phases = append(seen.phases, p)
				}
				if d := meta.FindStatusCondition(c.Status.Conditions, dolphinv1.ConditionDegraded); c.Status.Phase == dolphinv1.PhaseDegraded ||
					(d != nil && d.Status == metav1.ConditionTrue) {
					why := string(c.Status.Phase)
					if d != nil {
						why += " " + d.Reason + ": " + d.Message
					}
					if len(seen.degraded) == 0 || seen.degraded[len(seen.degraded)-1] != why {
						seen.degraded = append(seen.degraded, why)
					}
				}
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return func() phasesSeen {
		close(stop)
		<-done
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
}

// recordReplacements polls the pods of a cluster and returns a function that stops polling
// and gives the order in which they were replaced (their UID changed) or restarted.
func (s *stack) recordReplacements(cluster string, before map[string]server) func() []string {
	var mu sync.Mutex
	var order []string
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			for n, b := range before {
				var p corev1.Pod
				err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: n}, &p)
				gone := err != nil || p.UID != b.uid || p.DeletionTimestamp != nil ||
					(len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].RestartCount != b.restarts)
				mu.Lock()
				if gone && !slices.Contains(order, n) {
					order = append(order, n)
				}
				mu.Unlock()
			}
		}
	}()
	return func() []string {
		close(stop)
		<-done
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(order)
	}
}

// imageIs checks the database container image of every pod.
func (s *stack) imageIs(cluster, image string) error {
	for i := range 3 {
		var p corev1.Pod
		if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: fmt.Sprintf("%s-%d", cluster, i)}, &p); err != nil {
			return err
		}
		if got := p.Spec.Containers[0].Image; got != image {
			return fmt.Errorf("%s runs %s, want %s", p.Name, got, image)
		}
	}
	return nil
}
