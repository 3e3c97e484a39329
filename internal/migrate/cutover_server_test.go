package migrate

import (
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// migration is a source with an application account and data, and a target that holds a
// logical copy of it (accounts included) and replicates from it.
type migration struct {
	src, dst         *dbtest.Instance
	srcRoot, dstRoot *sql.DB
	srcMigrate       *sql.DB // the migration account on the source
}

// startMigration sets up a migration up to replication, as the earlier steps make it.
func startMigration(t *testing.T) *migration {
	t.Helper()
	c := dbtest.Start(t, dbtest.Options{Instances: 2})
	m := &migration{src: c.Instances[0], dst: c.Instances[1]}
	m.srcRoot = open(t, m.src.RootDSN(""))
	execAll(t, m.srcRoot,
		"SET GLOBAL read_only = OFF",
		"CREATE DATABASE app",
		"CREATE TABLE app.t (id INT PRIMARY KEY, v VARCHAR(40) NOT NULL) ENGINE=InnoDB",
		"INSERT INTO app.t SELECT seq, CONCAT('row-', seq) FROM app.seq_1_to_5000",
		"CREATE USER 'migrate'@'%' IDENTIFIED BY 'pw'",
		"GRANT SELECT, SHOW VIEW, TRIGGER, EVENT, REPLICATION SLAVE, BINLOG MONITOR, READ_ONLY ADMIN, CONNECTION ADMIN, PROCESS, REPLICATION SLAVE ADMIN, SLAVE MONITOR ON *.* TO 'migrate'@'%'",
		"CREATE USER 'app'@'%' IDENTIFIED BY 'app-pw'",
		"GRANT INSERT, SELECT ON app.* TO 'app'@'%'")
	m.srcMigrate = open(t, "migrate:pw@tcp("+m.src.Addr()+")/")
	if _, err := LogicalCopy(t.Context(), LogicalCopyOptions{
		Source: Endpoint{Host: m.src.Host, Port: m.src.Port, User: "migrate", Password: "pw"},
		Target: Endpoint{Socket: m.dst.SocketPath(), User: "root"}, TmpDir: t.TempDir(),
	}); err != nil {
		t.Fatal(err)
	}
	m.dstRoot = open(t, m.dst.RootDSN(""))
	if res, err := CopyAccounts(t.Context(), m.srcMigrate, m.dstRoot, func(a Account) bool { return a.User == "migrate" }); err != nil || len(res.Failed) > 0 {
		t.Fatalf("CopyAccounts: %+v, %v", res, err)
	}
	execAll(t, m.dstRoot, fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='%s', MASTER_PORT=%d, MASTER_USER='migrate', "+
		"MASTER_PASSWORD='pw', MASTER_USE_GTID=slave_pos", m.src.Host, m.src.Port), "START SLAVE")
	return m
}

// switchingWriter is an application that writes through "its database address": the source
// until the source refuses it (read-only, or its session ended), then the target, retrying
// every 5 ms; it records every acknowledged id and when.
type switchingWriter struct {
	src, dst *sql.DB
	stop     atomic.Bool
	wg       sync.WaitGroup
	mu       sync.Mutex
	acks     []ack
	errs     []error
}

type ack struct {
	id     int
	at     time.Time
	onDest bool
}

// startSwitchingWriter writes with insert (one placeholder, the id) from firstID on, as the
// application account.
func startSwitchingWriter(t *testing.T, m *migration, insert string, firstID int) *switchingWriter {
	t.Helper()
	w := &switchingWriter{
		src: open(t, "app:app-pw@tcp("+m.src.Addr()+")/?timeout=2s"),
		dst: open(t, "app:app-pw@tcp("+m.dst.Addr()+")/?timeout=2s"),
	}
	w.wg.Go(func() {
		onDest := false
		for id := firstID; !w.stop.Load(); {
			db := w.src
			if onDest {
				db = w.dst
			}
			_, err := db.Exec(insert, id)
			if err == nil {
				w.mu.Lock()
				w.acks = append(w.acks, ack{id, time.Now(), onDest})
				w.mu.Unlock()
				id++
				continue
			}
			var me *mysql.MySQLError
			if !onDest && (errors.As(err, &me) && me.Number == 1290 || !errors.As(err, &me)) {
				onDest = true // read-only, or the session ended: the application's failover
			}
			w.mu.Lock()
			w.errs = append(w.errs, err)
			w.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	})
	return w
}

func (w *switchingWriter) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acks)
}

// writingTo reports whether the last write was acknowledged by the target (dest) or the
// source, less than a second ago.
func (w *switchingWriter) writingTo(dest bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(w.acks)
	return n > 0 && w.acks[n-1].onDest == dest && time.Since(w.acks[n-1].at) < time.Second
}

// pause is the application's write pause: from its last acknowledged write on the source to
// its first on the target (0 when it did not write on both).
func (w *switchingWriter) pause() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var lastSrc, firstDst time.Time
	for _, a := range w.acks {
		if !a.onDest {
			lastSrc = a.at
		} else if firstDst.IsZero() {
			firstDst = a.at
		}
	}
	if lastSrc.IsZero() || firstDst.IsZero() {
		return 0
	}
	return firstDst.Sub(lastSrc)
}

// TestServerVerifyAndCutover is the end of a migration on real servers, an application writing
// all along: the copy verified at one position while the source takes writes (equal
// checksums), then the cutover. Every write acknowledged by either side is on the target once,
// the source stays fenced, the target is detached and writable, and the write pause the
// application saw is logged (measured by make bench-migrate, not asserted here).
func TestServerVerifyAndCutover(t *testing.T) {
	m := startMigration(t)
	w := startSwitchingWriter(t, m, "INSERT INTO app.t VALUES (?, 'live')", 1_000_001)
	testenv.Eventually(t, 10*time.Second, "the application writing", func() error {
		if n := w.count(); n < 100 {
			return fmt.Errorf("%d writes", n)
		}
		return nil
	})

	v, err := Verify(t.Context(), m.srcMigrate, m.dstRoot, []string{"app.t"}, 30*time.Second)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if len(v.Tables) != 1 || len(v.Mismatched()) != 0 || v.Position == "" {
		t.Fatalf("verification %+v: want app.t equal at a position", v)
	}
	t.Logf("verified at %s under writes: %+v", v.Position, v.Tables)
	testenv.Eventually(t, 10*time.Second, "the target replicating again after the verification", func() error {
		if st := slaveStatus(t, m.dstRoot); len(st) != 1 || st[0]["Slave_SQL_Running"] != "Yes" || st[0]["Slave_IO_Running"] != "Yes" {
			return fmt.Errorf("replication status %v", st)
		}
		return nil
	})

	res, err := Cutover(t.Context(), m.srcMigrate, m.dstRoot, 30*time.Second)
	if err != nil {
		t.Fatalf("Cutover: %v", err)
	}
	testenv.Eventually(t, 10*time.Second, "the application writing to the target", func() error {
		if !w.writingTo(true) {
			return errors.New("not yet")
		}
		return nil
	})
	time.Sleep(200 * time.Millisecond)
	w.stop.Store(true)
	w.wg.Wait()

	pause := w.pause()
	t.Logf("cutover at %s: %d client sessions ended, servers' pause %v, the application's %v (last write on the source to first on the target); %d writes acknowledged",
		res.Position, res.ClientsEnded, res.Opened.Sub(res.Fenced).Round(time.Millisecond), pause.Round(time.Millisecond), len(w.acks))
	if res.ClientsEnded == 0 {
		t.Error("the cutover ended no session of the application on the source")
	}
	if pause <= 0 {
		t.Fatal("the application did not write on both sides, in order")
	}

	got := ids(t, m.dstRoot)
	missing := 0
	for _, a := range w.acks {
		if _, ok := slices.BinarySearch(got, a.id); !ok {
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d acknowledged writes are missing on the target", missing, len(w.acks))
	}
	if s := str(t, m.srcRoot, "SELECT @@read_only"); s != "1" {
		t.Errorf("the source's read_only after the cutover: %s, want it fenced", s)
	}
	if s := str(t, m.dstRoot, "SELECT @@read_only"); s != "0" {
		t.Errorf("the target's read_only after the cutover: %s, want it open", s)
	}
	if st := slaveStatus(t, m.dstRoot); len(st) != 0 {
		t.Errorf("the target still replicates: %v", st)
	}
}

// TestServerVerifyAndCutoverRefusals: a row changed on the target only is found by the
// verification; a cutover whose target cannot catch up in time is undone (the source open
// again, the target still replicating), leaving no half-cut state.
func TestServerVerifyAndCutoverRefusals(t *testing.T) {
	m := startMigration(t)
	execAll(t, m.dstRoot, "SET SESSION sql_log_bin = 0", "UPDATE app.t SET v = 'diverged' WHERE id = 42")
	v, err := Verify(t.Context(), m.srcMigrate, m.dstRoot, []string{"app.t"}, 30*time.Second)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if !slices.Equal(v.Mismatched(), []string{"app.t"}) {
		t.Errorf("verification %+v: want app.t mismatched", v)
	}

	// The target stops applying: the cutover cannot complete.
	execAll(t, m.dstRoot, "STOP SLAVE SQL_THREAD")
	execAll(t, m.srcRoot, "INSERT INTO app.t VALUES (900001, 'after the stop')")
	_, err = Cutover(t.Context(), m.srcMigrate, m.dstRoot, time.Second)
	if err == nil {
		t.Fatal("Cutover succeeded with a target that does not apply")
	}
	t.Logf("refused: %v", err)
	if s := str(t, m.srcRoot, "SELECT @@read_only"); s != "0" {
		t.Errorf("the source's read_only after the refused cutover: %s, want it open again", s)
	}
	if st := slaveStatus(t, m.dstRoot); len(st) != 1 || st[0]["Master_Host"] != m.src.Host {
		t.Errorf("the target's replication after the refused cutover: %v, want its connection to the source kept", st)
	}
	if s := str(t, m.dstRoot, "SELECT @@read_only"); s != "1" {
		t.Errorf("the target's read_only after the refused cutover: %s, want it still read-only", s)
	}
}

// TestServerVerifyOfACaughtUpTarget verifies a target already at the source's position, the
// source idle: replication started with UNTIL a position already reached stops a moment later,
// and Verify must still leave the target replicating (it once ended with both threads stopped:
// START SLAVE had found the UNTIL threads still running and done nothing).
func TestServerVerifyOfACaughtUpTarget(t *testing.T) {
	m := startMigration(t)
	running := func() error {
		if st := slaveStatus(t, m.dstRoot); len(st) != 1 || st[0]["Slave_SQL_Running"] != "Yes" || st[0]["Slave_IO_Running"] != "Yes" {
			return fmt.Errorf("replication status %v", st)
		}
		return nil
	}
	testenv.Eventually(t, 10*time.Second, "the target caught up", func() error {
		if src, dst := str(t, m.srcRoot, "SELECT @@gtid_binlog_pos"), str(t, m.dstRoot, "SELECT @@gtid_slave_pos"); src != dst {
			return fmt.Errorf("source at %s, target at %s", src, dst)
		}
		return running()
	})
	for i := range 3 {
		v, err := Verify(t.Context(), m.srcMigrate, m.dstRoot, []string{"app.t"}, 30*time.Second)
		if err != nil {
			t.Fatalf("Verify %d: %v", i, err)
		}
		if len(v.Mismatched()) != 0 {
			t.Fatalf("Verify %d: %+v, want app.t equal", i, v)
		}
		// Long enough for threads started with UNTIL to notice the position and stop.
		time.Sleep(time.Second)
		if err := running(); err != nil {
			t.Fatalf("after Verify %d: %v", i, err)
		}
	}
	execAll(t, m.srcRoot, "INSERT INTO app.t VALUES (800001, 'after the verifications')")
	testenv.Eventually(t, 10*time.Second, "the target applying the source's next write", func() error {
		if n := str(t, m.dstRoot, "SELECT COUNT(*) FROM app.t WHERE id = 800001"); n != "1" {
			return fmt.Errorf("%s rows", n)
		}
		return nil
	})
}

// slaveStatus is SHOW ALL SLAVES STATUS, one map of column to value per connection.
func slaveStatus(t *testing.T, db *sql.DB) []map[string]string {
	t.Helper()
	rows, err := db.Query("SHOW ALL SLAVES STATUS")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out, err := dbsql.ResultMaps(rows)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestServerCutoverAndBack moves an application's writes to the target and back: after the
// cutover the old source follows the new primary (Fallback), the application keeps writing to
// the new primary, and a second cutover the other way round brings it back; every write either
// side acknowledged is on the old source at the end, which is writable again, and the other
// side fenced.
func TestServerCutoverAndBack(t *testing.T) {
	m := startMigration(t)
	there := startSwitchingWriter(t, m, "INSERT INTO app.t VALUES (?, 'there')", 2_000_001)
	testenv.Eventually(t, 10*time.Second, "the application writing", func() error {
		if n := there.count(); n < 50 {
			return fmt.Errorf("%d writes", n)
		}
		return nil
	})
	res, err := Cutover(t.Context(), m.srcMigrate, m.dstRoot, 30*time.Second)
	if err != nil {
		t.Fatalf("Cutover: %v", err)
	}
	testenv.Eventually(t, 10*time.Second, "the application writing to the target", func() error {
		if !there.writingTo(true) {
			return errors.New("not yet")
		}
		return nil
	})
	there.stop.Store(true)
	there.wg.Wait()

	execAll(t, m.dstRoot, "SET SESSION sql_log_bin = 0", "CREATE USER 'fallback'@'%' IDENTIFIED BY 'fb pw'",
		"GRANT REPLICATION SLAVE ON *.* TO 'fallback'@'%'")
	if err := Fallback(t.Context(), m.srcMigrate, Endpoint{Host: m.dst.Host, Port: m.dst.Port, User: "fallback", Password: "fb pw"}, res.Position); err != nil {
		t.Fatalf("Fallback: %v", err)
	}
	// The application, on the new primary, comes back to the old source when refused there.
	back := startSwitchingWriter(t, &migration{src: m.dst, dst: m.src}, "INSERT INTO app.t VALUES (?, 'back')", 3_000_001)
	testenv.Eventually(t, 10*time.Second, "the application writing to the new primary", func() error {
		if n := back.count(); n < 50 {
			return fmt.Errorf("%d writes", n)
		}
		return nil
	})
	res2, err := Cutover(t.Context(), m.dstRoot, m.srcRoot, 30*time.Second)
	if err != nil {
		t.Fatalf("the cutover back: %v", err)
	}
	testenv.Eventually(t, 10*time.Second, "the application writing to the old source again", func() error {
		if !back.writingTo(true) {
			return errors.New("not yet")
		}
		return nil
	})
	back.stop.Store(true)
	back.wg.Wait()
	t.Logf("there at %s (pause %v), back at %s (pause %v)", res.Position, there.pause().Round(time.Millisecond), res2.Position, back.pause().Round(time.Millisecond))

	got := ids(t, m.srcRoot)
	missing := 0
	for _, w := range []*switchingWriter{there, back} {
		for _, a := range w.acks {
			if _, ok := slices.BinarySearch(got, a.id); !ok {
				missing++
			}
		}
	}
	if missing > 0 {
		t.Fatalf("%d acknowledged writes are missing on the old source after the way back", missing)
	}
	if s := str(t, m.srcRoot, "SELECT @@read_only"); s != "0" {
		t.Errorf("the old source's read_only at the end: %s, want it writable", s)
	}
	if s := str(t, m.dstRoot, "SELECT @@read_only"); s != "1" {
		t.Errorf("the target's read_only at the end: %s, want it fenced", s)
	}
	if st := slaveStatus(t, m.srcRoot); len(st) != 0 {
		t.Errorf("the old source still replicates: %v", st)
	}
}

// TestServerCutoverSourceMoved: an account that may write through read_only (root) keeps
// writing on the source during the cutover. The cutover must say so (ErrSourceMoved) rather than
// open a target that lacks those writes without a word; when it found out before the detach,
// it is undone (the source open, the target replicating).
func TestServerCutoverSourceMoved(t *testing.T) {
	m := startMigration(t)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for id := 5_000_001; !stop.Load(); id++ {
			_, _ = m.srcRoot.Exec("INSERT INTO app.t VALUES (?, 'admin')", id) // sessions get ended: errors expected
		}
	})
	defer func() { stop.Store(true); wg.Wait() }()
	time.Sleep(200 * time.Millisecond)
	res, err := Cutover(t.Context(), m.srcMigrate, m.dstRoot, 30*time.Second)
	stop.Store(true)
	wg.Wait()
	if !errors.Is(err, ErrSourceMoved) {
		t.Fatalf("Cutover with a privileged writer on the source: %+v, %v; want ErrSourceMoved", res, err)
	}
	t.Logf("refused: %v", err)
	if res.Opened.IsZero() {
		if s := str(t, m.srcRoot, "SELECT @@read_only"); s != "0" {
			t.Errorf("undone cutover: the source's read_only is %s, want it open again", s)
		}
		testenv.Eventually(t, 10*time.Second, "the target replicating again", func() error {
			if st := slaveStatus(t, m.dstRoot); len(st) != 1 || st[0]["Slave_SQL_Running"] != "Yes" {
				return fmt.Errorf("%v", st)
			}
			return nil
		})
	}
}
