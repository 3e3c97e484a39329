package backup

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestServerTakeFromReplicaAndRestore backs up an idle replica, checks the manifest against
// the replica's GTID state, restores it onto another server, which then holds every row and
// the manifest's position, and replicates from the primary from there. The stored backup is
// then damaged (one byte) and cut short of its manifest.
func TestServerTakeFromReplicaAndRestore(t *testing.T) {
	tc := startCluster(t)
	r := tc.replica
	binlogPos := tc.str(r, "SELECT @@gtid_binlog_pos")
	currentPos := tc.str(r, "SELECT @@gtid_current_pos")
	slavePos := tc.str(r, "SELECT @@gtid_slave_pos")
	primaryPos := tc.str(tc.primary, "SELECT @@gtid_binlog_pos")
	if binlogPos == "" || binlogPos != primaryPos {
		t.Fatalf("replica gtid_binlog_pos %q, primary %q: log_slave_updates is off?", binlogPos, primaryPos)
	}

	dirStore, root := newStore(t)
	rec := &recordingStore{Store: dirStore}
	tmp := t.TempDir()
	opts := takeOptions(r, "ns/c/b1/")
	opts.TmpDir = tmp
	var calls, last atomic.Int64
	opts.Progress = func(n int64) { calls.Add(1); last.Store(n) }
	began := time.Now()
	m, err := Take(t.Context(), opts, rec)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	t.Logf("Take: %v, %d raw bytes stored as %d, GTID %s", time.Since(began).Round(time.Millisecond),
		m.Objects[0].RawSize, m.StoredBytes(), m.GTIDPosition)

	// The manifest.
	if m.GTIDPosition != binlogPos || m.GTIDPosition != currentPos {
		t.Errorf("GTIDPosition %q, replica had gtid_binlog_pos %q, gtid_current_pos %q", m.GTIDPosition, binlogPos, currentPos)
	}
	if m.ReplicaGTIDPosition != slavePos {
		t.Errorf("ReplicaGTIDPosition %q, replica had gtid_slave_pos %q", m.ReplicaGTIDPosition, slavePos)
	}
	if m.BinlogFile == "" || m.BinlogPosition == 0 {
		t.Errorf("binlog file %q position %d", m.BinlogFile, m.BinlogPosition)
	}
	if m.Format != ManifestFormat || m.Name != "b1" || m.Namespace != "ns" || m.Cluster != "c" ||
		m.SourceInstance != r.Name || m.SourceRole != "replica" || m.Flavor != "mariadb" || m.Compression != "zstd" {
		t.Errorf("manifest fields: %+v", m)
	}
	if !strings.HasPrefix(m.ServerVersion, "10.11.") || !strings.HasPrefix(m.Tool, "mariadb-backup 10.11.") {
		t.Errorf("ServerVersion %q, Tool %q", m.ServerVersion, m.Tool)
	}
	if m.StartTime.IsZero() || m.EndTime.Before(m.StartTime) {
		t.Errorf("StartTime %v, EndTime %v", m.StartTime, m.EndTime)
	}
	if len(m.Objects) != 1 {
		t.Fatalf("objects %+v", m.Objects)
	}
	o := m.Objects[0]
	data, err := os.ReadFile(filepath.Join(root, "ns/c/b1", DataObjectKey))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if o.Key != DataObjectKey || o.Size != int64(len(data)) || o.SHA256 != hex.EncodeToString(sum[:]) || o.RawSize <= o.Size {
		t.Errorf("object %+v, stored %d bytes with sha256 %x", o, len(data), sum)
	}
	if calls.Load() == 0 || last.Load() != o.Size {
		t.Errorf("Progress called %d times, last with %d, want the stored size %d", calls.Load(), last.Load(), o.Size)
	}
	if got, want := rec.committed(), []string{"ns/c/b1/" + DataObjectKey, "ns/c/b1/" + ManifestKey}; !slices.Equal(got, want) {
		t.Errorf("commits %q, want %q (the manifest last)", got, want)
	}
	if files := storeFiles(t, root); len(files) != 2 {
		t.Errorf("store holds %q", files)
	}
	if ents := dirEntries(t, tmp); len(ents) != 0 {
		t.Errorf("TmpDir still holds %q (the password file?)", ents)
	}
	read, err := ReadManifest(t.Context(), dirStore, "ns/c/b1")
	if err != nil || !reflect.DeepEqual(read, m) {
		t.Errorf("ReadManifest = %+v, %v\nTake returned %+v", read, err, m)
	}
	if _, err := Verify(t.Context(), dirStore, "ns/c/b1/"); err != nil {
		t.Errorf("Verify: %v", err)
	}
	if _, err := Take(t.Context(), opts, dirStore); err == nil || !strings.Contains(err.Error(), "exists already") {
		t.Errorf("a second Take into the same prefix: %v", err)
	}

	// Written after the backup: the restored server gets these by replication.
	tc.exec(tc.primary, "INSERT INTO app.t SELECT seq, 'after the backup' FROM app.seq_100001_to_100100")

	x := tc.spare
	tc.restoreInto(x, dirStore, "ns/c/b1/")
	if n := tc.count(x, "app.t"); n != seedRows {
		t.Errorf("restored app.t has %d rows, want %d", n, seedRows)
	}
	if got := tc.str(x, "SELECT @@gtid_slave_pos"); got != m.GTIDPosition {
		t.Errorf("restored gtid_slave_pos %q, manifest %q", got, m.GTIDPosition)
	}
	tc.replicate(x)
	tc.waitCaughtUp(x)
	if n := tc.count(x, "app.t"); n != seedRows+100 {
		t.Errorf("restored server after replication: %d rows, want %d", n, seedRows+100)
	}
	if a, b := tc.checksum(x, "app.t"), tc.checksum(tc.primary, "app.t"); a != b {
		t.Errorf("checksums differ: restored %s, primary %s", a, b)
	}

	t.Run("corrupt byte", func(t *testing.T) {
		copyFile(t, filepath.Join(root, "ns/c/b1", DataObjectKey), filepath.Join(root, "ns/c/bad", DataObjectKey))
		copyFile(t, filepath.Join(root, "ns/c/b1", ManifestKey), filepath.Join(root, "ns/c/bad", ManifestKey))
		testenv.FlipByte(t, filepath.Join(root, "ns/c/bad", DataObjectKey))
		target := filepath.Join(t.TempDir(), "data")
		_, err := Restore(t.Context(), dirStore, "ns/c/bad/", RestoreOptions{TargetDir: target})
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Restore: %v, want ErrCorrupt", err)
		}
		for _, want := range []string{"ns/c/bad/" + DataObjectKey, o.SHA256} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %s", err, want)
			}
		}
		if ents := dirEntries(t, target); len(ents) != 0 {
			t.Errorf("target holds %q", ents)
		}
		if _, err := Verify(t.Context(), dirStore, "ns/c/bad/"); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Verify: %v, want ErrCorrupt", err)
		}
	})
	t.Run("no manifest", func(t *testing.T) {
		copyFile(t, filepath.Join(root, "ns/c/b1", DataObjectKey), filepath.Join(root, "ns/c/half", DataObjectKey))
		target := filepath.Join(t.TempDir(), "data")
		_, err := Restore(t.Context(), dirStore, "ns/c/half/", RestoreOptions{TargetDir: target})
		if !errors.Is(err, ErrIncomplete) {
			t.Errorf("Restore: %v, want ErrIncomplete", err)
		}
		if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Restore of an incomplete backup created the target: %v", err)
		}
	})
}

// TestServerTakeUnderWrites backs up a replica while the primary commits one row per
// transaction as fast as it can, and checks on the restored server that the data is exactly what the
// manifest's GTID position says: as many rows as transactions up to that position, and
// replication from there neither repeats nor skips one. With the tool's own position (not
// BINLOG_GTID_POS, see exactPosition) it failed on the first run under load.
func TestServerTakeUnderWrites(t *testing.T) {
	tc := startCluster(t)
	base := seqOf(t, tc.str(tc.primary, "SELECT @@gtid_binlog_pos"))
	w := tc.startWriter()
	time.Sleep(200 * time.Millisecond)
	store, _ := newStore(t)
	opts := takeOptions(tc.replica, "ns/c/live/")
	m, err := Take(t.Context(), opts, store)
	time.Sleep(100 * time.Millisecond) // writes after the backup's position, whatever the timing
	total := w.stop()
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	inBackup := int64(seqOf(t, m.GTIDPosition) - base)
	t.Logf("%d writes, %d of them before the backup's position %s", total, inBackup, m.GTIDPosition)
	if inBackup <= 0 || inBackup >= total {
		t.Errorf("backup position %s is not inside the writes (%d after seq %d)", m.GTIDPosition, total, base)
	}

	x := tc.spare
	tc.restoreInto(x, store, "ns/c/live/")
	if n := tc.count(x, "app.w"); int64(n) != inBackup {
		t.Errorf("restored app.w has %d rows, the position %s says %d", n, m.GTIDPosition, inBackup)
	}
	if got := tc.str(x, "SELECT @@gtid_slave_pos"); got != m.GTIDPosition {
		t.Errorf("restored gtid_slave_pos %q, manifest %q", got, m.GTIDPosition)
	}
	tc.replicate(x)
	tc.waitCaughtUp(x)
	if n := tc.count(x, "app.w"); int64(n) != total {
		t.Errorf("after replication app.w has %d rows, the primary committed %d", n, total)
	}
}

// TestServerTakeMakesTheApplierSerial checks serialApply on a replica under writes while
// something keeps starting its applier, as Dolphin's engine does with a stopped one: during
// the tool's run the applier has no parallel threads, afterwards it has its 4 again and runs,
// and the backup holds exactly what its position says. A replica whose applier was stopped
// gets its threads back but stays stopped.
func TestServerTakeMakesTheApplierSerial(t *testing.T) {
	tc := startCluster(t)
	if got := tc.str(tc.replica, "SELECT @@slave_parallel_threads"); got != "4" {
		t.Fatalf("replica slave_parallel_threads %s, want the production my.cnf's 4", got)
	}
	base := seqOf(t, tc.str(tc.primary, "SELECT @@gtid_binlog_pos"))
	w := tc.startWriter()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var starts atomic.Int64
	wg.Go(func() { // the engine: a stopped applier is started again
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if _, err := tc.db(tc.replica).Exec("START SLAVE SQL_THREAD"); err == nil {
				starts.Add(1)
			}
		}
	})
	time.Sleep(200 * time.Millisecond)
	store, _ := newStore(t)
	opts := takeOptions(tc.replica, "ns/c/serial/")
	var during sync.Once
	threadsDuring := ""
	opts.Progress = func(int64) {
		during.Do(func() { threadsDuring = tc.str(tc.replica, "SELECT @@slave_parallel_threads") })
	}
	m, err := Take(t.Context(), opts, store)
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	writes := w.stop()
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	t.Logf("%d writes, backup at %s, %d START SLAVE SQL_THREAD sent during the run", writes, m.GTIDPosition, starts.Load())
	if threadsDuring != "0" {
		t.Errorf("slave_parallel_threads during the backup %q, want 0 (a serial applier)", threadsDuring)
	}
	if got := tc.str(tc.replica, "SELECT @@slave_parallel_threads"); got != "4" {
		t.Errorf("slave_parallel_threads after the backup %s, want 4 again", got)
	}
	if running, _, err := applierRunning(sqlCtx(t), tc.db(tc.replica)); err != nil || !running {
		t.Errorf("applier running after the backup: %v (%v), want true", running, err)
	}
	tc.restoreInto(tc.spare, store, "ns/c/serial/")
	if n, want := tc.count(tc.spare, "app.w"), int(seqOf(t, m.GTIDPosition)-base); n != want {
		t.Errorf("restored app.w has %d rows, the position %s says %d", n, m.GTIDPosition, want)
	}

	tc.exec(tc.replica, "STOP SLAVE SQL_THREAD")
	if _, err := Take(t.Context(), takeOptions(tc.replica, "ns/c/stopped/"), store); err != nil {
		t.Fatalf("Take with the applier stopped: %v", err)
	}
	if running, _, err := applierRunning(sqlCtx(t), tc.db(tc.replica)); err != nil || running {
		t.Errorf("applier running after a backup that found it stopped: %v (%v), want it still stopped", running, err)
	}
	if got := tc.str(tc.replica, "SELECT @@slave_parallel_threads"); got != "4" {
		t.Errorf("slave_parallel_threads after the backup %s, want 4 again", got)
	}
}

// TestServerSerialApplierOverlappingCopies checks that two copies of one replica at once (a
// clone during a backup) keep its applier serial until the last one ends, and that a primary
// is left alone.
func TestServerSerialApplierOverlappingCopies(t *testing.T) {
	tc := startCluster(t)
	threads := func() string { return tc.str(tc.replica, "SELECT @@slave_parallel_threads") }
	opts := func() *StreamOptions {
		to := takeOptions(tc.replica, "unused/")
		o := to.streamOptions()
		if err := o.defaults(); err != nil {
			t.Fatal(err)
		}
		return &o
	}
	first, err := opts().serialApply(t.Context())
	if err != nil {
		t.Fatalf("first copy: %v", err)
	}
	second, err := opts().serialApply(t.Context())
	if err != nil {
		t.Fatalf("second copy: %v", err)
	}
	if got := threads(); got != "0" {
		t.Errorf("slave_parallel_threads with two copies running %s, want 0", got)
	}
	if err := first(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := first(t.Context()); err != nil { // a second call releases nothing more
		t.Fatal(err)
	}
	if got := threads(); got != "0" {
		t.Errorf("slave_parallel_threads after the first copy ended, the second still running: %s, want 0", got)
	}
	if err := second(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := threads(); got != "4" {
		t.Errorf("slave_parallel_threads after both copies ended %s, want 4", got)
	}
	if running, _, err := applierRunning(sqlCtx(t), tc.db(tc.replica)); err != nil || !running {
		t.Errorf("applier running after both copies: %v (%v), want true", running, err)
	}

	to := takeOptions(tc.primary, "unused/")
	p := to.streamOptions()
	if err := p.defaults(); err != nil {
		t.Fatal(err)
	}
	release, err := p.serialApply(t.Context())
	if err != nil {
		t.Fatalf("copy of the primary: %v", err)
	}
	if got := tc.str(tc.primary, "SELECT @@slave_parallel_threads"); got != "4" {
		t.Errorf("primary's slave_parallel_threads during its copy %s, want it left at 4", got)
	}
	if err := release(t.Context()); err != nil {
		t.Fatal(err)
	}
}
