package restore

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/engineupgrade"
	"github.com/dolphin-operator/dolphin/internal/mycnf"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestServerRestore backs up one real server and restores it with IntoDataDir: into an empty
// data directory (checked on a server started on it), again onto the initialised directory
// (skipped), from a damaged copy of the backup, and over what a failed attempt left.
func TestServerRestore(t *testing.T) {
	src := takeSource(t)
	t.Run("IntoEmptyDataDir", func(t *testing.T) { testIntoEmptyDataDir(t, src) })
	t.Run("CorruptObject", func(t *testing.T) { testCorruptObject(t, src) })
	t.Run("LeftoversOfFailedAttempt", func(t *testing.T) { testLeftovers(t, src) })
	t.Run("ProductionConfig", func(t *testing.T) { testProductionConfig(t, src) })
	// Last: it changes the source's own data directory.
	t.Run("FixUpRemovesReplication", func(t *testing.T) { testFixUpOnSource(t, src) })
}

// allowedEvents are the binary log events a server writes by itself; the fix-up must add no
// other (no GTID, no query).
var allowedEvents = []string{"Format_desc", "Gtid_list", "Binlog_checkpoint", "Rotate", "Stop"}

func testIntoEmptyDataDir(t *testing.T, src *source) {
	inst := target(t)
	opts := src.options(t, inst, backupPrefix)
	var logged strings.Builder
	logTest := opts.Log
	opts.Log = func(format string, args ...any) {
		fmt.Fprintf(&logged, format+"\n", args...)
		logTest(format, args...)
	}
	began := time.Now()
	res, err := IntoDataDir(t.Context(), opts)
	if err != nil {
		t.Fatalf("IntoDataDir: %v", err)
	}
	t.Logf("IntoDataDir took %v", time.Since(began).Round(time.Millisecond))
	want := src.manifest.GTIDPosition
	if res.Skipped || res.Manifest == nil || res.Manifest.Name != "b1" || res.GTIDPosition != want {
		t.Errorf("Result %+v, want the manifest of b1 and position %q", res, want)
	}
	ents := dirEntries(t, inst.DataDir)
	for _, name := range []string{InitializedMarker, RestoredMarker, lostAndFound, "ibdata1", "mysql", "app"} {
		if !slices.Contains(ents, name) {
			t.Errorf("the data directory has no %s: %q", name, ents)
		}
	}
	if slices.Contains(ents, StagingDir) {
		t.Errorf("the staging directory is left: %q", ents)
	}
	b, err := os.ReadFile(filepath.Join(inst.DataDir, RestoredMarker))
	if err != nil {
		t.Fatal(err)
	}
	var mk Marker
	if err := json.Unmarshal(b, &mk); err != nil || mk.Path != backupPrefix || mk.Name != "b1" ||
		mk.GTIDPosition != want || mk.RestoredAt.IsZero() || !strings.HasPrefix(mk.Store, "file://") || mk.Manifest == nil {
		t.Errorf("%s: %s (%v)", RestoredMarker, b, err)
	}
	if left := dirEntries(t, opts.TmpDir); len(left) != 0 {
		t.Errorf("the temporary server left %q in TmpDir", left)
	}
	// The source's mariadb-upgrade record, byte for byte, from the manifest, written by the
	// restore (mariadb-backup does not copy the file).
	if got := engineupgrade.TransferableRecord(inst.DataDir); got != src.manifest.UpgradeRecord {
		t.Errorf("restored upgrade record %q, want the manifest's %q", got, src.manifest.UpgradeRecord)
	}
	if !strings.Contains(logged.String(), "recorded the source's mariadb-upgrade record") {
		t.Errorf("the restore did not write the record itself; it logged:\n%s", logged.String())
	}

	// Again on the initialised directory, even without a store: nothing happens.
	before := tree(t, inst.DataDir)
	again := opts
	again.Store, again.Path, again.OperatorPassword = objectstore.Config{}, "", ""
	res, err = IntoDataDir(t.Context(), again)
	if err != nil || !res.Skipped || res.Manifest != nil {
		t.Errorf("second IntoDataDir = %+v, %v; want Skipped", res, err)
	}
	if after := tree(t, inst.DataDir); !slices.Equal(before, after) {
		t.Errorf("the second run changed the data directory:\nbefore %q\nafter  %q", before, after)
	}

	// A normal server on the restored data.
	inst.StartAs(t, "root", newRootPw)
	root := openDB(t, socketDSN(inst, "root", newRootPw))
	if n := count(t, root, "app.t"); n != sourceRowsT {
		t.Errorf("app.t has %d rows, want %d", n, sourceRowsT)
	}
	if n := count(t, root, "app.u"); n != sourceRowsU {
		t.Errorf("app.u has %d rows, want %d", n, sourceRowsU)
	}
	for _, v := range []string{"gtid_binlog_pos", "gtid_slave_pos", "gtid_current_pos"} {
		if got := str(t, root, "SELECT @@"+v); !SameGTIDPosition(got, want) {
			t.Errorf("@@%s is %q, the backup's position is %q", v, got, want)
		}
	}
	t.Logf("restored server: gtid_binlog_pos = gtid_slave_pos = gtid_current_pos = %q", str(t, root, "SELECT @@gtid_binlog_pos"))
	if n := rowCount(t, root, "SHOW ALL SLAVES STATUS"); n != 0 {
		t.Errorf("SHOW ALL SLAVES STATUS has %d rows: the source's replication settings survived", n)
	}
	events := binlogEventTypes(t, root)
	t.Logf("binary log events after the restore: %q", events)
	if !slices.Contains(events, "binlog.000001:Gtid_list") {
		t.Errorf("no Gtid_list event in binlog.000001: %q", events)
	}
	for _, e := range events {
		if _, typ, _ := strings.Cut(e, ":"); !slices.Contains(allowedEvents, typ) {
			t.Errorf("binary log event %s: the fix-up wrote to the binary log (all events: %q)", e, events)
		}
	}

	// Accounts: the new cluster's passwords work, the source's do not.
	for _, c := range []struct {
		what, dsn string
		ok        bool
	}{
		{"root@localhost with the new password", socketDSN(inst, "root", newRootPw), true},
		{"root@localhost with the source's password", socketDSN(inst, "root", oldRootPw), false},
		{"root@localhost without a password", socketDSN(inst, "root", ""), false},
		{"the operator over TCP with the new password", tcpDSN(inst, operatorUser, newOperatorPw), true},
		{"the operator over TCP with the source's password", tcpDSN(inst, operatorUser, oldOperatorPw), false},
	} {
		err := openDB(t, c.dsn).PingContext(t.Context())
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: %v", c.what, err)
		case !c.ok && !accessDenied(err):
			t.Errorf("%s: %v, want access denied", c.what, err)
		}
	}
	op := openDB(t, tcpDSN(inst, operatorUser, newOperatorPw))
	grants := str(t, op, "SHOW GRANTS FOR CURRENT_USER()")
	if !strings.Contains(grants, "GRANT ALL PRIVILEGES ON *.* TO `dolphin`@`%`") || !strings.HasSuffix(grants, "WITH GRANT OPTION") {
		t.Errorf("operator grants: %s", grants)
	}

	// A new write continues the backup's GTID sequence in its domain.
	conn, err := op.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	execAll(t, conn, "SET GLOBAL read_only = OFF", "INSERT INTO app.t VALUES (1000000, 'after the restore')")
	next := nextGTID(t, want, restoredSrvID)
	if got := str(t, conn, "SELECT @@gtid_binlog_pos"); !SameGTIDPosition(got, next) {
		t.Errorf("after an INSERT gtid_binlog_pos is %q, want %q", got, next)
	}
	if got := str(t, conn, "SELECT @@gtid_current_pos"); !SameGTIDPosition(got, next) {
		t.Errorf("after an INSERT gtid_current_pos is %q, want %q", got, next)
	}
	t.Logf("after one INSERT: gtid_binlog_pos %q", str(t, conn, "SELECT @@gtid_binlog_pos"))
	conn.Close()

	// The state is in the binary log and mysql.gtid_slave_pos: it survives a restart.
	inst.Stop(t)
	inst.StartAs(t, "root", newRootPw)
	root = openDB(t, socketDSN(inst, "root", newRootPw))
	for _, c := range []struct{ v, want string }{
		{"gtid_binlog_pos", next}, {"gtid_current_pos", next}, {"gtid_slave_pos", want},
	} {
		if got := str(t, root, "SELECT @@"+c.v); !SameGTIDPosition(got, c.want) {
			t.Errorf("after a restart @@%s is %q, want %q", c.v, got, c.want)
		}
	}
}

// testFixUpOnSource runs the fix-up on the source's own data directory, which (unlike its
// backup: mariadb-backup copies no master.info) has two replication connections.
func testFixUpOnSource(t *testing.T, src *source) {
	opts := src.options(t, src.inst, backupPrefix)
	if err := opts.check(nil, nil); err != nil {
		t.Fatal(err)
	}
	before := dirEntries(t, src.inst.DataDir)
	for _, f := range []string{"master.info", "master-other.info", "relay-bin.000001", "relay-bin-other.000001"} {
		if !slices.Contains(before, f) {
			t.Fatalf("the source's data directory has no %s: %q", f, before)
		}
	}
	// A live data directory has no binlog info file: it holds what the backup does.
	info := fmt.Sprintf("%s\t%d\t%s\n", src.manifest.BinlogFile, src.manifest.BinlogPosition, src.manifest.GTIDPosition)
	if err := os.WriteFile(filepath.Join(src.inst.DataDir, "xtrabackup_binlog_info"), []byte(info), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := opts.fixUp(t.Context(), src.manifest); err != nil {
		t.Fatalf("fixUp: %v", err)
	}
	after := dirEntries(t, src.inst.DataDir)
	for _, f := range []string{"master.info", "master-other.info", "relay-bin.000001", "relay-bin-other.000001"} {
		if slices.Contains(after, f) {
			t.Errorf("%s is left after the fix-up: %q", f, after)
		}
	}
	src.inst.StartAs(t, "root", newRootPw)
	root := openDB(t, socketDSN(src.inst, "root", newRootPw))
	if n := rowCount(t, root, "SHOW ALL SLAVES STATUS"); n != 0 {
		t.Errorf("SHOW ALL SLAVES STATUS has %d rows after the fix-up", n)
	}
	if got := str(t, root, "SELECT @@gtid_slave_pos"); !SameGTIDPosition(got, src.manifest.GTIDPosition) {
		t.Errorf("gtid_slave_pos %q, want %q", got, src.manifest.GTIDPosition)
	}
}

func testCorruptObject(t *testing.T, src *source) {
	bad := "ns/src/bad/"
	for _, key := range []string{backup.DataObjectKey, backup.ManifestKey} {
		copyFile(t, filepath.Join(src.root, backupPrefix, key), filepath.Join(src.root, bad, key))
	}
	testenv.FlipByte(t, filepath.Join(src.root, bad, backup.DataObjectKey))
	inst := target(t)
	opts := src.options(t, inst, bad)
	_, err := IntoDataDir(t.Context(), opts)
	if !errors.Is(err, backup.ErrCorrupt) {
		t.Fatalf("IntoDataDir of a damaged backup: %v, want ErrCorrupt", err)
	}
	t.Logf("error: %v", err)
	for _, s := range []string{bad + backup.DataObjectKey, "restore another backup"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("the error does not say %q", s)
		}
	}
	if ents := dirEntries(t, inst.DataDir); !slices.Equal(ents, []string{lostAndFound}) {
		t.Errorf("the data directory holds %q, want only %s", ents, lostAndFound)
	}
	// The temporary server would have written the instance's error log (log_error).
	if _, err := os.Stat(inst.ErrorLog); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a server was started on the damaged backup: %s: %v", inst.ErrorLog, err)
	}
}

func testLeftovers(t *testing.T, src *source) {
	inst := target(t)
	// A first attempt fails once the data is in place: the temporary server does not start.
	failing := src.options(t, inst, backupPrefix)
	failing.ServerBinary = "/bin/false"
	_, err := IntoDataDir(t.Context(), failing)
	if err == nil || !strings.Contains(err.Error(), "exited during startup") {
		t.Fatalf("IntoDataDir with a server that does not start: %v", err)
	}
	t.Logf("error: %v", err)
	ents := dirEntries(t, inst.DataDir)
	if !slices.Contains(ents, "ibdata1") || slices.Contains(ents, InitializedMarker) || slices.Contains(ents, RestoredMarker) {
		t.Fatalf("after the failed attempt the data directory holds %q, want the data without markers", ents)
	}
	// And more left by whatever else failed.
	for _, p := range []string{"leftover.txt", filepath.Join(StagingDir, "half-extracted")} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(inst.DataDir, p)), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(inst.DataDir, p), []byte("junk"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(inst.DataDir, lostAndFound, "keep"), nil, 0o600); err != nil {
		t.Fatal(err)
	}

	res, err := IntoDataDir(t.Context(), src.options(t, inst, backupPrefix))
	if err != nil || res.Skipped || res.GTIDPosition != src.manifest.GTIDPosition {
		t.Fatalf("IntoDataDir over leftovers = %+v, %v", res, err)
	}
	ents = dirEntries(t, inst.DataDir)
	if slices.Contains(ents, "leftover.txt") || slices.Contains(ents, StagingDir) || !slices.Contains(ents, InitializedMarker) {
		t.Errorf("the data directory holds %q", ents)
	}
	if _, err := os.Stat(filepath.Join(inst.DataDir, lostAndFound, "keep")); err != nil {
		t.Errorf("lost+found was emptied: %v", err)
	}
	inst.StartAs(t, "root", newRootPw)
	if n := count(t, openDB(t, socketDSN(inst, "root", newRootPw)), "app.t"); n != sourceRowsT {
		t.Errorf("app.t has %d rows, want %d", n, sourceRowsT)
	}
}

// testProductionConfig restores with the pod's my.cnf as mycnf generates it (its datadir,
// socket and pid file under /var/lib/mysql and /run/mysqld, no log_error): the temporary
// server must use the data directory and files it is given, and its output is logged.
func testProductionConfig(t *testing.T, src *source) {
	dir := t.TempDir()
	cnf, err := mycnf.Generate(mycnf.Input{Flavor: mycnf.FlavorMariaDB, Overrides: map[string]string{"innodb_buffer_pool_size": "32M"}})
	if err != nil {
		t.Fatal(err)
	}
	instanceCnf := filepath.Join(dir, "instance.cnf")
	if err := os.WriteFile(instanceCnf, []byte(mycnf.InstanceConfig(5, "db-5.example")), 0o644); err != nil {
		t.Fatal(err)
	}
	cnf = strings.Replace(cnf, "!include "+mycnf.InstanceConfigFile, "!include "+instanceCnf, 1)
	if os.Geteuid() == 0 {
		cnf += "[mysqld]\nuser=root\n" // mariadbd refuses to run as root otherwise
	}
	myCnf := filepath.Join(dir, "my.cnf")
	if err := os.WriteFile(myCnf, []byte(cnf), 0o644); err != nil {
		t.Fatal(err)
	}
	var logged []string
	inst := &dbtest.Instance{DataDir: filepath.Join(dir, "data"), ConfigFile: myCnf}
	opts := src.options(t, inst, backupPrefix)
	opts.Log = func(format string, args ...any) { logged = append(logged, fmt.Sprintf(format, args...)) }
	if _, err := IntoDataDir(t.Context(), opts); err != nil {
		t.Fatalf("IntoDataDir with the production my.cnf: %v\n%s", err, strings.Join(logged, "\n"))
	}
	all := strings.Join(logged, "\n")
	for _, want := range []string{"mariadbd: ", "ready for connections", "Shutdown complete"} {
		if !strings.Contains(all, want) {
			t.Errorf("the log does not show %q from the temporary server:\n%s", want, all)
		}
	}
	if _, err := os.Stat(filepath.Join(inst.DataDir, InitializedMarker)); err != nil {
		t.Error(err)
	}
}

func dirStore(t *testing.T, root string) objectstore.Store {
	t.Helper()
	s, err := objectstore.NewDirectory(root)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o640); err != nil {
		t.Fatal(err)
	}
}
