package e2e

import (
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/binlog"
	"github.com/dolphin-operator/dolphin/internal/controller"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/objectstore/s3test"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestLocalBinlogArchive turns continuous archiving on for a 3-instance cluster under an
// application writer and follows the archive through a crashed primary (failover), a
// switchover, a second crashed primary, a failover that leaves an unacknowledged tail on the
// old primary (never archived, in no restore), the archiver killed mid-segment and the store hung for a while (the condition
// turns False, then the archive catches up): the archiver pod keeps reading from the replicas
// Service, status and condition say what happens, and at the end the archive in the real S3
// server is one contiguous run of segments from the base backup's position to the primary's,
// holding exactly one transaction per GTID in between — nothing lost, nothing twice — while
// no acknowledged write is missing; an operator restart changes nothing. Then new clusters are
// restored to a time and a GTID between two writers (every row of the first, none of the
// second), from the named base backup or from the one Dolphin chooses (the newest before the
// target), and to the latest archived position (every row of both, from the newest backup).
func TestLocalBinlogArchive(t *testing.T) {
	s := upStack(t)
	srv := s3test.StartOn(t, s.gateway())
	s.createS3Secret("s3", srv.AccessKey, srv.SecretKey)
	_, key := s.healthyAppCluster("arc")
	s.setBackupStore(key, srv)
	s.patchCluster(key, func(c *dolphinv1.MySQLCluster) {
		c.Spec.Backup.ContinuousArchiving = &dolphinv1.ContinuousArchiving{Enabled: true, SegmentMaxAge: &metav1.Duration{Duration: time.Second}}
	})
	s.wantClusterCondition(key, dolphinv1.ConditionContinuousArchiving, metav1.ConditionFalse, "first successful backup")

	w := s.startSteadyAppWriter("arc")
	b1 := s.backupAndWait("b1", "arc", dolphinv1.BackupSucceeded)
	t.Logf("b1 at %s", b1.Status.GTIDPosition)
	primary := s.sqlDB(s.serviceAddr("arc-primary"))
	s.waitArchived(key, primary, "the archive catches up after the base backup")

	// A crash of the primary: a failover, and the archiver follows.
	s.failOverByCrash(key, "the first crash")
	s.waitHealthy(key)
	time.Sleep(2 * time.Second) // writes on the new primary
	s.waitArchived(key, primary, "the archive continues after the failover")

	// A switchover.
	before := s.currentPrimary(key)
	s.patchCluster(key, func(c *dolphinv1.MySQLCluster) {
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[controller.SwitchoverAnnotation] = "auto"
	})
	testenv.Eventually(t, 90*time.Second, "the switchover", func() error {
		if p := s.currentPrimary(key); p == before || p == "" {
			return fmt.Errorf("primary %q", p)
		}
		return nil
	})
	s.waitHealthy(key)
	time.Sleep(2 * time.Second)
	s.waitArchived(key, primary, "the archive continues after the switchover")

	// A second crash of the primary: the archive follows again.
	s.failOverByCrash(key, "the second crash")
	s.waitHealthy(key)
	time.Sleep(2 * time.Second)
	s.waitArchived(key, primary, "the archive continues after the second failover")

	// A failover that leaves an unacknowledged tail on the old primary: it is never archived.
	tail := s.failOverWithUnacknowledgedTail(key)
	s.waitArchived(key, primary, "the archive continues after the failover that dropped a tail")

	// The archiver killed in the middle of a segment: its container restarts and continues
	// after the last stored segment (the half-written one is read again from the source).
	apod := s.archiverPod("arc")
	apid := s.containerPID(apod)
	if err := exec.Command("kill", "-9", strconv.Itoa(apid)).Run(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the archiver restarted", func() error {
		if p := s.containerPID(s.archiverPod("arc")); p == apid {
			return fmt.Errorf("still pid %d", p)
		}
		return nil
	})
	s.waitArchived(key, primary, "the archive continues after the archiver was killed")

	// The operator killed and restarted: the archiver never depended on it, and the status
	// resumes.
	s.crashOperator()
	s.waitArchived(key, primary, "the archive status resumes after an operator restart")

	// The store hangs for a while: the lag grows and the condition turns False (stallAfter
	// 10s), then the archive catches up without a gap.
	s.patchCluster(key, func(c *dolphinv1.MySQLCluster) {
		c.Spec.Backup.ContinuousArchiving.StallAfter = &metav1.Duration{Duration: 10 * time.Second}
	})
	srv.Suspend(t)
	hung := time.Now()
	s.wantClusterConditionWithin(key, dolphinv1.ConditionContinuousArchiving, metav1.ConditionFalse, "Stalled", 90*time.Second)
	t.Logf("ContinuousArchiving turned False %.0fs after the store hung", time.Since(hung).Seconds())
	srv.Resume()
	s.waitArchived(key, primary, "the archive catches up once the store answers again")
	w.finish()
	acked, failed := w.ackedIDs()
	if lost := lostOn(t, primary, acked); lost != 0 {
		t.Fatalf("%d acknowledged writes missing on the primary", lost)
	}
	final := s.waitArchived(key, primary, "the archive holds every transaction at the end")
	t.Logf("writer: %d acknowledged, %d failed; archive %+v", len(acked), failed, final)

	var replicas corev1.Service
	if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: "arc-replicas"}, &replicas); err != nil {
		t.Fatal(err)
	}
	if final.Source != net.JoinHostPort(replicas.Spec.ClusterIP, "3306") {
		t.Errorf("the archiver reads from %q, not the replicas Service %s", final.Source, replicas.Spec.ClusterIP)
	}
	if final.FirstRecoverableTime == nil || final.LastRecoverableTime == nil || !final.LastRecoverableTime.After(final.FirstRecoverableTime.Time) {
		t.Errorf("recoverable window %v – %v", final.FirstRecoverableTime, final.LastRecoverableTime)
	}

	// The archive itself, read from the store.
	store, err := objectstore.New(s.ctx, objectstore.Config{S3: &objectstore.S3Config{Endpoint: srv.Endpoint, Bucket: srv.Bucket,
		Prefix: "e2e/", PathStyle: true, AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := binlog.ListSegments(s.ctx, store, s.ns+"/arc/binlog/")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Err(); err != nil || len(l.Segments) == 0 {
		t.Fatalf("the archive has problems (%v) or no segment (%d)", err, len(l.Segments))
	}
	first, last := l.Segments[0], l.Segments[len(l.Segments)-1]
	var txns int64
	for _, m := range l.Segments {
		txns += m.Transactions
	}
	if first.Start != b1.Status.GTIDPosition || last.End != final.LastArchivedGTID {
		t.Fatalf("the archive runs from %s to %s, want from the backup's %s to %s", first.Start, last.End, b1.Status.GTIDPosition, final.LastArchivedGTID)
	}
	if want := seqOf(last.End) - seqOf(first.Start); txns != want {
		t.Fatalf("%d transactions archived between %s and %s, want %d: one per GTID, none twice", txns, first.Start, last.End, want)
	}
	t.Logf("archive: %d segments, %d transactions, %s → %s", len(l.Segments), txns, first.Start, last.End)
	for _, m := range l.Segments {
		gtids, err := binlog.SegmentGTIDs(s.ctx, store, s.ns+"/arc/binlog/", m)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range gtids {
			if tail.holds(g) {
				t.Fatalf("segment %s holds %s, a transaction of the unacknowledged tail %s", m.Name(), g, tail)
			}
		}
	}

	// A restore check of b1 replays the archive after it, to its end.
	vb := s.verifyAndWait("b1", "with-archive", dolphinv1.VerificationVerified)
	if msg := vb.Status.Verification.Message; !strings.Contains(msg, "archive="+final.LastArchivedGTID+" ") {
		t.Errorf("b1's check %q did not replay the archive to its end %s", msg, final.LastArchivedGTID)
	} else {
		t.Logf("b1's check: %s", msg)
	}

	// Point-in-time restores. The first writer's rows are all committed before the second
	// T; the second writer starts a second after T, so its rows are all stamped after it.
	p1 := final.LastArchivedGTID
	target := time.Now().UTC().Add(time.Second).Truncate(time.Second)
	time.Sleep(time.Until(target.Add(1100 * time.Millisecond)))
	const secondBase = 10_000_000
	w2 := s.startAppWriterFrom("arc", secondBase)
	b2 := s.backupAndWait("b2", "arc", dolphinv1.BackupSucceeded) // ends after the target
	time.Sleep(time.Second)
	w2.finish()
	t.Logf("b2 at %s", b2.Status.GTIDPosition)
	acked2, _ := w2.ackedIDs()
	if len(acked2) == 0 {
		t.Fatal("the second writer wrote nothing")
	}
	s.waitArchived(key, primary, "the archive holds the second writer's rows")
	// pit-time and pit-gtid name b1; pit-auto and pit-latest let Dolphin choose: b1 for a time
	// before b2 ended, b2 for latest.
	restores := map[string]*dolphinv1.PointInTimeTarget{
		"pit-time":   {Time: &metav1.Time{Time: target}},
		"pit-gtid":   {GTID: p1},
		"pit-auto":   {Time: &metav1.Time{Time: target}, Cluster: "arc"},
		"pit-latest": {Latest: true, Cluster: "arc"},
	}
	wantBase := map[string]string{"pit-time": "b1", "pit-gtid": "b1", "pit-auto": "b1", "pit-latest": "b2"}
	for name, pit := range restores {
		bs := &dolphinv1.BootstrapSpec{PointInTime: pit}
		if pit.Cluster == "" {
			bs.Backup = &dolphinv1.BackupReference{Name: "b1"}
		}
		c := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name},
			Spec: dolphinv1.MySQLClusterSpec{Instances: 1, Storage: dolphinv1.StorageSpec{DeletePolicy: dolphinv1.VolumeDelete},
				MySQLConfig: map[string]dolphinv1.MySQLConfigValue{"innodb_buffer_pool_size": "32M"},
				Bootstrap:   bs}}
		if err := s.c.Create(s.ctx, c); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	for name := range restores {
		rk := client.ObjectKey{Namespace: s.ns, Name: name}
		s.waitHealthyN(rk, 1)
		var rc dolphinv1.MySQLCluster
		if err := s.c.Get(s.ctx, rk, &rc); err != nil {
			t.Fatal(err)
		}
		pass := s.secretValue(name+"-credentials", "operator-password")
		db := s.sqlDBAs("dolphin", pass, s.serviceAddr(name+"-primary"))
		// Ready says the Service has its endpoint; kube-proxy applies it on the node up to its
		// minSyncPeriod later (four clusters' Services changing at once here): a client
		// retries a refused connection, as this one does (fresh make test, CPUs busy).
		testenv.Eventually(t, 15*time.Second, name+"'s primary Service answers through kube-proxy", func() error { return db.Ping() })
		got := map[int64]bool{}
		for _, id := range s.ids(db) {
			got[id] = true
		}
		missing, second := 0, 0
		for id := range acked {
			if !got[id] {
				missing++
			}
		}
		for id := range got {
			if id >= secondBase {
				second++
			}
		}
		var pos string
		if err := db.QueryRow("SELECT @@gtid_binlog_pos").Scan(&pos); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: base %s, target GTID %s, %d rows, position %s", name, rc.Status.RestoredFrom.Backup, rc.Status.RestoredFrom.TargetGTID, len(got), pos)
		if got[tailMarker] {
			t.Errorf("%s holds row %d, written only into the old primary's unacknowledged tail", name, tailMarker)
		}
		if rc.Status.RestoredFrom.Backup != wantBase[name] {
			t.Errorf("%s restored from %s, want %s", name, rc.Status.RestoredFrom.Backup, wantBase[name])
		}
		if missing > 0 {
			t.Errorf("%s: %d rows of the first writer, all committed before the target, are missing", name, missing)
		}
		switch name {
		case "pit-latest":
			for id := range acked2 {
				if !got[id] {
					t.Errorf("%s: the second writer's acknowledged row %d is missing", name, id)
					break
				}
			}
		default:
			if second > 0 {
				t.Errorf("%s: %d rows of the second writer, committed after the target, are present", name, second)
			}
			if rc.Status.RestoredFrom.TargetGTID != p1 {
				t.Errorf("%s: the target resolved to %s, want the primary's position after the first writer %s", name, rc.Status.RestoredFrom.TargetGTID, p1)
			}
			if seqOf(pos) < seqOf(p1) {
				t.Errorf("%s: the restored server is at %s, behind its target %s", name, pos, p1)
			}
		}
	}
}

// waitArchived waits until the archive holds the primary's binary log up to where it is now
// (the writer may go on) and the ContinuousArchiving condition is True, and returns the
// archive status.
func (s *stack) waitArchived(key client.ObjectKey, primary *sql.DB, what string) *dolphinv1.ArchiveStatus {
	s.t.Helper()
	var pos string
	testenv.Eventually(s.t, 30*time.Second, "the primary's position", func() error {
		return primary.QueryRow("SELECT @@gtid_binlog_pos").Scan(&pos)
	})
	var out *dolphinv1.ArchiveStatus
	testenv.Eventually(s.t, 120*time.Second, what, func() error {
		var c dolphinv1.MySQLCluster
		if err := s.c.Get(s.ctx, key, &c); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, dolphinv1.ConditionContinuousArchiving)
		if c.Status.Backup == nil || c.Status.Backup.Archive == nil || cond == nil || cond.Status != metav1.ConditionTrue {
			return fmt.Errorf("condition %+v, status %+v", cond, c.Status.Backup)
		}
		a := c.Status.Backup.Archive
		archived, err1 := binlog.Parse(a.LastArchivedGTID)
		want, err2 := binlog.Parse(pos)
		if err1 != nil || err2 != nil || !archived.Covers(want) {
			return fmt.Errorf("archived up to %q, the primary is at %q (lag %ds, %s)", a.LastArchivedGTID, pos, a.LagSeconds, cond.Message)
		}
		out = a
		return nil
	})
	s.t.Logf("%s: archived up to %s (source %s)", what, out.LastArchivedGTID, out.Source)
	return out
}

// tailMarker is the id of the row written only into an unacknowledged tail.
const tailMarker = 5_000_000

// droppedTail is the transactions an old primary had in its binary log that no replica
// received: server's GTIDs in domain 0 after afterSeq, up to lastSeq.
type droppedTail struct {
	server            uint32
	afterSeq, lastSeq uint64
}

func (d droppedTail) holds(g binlog.GTID) bool {
	return g.Domain == 0 && g.Server == d.server && g.Seq > d.afterSeq && g.Seq <= d.lastSeq
}

func (d droppedTail) String() string {
	return fmt.Sprintf("0-%d-%d..0-%d-%d", d.server, d.afterSeq+1, d.server, d.lastSeq)
}

// failOverWithUnacknowledgedTail leaves transactions in the primary's binary log that no
// replica received, then fails over — a network partition, one fault: the replicas' links are
// cut (their host-side veth down), a row (tailMarker) is written straight to the primary as the
// application — it waits for a semi-sync acknowledgement that cannot come — then the primary
// is cut off too and hung (SIGSTOP: its kernel must not retransmit the tail to the replicas once
// their links are back, and a SIGTERM must not commit it), the replicas' links come back and
// Dolphin promotes one of them. The hung primary is then killed; restarted, it must drop the
// tail (--init-rpl-role=SLAVE rolls back what was only prepared) and rejoin. The marker's write
// is never acknowledged, no instance has it (when it reached the binary log before the
// primary hung; the tail itself is checked by GTID), and the tail returned is the GTIDs the new
// primary never had.
func (s *stack) failOverWithUnacknowledgedTail(key client.ObjectKey) droppedTail {
	t := s.t
	t.Helper()
	old := s.currentPrimary(key)
	oldPID := s.serverPID(old)
	var replicas []string
	for _, p := range s.clusterPods(key.Name) {
		if p.Name != old {
			replicas = append(replicas, p.Name)
		}
	}
	for _, r := range replicas {
		s.setPodLink(r, false)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			for _, r := range replicas {
				s.setPodLink(r, true)
			}
		}
	}
	defer restore()
	direct := s.sqlDBAs(appUser, appPassword, s.podAddr(old))
	defer direct.Close()
	var before string
	if err := direct.QueryRow("SELECT @@gtid_binlog_pos").Scan(&before); err != nil {
		t.Fatal(err)
	}
	acked := make(chan error, 1)
	go func() {
		_, err := direct.Exec(fmt.Sprintf("INSERT INTO app.rows (id) VALUES (%d)", tailMarker))
		acked <- err
	}()
	// The marker is in the primary's binary log once its position moves (the application
	// writer's statements wait there too).
	var end string
	testenv.Eventually(t, 10*time.Second, "the tail in the old primary's binary log", func() error {
		if err := direct.QueryRow("SELECT @@gtid_binlog_pos").Scan(&end); err != nil {
			return err
		}
		if seqOf(end) <= seqOf(before) {
			return fmt.Errorf("at %s, %s before the write", end, before)
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond) // let the marker's own commit reach the binary log too
	if err := direct.QueryRow("SELECT @@gtid_binlog_pos").Scan(&end); err != nil {
		t.Fatal(err)
	}
	s.setPodLink(old, false)
	if err := syscall.Kill(oldPID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	restore()
	testenv.Eventually(t, 120*time.Second, "a new primary after the tail", func() error {
		if p := s.currentPrimary(key); p == old || p == "" {
			return fmt.Errorf("primary %q", p)
		}
		return nil
	})
	if err := syscall.Kill(oldPID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		t.Errorf("killing the hung primary %s: %v", old, err)
	}
	select {
	case err := <-acked:
		if err == nil {
			t.Fatalf("the write of row %d to the isolated primary was acknowledged", tailMarker)
		}
		t.Logf("the marker's write failed as it must: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the marker's write neither failed nor returned")
	}
	newPrimary := s.currentPrimary(key)
	endPos, err := binlog.Parse(end)
	if err != nil {
		t.Fatalf("the old primary's position %q: %v", end, err)
	}
	oldGTID, ok := endPos.Last(0)
	if !ok {
		t.Fatalf("the old primary's position %q has no domain 0", end)
	}
	// What the new primary holds of the old primary's transactions (gtid_binlog_state lists the
	// last one of every server).
	pdb := s.sqlDBAs(appUser, appPassword, s.podAddr(newPrimary))
	defer pdb.Close()
	var state string
	if err := pdb.QueryRow("SELECT @@gtid_binlog_state").Scan(&state); err != nil {
		t.Fatal(err)
	}
	tail := droppedTail{server: oldGTID.Server, lastSeq: oldGTID.Seq}
	for _, part := range strings.Split(state, ",") {
		if g, err := binlog.ParseGTID(strings.TrimSpace(part)); err == nil && g.Domain == 0 && g.Server == oldGTID.Server {
			tail.afterSeq = g.Seq
		}
	}
	if tail.afterSeq >= tail.lastSeq {
		t.Fatalf("no tail: the new primary %s has the old primary's transactions up to %d, the old primary had %s (state %s)", newPrimary, tail.afterSeq, end, state)
	}
	var n int
	if err := pdb.QueryRow("SELECT COUNT(*) FROM app.rows WHERE id = ?", tailMarker).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the new primary %s has %d rows %d (%v)", newPrimary, n, tailMarker, err)
	}
	// The old primary rejoins without the tail: nobody is errant.
	s.waitHealthy(key)
	odb := s.sqlDBAs(appUser, appPassword, s.podAddr(old))
	defer odb.Close()
	// Dolphin disconnects the former primary's application clients a few seconds after the
	// Service moved (the primary Service may have sent them there); a connection of ours cut
	// that way is asked again, a row is never excused.
	testenv.Eventually(t, 30*time.Second, "the rejoined old primary answers", func() error {
		return odb.QueryRow("SELECT COUNT(*) FROM app.rows WHERE id = ?", tailMarker).Scan(&n)
	})
	if n != 0 {
		t.Fatalf("the old primary %s, rejoined, has %d rows %d", old, n, tailMarker)
	}
	t.Logf("%s failed over to %s, dropping the unacknowledged tail %s; %s rejoined without it", old, newPrimary, tail, old)
	return tail
}

// failOverByCrash makes the primary fail for good and waits for a failover: its server is
// hung (SIGSTOP) until another instance is primary, then killed (-9), and the node restarts
// it as the replica it must rejoin as. A kill -9 alone is not enough: the node restarts the
// server within the detection window, and a primary that comes back holding every
// acknowledged transaction is rightly made writable again, without a failover.
func (s *stack) failOverByCrash(key client.ObjectKey, what string) {
	s.t.Helper()
	old := s.currentPrimary(key)
	pid := s.serverPID(old)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		s.t.Fatal(err)
	}
	defer func() {
		// Dolphin may have deleted the hung primary's pod (and so its process) already.
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			s.t.Errorf("killing the hung primary %s: %v", old, err)
		}
	}()
	testenv.Eventually(s.t, 90*time.Second, "a new primary after "+what, func() error {
		if p := s.currentPrimary(key); p == old || p == "" {
			return fmt.Errorf("primary %q", p)
		}
		return nil
	})
	s.t.Logf("%s: %s failed over to %s", what, old, s.currentPrimary(key))
}

// patchCluster applies edit to the cluster with a merge patch.
func (s *stack) patchCluster(key client.ObjectKey, edit func(*dolphinv1.MySQLCluster)) {
	s.t.Helper()
	var c dolphinv1.MySQLCluster
	if err := s.c.Get(s.ctx, key, &c); err != nil {
		s.t.Fatal(err)
	}
	patch := client.MergeFrom(c.DeepCopy())
	edit(&c)
	if err := s.c.Patch(s.ctx, &c, patch); err != nil {
		s.t.Fatal(err)
	}
}

// currentPrimary is status.currentPrimary.
func (s *stack) currentPrimary(key client.ObjectKey) string {
	s.t.Helper()
	var c dolphinv1.MySQLCluster
	if err := s.c.Get(s.ctx, key, &c); err != nil {
		s.t.Fatal(err)
	}
	return c.Status.CurrentPrimary
}

// archiverPod is the binlog archiver's pod of cluster.
func (s *stack) archiverPod(cluster string) string {
	s.t.Helper()
	var pods corev1.PodList
	if err := s.c.List(s.ctx, &pods, client.InNamespace(s.ns), client.MatchingLabels{
		"app.kubernetes.io/name": "dolphin-binlog-archive", "app.kubernetes.io/instance": cluster}); err != nil {
		s.t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Running != nil {
			return p.Name
		}
	}
	return ""
}

// wantClusterConditionWithin waits until the cluster's condition typ has status and reason.
func (s *stack) wantClusterConditionWithin(key client.ObjectKey, typ string, status metav1.ConditionStatus, reason string, within time.Duration) {
	s.t.Helper()
	testenv.Eventually(s.t, within, typ+" "+string(status)+" "+reason, func() error {
		var c dolphinv1.MySQLCluster
		if err := s.c.Get(s.ctx, key, &c); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, typ)
		if cond == nil || cond.Status != status || cond.Reason != reason {
			return fmt.Errorf("%s is %+v", typ, cond)
		}
		s.t.Logf("%s %s %s: %s", typ, status, reason, cond.Message)
		return nil
	})
}
