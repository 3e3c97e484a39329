package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/controller"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// holdFinalizer keeps a deleted pod object (its process stopped) until the test lets it go:
// the StatefulSet re-creates the pod only then.
const holdFinalizer = "e2e.dolphin.dev/hold"

// TestLocalKeptTransactions: an old primary comes back errant after a failover that gave up
// its last acknowledged writes, and nothing it holds is lost (docs/design/0044). In the
// client's view, under the application writer through the primary Service:
//   - spec.durability Preferred; both replicas cut off past the 30 s fallback: the primary
//     acknowledges writes alone. Then it is lost (cut off and hung); its pod object is held, so
//     that it cannot come back before the failover, and a person accepts the loss
//     (failover-accept-loss): a replica is promoted without those writes.
//   - The old primary returns with them: held out of the topology (ErrantFormerPrimary), its
//     data untouched past the re-clone confirmation.
//   - With reclone-approved it is re-cloned, after Dolphin kept a copy of what it held beyond
//     the new primary (status.keptTransactions, on its volume).
//   - `dolphin kept list` lists the copy, `dolphin kept replay` puts it on the primary.
//
// At the end every acknowledged write is on every instance.
func TestLocalKeptTransactions(t *testing.T) {
	s := upStack(t)
	_, key := s.healthyAppCluster("kept")
	opPassword := s.secretValue("kept-credentials", "operator-password")
	primary := s.preferDurability(key, opPassword)
	w := s.startSteadyAppWriter("kept")
	acked := func() int { a, _ := w.ackedIDs(); return len(a) }

	replicas := s.replicasOf(key, primary)
	for _, r := range replicas {
		s.setPodLink(r, false)
	}
	testenv.Eventually(t, 90*time.Second, "status.topology.acknowledgedAlone", func() error {
		if tp := s.cluster(key).Status.Topology; tp == nil || tp.AcknowledgedAlone == nil || tp.AcknowledgedAlone.Primary != primary {
			return fmt.Errorf("not recorded")
		}
		return nil
	})
	before := acked()
	testenv.Eventually(t, 30*time.Second, "more writes acknowledged alone", func() error {
		if acked() < before+20 {
			return fmt.Errorf("%d acknowledged, %d before", acked(), before)
		}
		return nil
	})

	// The primary is lost; its pod cannot come back before the failover.
	s.patchPod(primary, func(p *corev1.Pod) { p.Finalizers = append(p.Finalizers, holdFinalizer) })
	pid := s.serverPID(primary)
	s.setPodLink(primary, false)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	lost := time.Now()
	for _, r := range replicas {
		s.setPodLink(r, true)
	}
	testenv.Eventually(t, 120*time.Second, "the failover waiting for the lost primary's writes", func() error {
		c := s.cluster(key)
		if tp := c.Status.Topology; tp == nil || tp.FailoverInProgress == nil || tp.FailoverInProgress.From != primary {
			return fmt.Errorf("topology %+v", c.Status.Topology)
		}
		return nil
	})
	s.patchCluster(key, func(c *dolphinv1.MySQLCluster) {
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[controller.FailoverAcceptLossAnnotation] = primary
	})
	var promo *dolphinv1.PromotionRecord
	testenv.Eventually(t, 120*time.Second, "a replica promoted with the loss accepted", func() error {
		tp := s.cluster(key).Status.Topology
		if tp == nil || tp.LastPromotion == nil || tp.LastPromotion.From != primary || !tp.LastPromotion.Time.After(lost) {
			return fmt.Errorf("last promotion %+v", tp.LastPromotion)
		}
		promo = tp.LastPromotion
		return nil
	})
	if promo.LossAccepted == "" {
		t.Fatalf("promotion %+v does not record the accepted loss", promo)
	}
	t.Logf("%s promoted %s after %s was lost, loss accepted: %s", promo.To, time.Since(lost).Round(time.Second), primary, promo.LossAccepted)

	// The old primary comes back with the writes the new one lacks: held.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
		t.Fatal(err)
	}
	s.patchPod(primary, func(p *corev1.Pod) {
		p.Finalizers = slices.DeleteFunc(p.Finalizers, func(f string) bool { return f == holdFinalizer })
	})
	s.wantClusterConditionWithin(key, dolphinv1.ConditionDegraded, metav1.ConditionTrue, "ErrantFormerPrimary", 180*time.Second)
	held := s.pod(primary)
	time.Sleep(25 * time.Second) // past the re-clone confirmation (15 s)
	if c := s.cluster(key); c.Status.LastReclone != nil || len(c.Status.KeptTransactions) != 0 || s.pod(primary).UID != held.UID {
		t.Fatalf("the held former primary was touched: lastReclone %+v, kept %+v", c.Status.LastReclone, c.Status.KeptTransactions)
	}
	t.Logf("%s held out as an errant former primary", primary)

	// Consent: a copy is kept, then it is re-cloned.
	s.patchCluster(key, func(c *dolphinv1.MySQLCluster) {
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[controller.RecloneApprovedAnnotation] = primary
	})
	var kept dolphinv1.KeptTransactions
	testenv.Eventually(t, 120*time.Second, "a kept copy, then the re-clone", func() error {
		c := s.cluster(key)
		if len(c.Status.KeptTransactions) != 1 || c.Status.LastReclone == nil || c.Status.LastReclone.Kept == "" {
			return fmt.Errorf("kept %+v, lastReclone %+v", c.Status.KeptTransactions, c.Status.LastReclone)
		}
		kept = c.Status.KeptTransactions[0]
		return nil
	})
	if kept.Instance != primary || kept.Primary != promo.To || kept.Transactions == 0 || kept.Name != s.cluster(key).Status.LastReclone.Kept {
		t.Fatalf("kept copy %+v: want one of %s against %s", kept, primary, promo.To)
	}
	t.Logf("kept %d transactions %s of %s at %s", kept.Transactions, kept.GTIDs, primary, kept.Location)
	s.waitHealthy(key)

	// Before the replay, the new primary lacks acknowledged writes; after it, none.
	newPrimary := s.currentPrimary(key)
	ids, _ := w.ackedIDs()
	pdb := s.sqlDBAs("dolphin", opPassword, s.podAddr(newPrimary))
	defer pdb.Close()
	missing := lostOn(t, pdb, ids)
	if missing == 0 {
		t.Fatal("the new primary holds every acknowledged write before the replay: the test did not make any depend on the copy")
	}
	dir := s.claimDir("data-" + primary)
	if out := s.run("kept", "list", "--directory", dir); !strings.Contains(out, kept.Name) {
		t.Fatalf("dolphin kept list does not list %s:\n%s", kept.Name, out)
	}
	host, port, err := net.SplitHostPort(s.podAddr(newPrimary))
	if err != nil {
		t.Fatal(err)
	}
	replay := exec.Command(s.bin, "kept", "replay", kept.Name, "--directory", dir, "--",
		"--host="+host, "--port="+port, "--user=dolphin")
	replay.Env = append(os.Environ(), "MYSQL_PWD="+opPassword)
	out, err := replay.CombinedOutput()
	if err != nil {
		t.Fatalf("dolphin kept replay: %v\n%s", err, out)
	}
	t.Logf("%s: %d acknowledged writes were only in the copy; %s", strings.TrimSpace(string(out)), missing, kept.GTIDs)

	w.finish()
	ids, failed := w.ackedIDs()
	for _, p := range s.clusterPods("kept") {
		db := s.sqlDBAs("dolphin", opPassword, p.Status.PodIP+":3306")
		testenv.Eventually(t, 60*time.Second, p.Name+" holds every acknowledged write", func() error {
			if n := lostOn(t, db, ids); n > 0 {
				return fmt.Errorf("%d of %d acknowledged writes missing", n, len(ids))
			}
			return nil
		})
		db.Close()
	}
	t.Logf("writer: %d acknowledged, %d failed, 0 lost", len(ids), failed)
}

// cluster reads the MySQLCluster.
func (s *stack) cluster(key client.ObjectKey) *dolphinv1.MySQLCluster {
	s.t.Helper()
	var c dolphinv1.MySQLCluster
	if err := s.c.Get(s.ctx, key, &c); err != nil {
		s.t.Fatal(err)
	}
	return &c
}

// pod reads a pod of the test's namespace.
func (s *stack) pod(name string) *corev1.Pod {
	s.t.Helper()
	var p corev1.Pod
	if err := s.c.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: name}, &p); err != nil {
		s.t.Fatal(err)
	}
	return &p
}

// patchPod changes a pod with a merge patch built from edit.
func (s *stack) patchPod(name string, edit func(*corev1.Pod)) {
	s.t.Helper()
	p := s.pod(name)
	patch := client.MergeFrom(p.DeepCopy())
	edit(p)
	if err := s.c.Patch(s.ctx, p, patch); err != nil {
		s.t.Fatal(err)
	}
}
