package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestLocalCloneAndReclone: with the primary's binary logs purged (so no new replica can
// replay history from the start), scaling 3 → 5 seeds the new instances by cloning a healthy
// peer; then a replica made errant by a write of its own is discarded and re-cloned by
// itself, comes back without the errant row, and no acknowledged write is lost.
func TestLocalCloneAndReclone(t *testing.T) {
	s := upStack(t)
	c, key := s.healthyAppCluster("cl")
	w := s.startSteadyAppWriter("cl")
	primary := s.sqlDB(s.serviceAddr("cl-primary"))
	time.Sleep(2 * time.Second)
	for _, q := range []string{"FLUSH BINARY LOGS", "PURGE BINARY LOGS BEFORE NOW() + INTERVAL 1 SECOND"} {
		if _, err := primary.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var firstBinlog string
	if err := primary.QueryRow("SELECT @@gtid_binlog_state").Scan(&firstBinlog); err != nil {
		t.Fatal(err)
	}
	t.Logf("primary's binary logs purged; binlog state %s", firstBinlog)

	// Scale 3 → 5: the new instances are cloned.
	patch := client.MergeFrom(c.DeepCopy())
	c.Spec.Instances = 5
	if err := s.c.Patch(s.ctx, c, patch); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	s.waitHealthyN(key, 5)
	t.Logf("scaled to 5 in %s", time.Since(start).Round(100*time.Millisecond))
	for _, pod := range []string{"cl-3", "cl-4"} {
		note := s.eventNote("Seeding", "seeding "+pod+":")
		if !strings.Contains(note, "clone from cl-") {
			t.Fatalf("%s was seeded as %q, want a clone", pod, note)
		}
		t.Logf("%s", note)
	}

	// An errant write on a replica: Dolphin discards it and re-clones the instance.
	victim := s.sqlDB(s.podAddr("cl-4"))
	if _, err := victim.Exec("INSERT INTO app.rows VALUES (999999999)"); err != nil {
		t.Fatalf("errant write on cl-4: %v", err)
	}
	var rec *dolphinv1.RecloneRecord
	testenv.Eventually(t, 120*time.Second, "cl-4 re-cloned", func() error {
		var cl dolphinv1.MySQLCluster
		if err := s.c.Get(s.ctx, key, &cl); err != nil {
			return err
		}
		if cl.Status.LastReclone == nil || cl.Status.LastReclone.Instance != "cl-4" {
			return fmt.Errorf("lastReclone %+v, errant %v", cl.Status.LastReclone, cl.Status.Topology)
		}
		rec = cl.Status.LastReclone
		return nil
	})
	t.Logf("re-clone: %s; discarded %s; kept %s", rec.Reason, rec.Discarded, rec.Kept)
	if !strings.Contains(rec.Reason, "errant") {
		t.Fatalf("re-clone reason %q", rec.Reason)
	}
	// The errant write was kept before it was discarded (docs/design/0044): exactly it.
	if kept := s.cluster(key).Status.KeptTransactions; rec.Kept == "" || len(kept) != 1 || kept[0].Name != rec.Kept ||
		kept[0].Instance != "cl-4" || kept[0].Transactions != 1 || !strings.HasPrefix(kept[0].GTIDs, "0-1004-") {
		t.Fatalf("kept %+v for re-clone %+v: want the one errant transaction of cl-4", kept, rec)
	}
	s.waitHealthyN(key, 5)
	testenv.Eventually(t, 60*time.Second, "cl-4 without the errant row and caught up", func() error {
		db := s.sqlDB(s.podAddr("cl-4"))
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM app.rows WHERE id = 999999999").Scan(&n); err != nil {
			return err
		}
		if n != 0 {
			t.Fatal("the errant row survived the re-clone")
		}
		got, err := s.count(db)
		if err != nil {
			return err
		}
		want, err := s.count(primary)
		if err != nil {
			return err
		}
		if got < want-50 {
			return fmt.Errorf("cl-4 %d rows, primary %d", got, want)
		}
		return nil
	})
	w.finish()
	acked, failed := w.ackedIDs()
	for _, pod := range []string{"cl-0", "cl-1", "cl-2", "cl-3", "cl-4"} {
		testenv.Eventually(t, 60*time.Second, pod+" holds every acknowledged write", func() error {
			if lost := lostOn(t, s.sqlDB(s.podAddr(pod)), acked); lost != 0 {
				return fmt.Errorf("%d acknowledged writes missing", lost)
			}
			return nil
		})
	}
	t.Logf("writer: %d acknowledged, %d failed; every instance holds all of them", len(acked), failed)
}

// waitHealthyN waits until the cluster is Ready with n ready instances, none errant.
func (s *stack) waitHealthyN(key client.ObjectKey, n int) {
	s.t.Helper()
	testenv.Eventually(s.t, 240*time.Second, fmt.Sprintf("%d instances Ready and healthy", n), func() error {
		var c dolphinv1.MySQLCluster
		if err := s.c.Get(s.ctx, key, &c); err != nil {
			return err
		}
		t := c.Status.Topology
		if !meta.IsStatusConditionTrue(c.Status.Conditions, "Ready") || int(c.Status.ReadyInstances) != n || t == nil ||
			t.State != "Healthy" || len(t.ErrantInstances) > 0 {
			return fmt.Errorf("phase %s, %d ready, topology %+v", c.Status.Phase, c.Status.ReadyInstances, t)
		}
		return nil
	})
}

// eventNote returns the note of the newest event with reason whose note contains part.
func (s *stack) eventNote(reason, part string) string {
	s.t.Helper()
	var list eventsv1.EventList
	if err := s.c.List(s.ctx, &list, client.InNamespace(s.ns)); err != nil {
		s.t.Fatal(err)
	}
	var notes []string
	for _, e := range list.Items {
		if e.Reason == reason && strings.Contains(e.Note, part) {
			notes = append(notes, e.Note)
		}
	}
	if len(notes) == 0 {
		s.t.Fatalf("no %s event with %q", reason, part)
	}
	slices.Sort(notes)
	return notes[len(notes)-1]
}
