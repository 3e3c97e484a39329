package e2e

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestLocalDurability measures spec.durability in the client's view, under the application
// writer through the primary Service (docs/design/0043):
//   - Required (the default): both replicas cut off for 35 s (longer than the 30 s fallback of
//     Preferred). No write is acknowledged meanwhile, the cluster is Degraded saying writes wait,
//     the gauge says so; once the replicas are back the writes are acknowledged again.
//   - Preferred: the same outage. After 30 s the primary acknowledges writes alone; the cluster
//     records it (status.topology.acknowledgedAlone). Then that primary is lost (cut off and hung):
//     the failover does not promote a replica lacking those writes; Dolphin restarts the lost
//     primary, which comes back as the primary with every write.
//
// Every acknowledged write is on every instance at the end.
func TestLocalDurability(t *testing.T) {
	s := upStack(t)
	_, key := s.healthyAppCluster("dur")
	w := s.startSteadyAppWriter("dur")
	acked := func() int { a, _ := w.ackedIDs(); return len(a) }

	// Required.
	primary := s.currentPrimary(key)
	replicas := s.replicasOf(key, primary)
	for _, r := range replicas {
		s.setPodLink(r, false)
	}
	cut := time.Now()
	time.Sleep(time.Second) // a write acknowledged as the links went down is not the outage's
	before := acked()
	s.wantClusterConditionWithin(key, dolphinv1.ConditionDegraded, metav1.ConditionTrue, "WritesWaitForReplica", 30*time.Second)
	if m := s.metrics(); !strings.Contains(m, `mysql_cluster_writes_waiting_for_replica{name="dur",namespace="`+s.ns+`"} 1`) {
		t.Errorf("the writes-waiting gauge is not 1 during the outage:\n%s", grepLines(m, "writes_waiting"))
	}
	time.Sleep(time.Until(cut.Add(35 * time.Second)))
	if during := acked() - before; during != 0 {
		t.Fatalf("Required: %d writes acknowledged with both replicas cut off", during)
	}
	t.Logf("Required: no write acknowledged in %s with both replicas cut off", time.Since(cut).Round(time.Second))
	for _, r := range replicas {
		s.setPodLink(r, true)
	}
	back := time.Now()
	testenv.Eventually(t, 60*time.Second, "writes acknowledged again", func() error {
		if acked() <= before {
			return fmt.Errorf("%d acknowledged", acked())
		}
		return nil
	})
	t.Logf("Required: writes acknowledged again %s after the replicas came back", time.Since(back).Round(time.Millisecond))
	s.waitHealthy(key)

	// Preferred.
	primary = s.preferDurability(key, s.secretValue("dur-credentials", "operator-password"))
	replicas = s.replicasOf(key, primary)
	for _, r := range replicas {
		s.setPodLink(r, false)
	}
	cut = time.Now()
	time.Sleep(time.Second) // a write acknowledged as the links went down is not one acknowledged alone
	before = acked()
	testenv.Eventually(t, 60*time.Second, "writes acknowledged alone", func() error {
		if acked() <= before {
			return fmt.Errorf("%d acknowledged, %d before", acked(), before)
		}
		return nil
	})
	t.Logf("Preferred: writes acknowledged alone %s after the replicas were cut off", time.Since(cut).Round(time.Second))
	var alone *dolphinv1.AcknowledgedAlone
	testenv.Eventually(t, 30*time.Second, "status.topology.acknowledgedAlone", func() error {
		var c dolphinv1.MySQLCluster
		if err := s.c.Get(s.ctx, key, &c); err != nil {
			return err
		}
		if c.Status.Topology == nil || c.Status.Topology.AcknowledgedAlone == nil {
			return fmt.Errorf("not recorded")
		}
		alone = c.Status.Topology.AcknowledgedAlone
		return nil
	})
	if alone.Primary != primary {
		t.Fatalf("acknowledgedAlone %+v, want primary %s", alone, primary)
	}
	s.wantClusterConditionWithin(key, dolphinv1.ConditionDegraded, metav1.ConditionTrue, "SemiSyncFallback", 30*time.Second)
	time.Sleep(2 * time.Second) // more writes acknowledged alone

	// The primary is lost: cut off and hung. The replicas come back without its last writes.
	pid := s.serverPID(primary)
	s.setPodLink(primary, false)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	lost := time.Now()
	for _, r := range replicas {
		s.setPodLink(r, true)
	}
	sawWait := false
	testenv.Eventually(t, 180*time.Second, "the lost primary back as the primary", func() error {
		var c dolphinv1.MySQLCluster
		if err := s.c.Get(s.ctx, key, &c); err != nil {
			return err
		}
		tp := c.Status.Topology
		if tp == nil {
			return fmt.Errorf("no topology")
		}
		if strings.Contains(tp.Message, "acknowledged writes alone") {
			sawWait = true
		}
		if tp.LastPromotion != nil && tp.LastPromotion.From == primary && tp.LastPromotion.Time.After(lost) {
			t.Fatalf("promoted %s without consent: %s", tp.LastPromotion.To, tp.LastPromotion.Reason)
		}
		if c.Status.CurrentPrimary != primary || tp.State != "Healthy" {
			return fmt.Errorf("primary %q, state %s: %s", c.Status.CurrentPrimary, tp.State, tp.Message)
		}
		return nil
	})
	if !sawWait {
		t.Error("the topology never said the failover waits for writes acknowledged alone")
	}
	t.Logf("Preferred: %s back as the primary %s after it was lost, no replica promoted", primary, time.Since(lost).Round(time.Second))
	s.waitHealthy(key)
	testenv.Eventually(t, 60*time.Second, "acknowledgedAlone cleared once a replica holds the writes", func() error {
		var c dolphinv1.MySQLCluster
		if err := s.c.Get(s.ctx, key, &c); err != nil {
			return err
		}
		if a := c.Status.Topology.AcknowledgedAlone; a != nil {
			return fmt.Errorf("still %+v", a)
		}
		return nil
	})

	w.finish()
	ids, failed := w.ackedIDs()
	for _, p := range s.clusterPods("dur") {
		db := s.sqlDBAs("dolphin", s.secretValue("dur-credentials", "operator-password"), p.Status.PodIP+":3306")
		testenv.Eventually(t, 60*time.Second, p.Name+" holds every acknowledged write", func() error {
			if n := lostOn(t, db, ids); n > 0 {
				return fmt.Errorf("%d of %d acknowledged writes missing", n, len(ids))
			}
			return nil
		})
		db.Close()
	}
	t.Logf("writer: %d acknowledged, %d failed (timeouts while writes waited, or the outage), 0 lost", len(ids), failed)
}

// replicasOf are the cluster's pods other than primary.
func (s *stack) replicasOf(key client.ObjectKey, primary string) []string {
	s.t.Helper()
	var out []string
	for _, p := range s.clusterPods(key.Name) {
		if p.Name != primary {
			out = append(out, p.Name)
		}
	}
	return out
}

// preferDurability sets spec.durability Preferred and waits until the primary's semi-sync
// timeout is the 30 s fallback; it returns the primary.
func (s *stack) preferDurability(key client.ObjectKey, operatorPassword string) string {
	s.t.Helper()
	s.patchCluster(key, func(c *dolphinv1.MySQLCluster) { c.Spec.Durability = dolphinv1.DurabilityPreferred })
	primary := s.currentPrimary(key)
	admin := s.sqlDBAs("dolphin", operatorPassword, s.podAddr(primary))
	defer admin.Close()
	testenv.Eventually(s.t, 30*time.Second, "the primary's timeout at 30 s", func() error {
		var ms int64
		if err := admin.QueryRow("SELECT @@rpl_semi_sync_master_timeout").Scan(&ms); err != nil {
			return err
		}
		if ms != 30000 {
			return fmt.Errorf("%d ms", ms)
		}
		return nil
	})
	return primary
}
