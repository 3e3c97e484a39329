package backup

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// Helpers of the tests that run Take and Restore against real mariadbd processes
// (internal/dbsql/dbtest). They are skipped under -short.

// backupUser is the account the tests back up with. Its password holds what an option file
// needs quoted or escaped: '#' (a comment), quotes, a backslash, spaces and a newline.
const backupUser = "dolphin-backup"

var backupPassword = "p#w \"q\" \\x 'y' \tend \n"

// backupGrants are the privileges a backup of a replica needs: mariadb-backup 10.11's,
// --slave-info included, and REPLICATION SLAVE ADMIN to make the applier serial for the run
// (serialApply).
const backupGrants = "RELOAD, PROCESS, LOCK TABLES, BINLOG MONITOR, SLAVE MONITOR, REPLICATION SLAVE ADMIN"

// seedRows is how many rows the primary's app.t holds before a backup.
const seedRows = 3000

type testCluster struct {
	t       *testing.T
	c       *dbtest.Cluster
	primary *dbtest.Instance
	replica *dbtest.Instance
	// spare is started but unused: a restore replaces its data directory.
	spare *dbtest.Instance
	dbs   map[*dbtest.Instance]*sql.DB
}

func sqlCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// startCluster starts three servers: db-0 a writable primary with app.t (seedRows rows) and
// the backup account, db-1 its GTID replica (log_slave_updates, as the production my.cnf
// has it), caught up, and db-2 a spare to restore into.
func startCluster(t *testing.T) *testCluster {
	t.Helper()
	c := dbtest.Start(t, dbtest.Options{Instances: 3})
	tc := &testCluster{t: t, c: c, primary: c.Instances[0], replica: c.Instances[1], spare: c.Instances[2],
		dbs: map[*dbtest.Instance]*sql.DB{}}
	tc.exec(tc.primary,
		"SET GLOBAL read_only = OFF",
		"CREATE DATABASE app",
		"CREATE TABLE app.t (id INT PRIMARY KEY, v VARCHAR(100) NOT NULL)",
		fmt.Sprintf("INSERT INTO app.t SELECT seq, CONCAT('row-', seq, '-', REPEAT('x', 40)) FROM app.seq_1_to_%d", seedRows),
		"CREATE TABLE app.w (id INT AUTO_INCREMENT PRIMARY KEY, at DATETIME(6) NOT NULL)",
	)
	tc.execArgs(tc.primary, "CREATE USER ?@'%' IDENTIFIED BY ?", backupUser, backupPassword)
	tc.execArgs(tc.primary, "GRANT "+backupGrants+" ON *.* TO ?@'%'", backupUser)
	tc.replicate(tc.replica)
	tc.waitCaughtUp(tc.replica)
	return tc
}

// db returns a root pool for inst, over TCP, kept for the test.
func (tc *testCluster) db(inst *dbtest.Instance) *sql.DB {
	if db := tc.dbs[inst]; db != nil {
		return db
	}
	db, err := sql.Open("mysql", inst.RootDSN("timeout=2s&readTimeout=30s&writeTimeout=30s&interpolateParams=true"))
	if err != nil {
		tc.t.Fatal(err)
	}
	db.SetMaxOpenConns(4)
	tc.t.Cleanup(func() { db.Close() })
	tc.dbs[inst] = db
	return db
}

// forget drops inst's pool (its server restarts with another data directory).
func (tc *testCluster) forget(inst *dbtest.Instance) {
	if db := tc.dbs[inst]; db != nil {
		db.Close()
		delete(tc.dbs, inst)
	}
}

func (tc *testCluster) exec(inst *dbtest.Instance, qs ...string) {
	tc.t.Helper()
	for _, q := range qs {
		if _, err := tc.db(inst).ExecContext(sqlCtx(tc.t), q); err != nil {
			tc.t.Fatalf("%s: %s: %v", inst.Name, q, err)
		}
	}
}

func (tc *testCluster) execArgs(inst *dbtest.Instance, q string, args ...any) {
	tc.t.Helper()
	if _, err := tc.db(inst).ExecContext(sqlCtx(tc.t), q, args...); err != nil {
		tc.t.Fatalf("%s: %s: %v", inst.Name, q, err)
	}
}

func (tc *testCluster) str(inst *dbtest.Instance, q string) string {
	tc.t.Helper()
	var s sql.NullString
	if err := tc.db(inst).QueryRowContext(sqlCtx(tc.t), q).Scan(&s); err != nil {
		tc.t.Fatalf("%s: %s: %v", inst.Name, q, err)
	}
	return s.String
}

func (tc *testCluster) count(inst *dbtest.Instance, table string) int {
	tc.t.Helper()
	n, err := strconv.Atoi(tc.str(inst, "SELECT COUNT(*) FROM "+table))
	if err != nil {
		tc.t.Fatal(err)
	}
	return n
}

// checksum returns CHECKSUM TABLE's value for table.
func (tc *testCluster) checksum(inst *dbtest.Instance, table string) string {
	tc.t.Helper()
	var name, sum sql.NullString
	if err := tc.db(inst).QueryRowContext(sqlCtx(tc.t), "CHECKSUM TABLE "+table).Scan(&name, &sum); err != nil {
		tc.t.Fatalf("%s: CHECKSUM TABLE %s: %v", inst.Name, table, err)
	}
	return sum.String
}

// replicate points inst at the primary with GTID auto-positioning from its gtid_slave_pos.
func (tc *testCluster) replicate(inst *dbtest.Instance) {
	tc.t.Helper()
	tc.execArgs(inst, "CHANGE MASTER TO MASTER_HOST = ?, MASTER_PORT = ?, MASTER_USER = 'root', MASTER_USE_GTID = slave_pos",
		tc.primary.Host, tc.primary.Port)
	tc.exec(inst, "START SLAVE")
}

// waitCaughtUp waits until inst has applied everything in the primary's binlog, failing on a
// replication error.
func (tc *testCluster) waitCaughtUp(inst *dbtest.Instance) {
	tc.t.Helper()
	want := tc.str(tc.primary, "SELECT @@gtid_binlog_pos")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got := tc.str(inst, "SELECT @@gtid_slave_pos")
		if same, _ := sameGTID(got, want); same {
			return
		}
		var ioErr, sqlErr string
		rows, err := tc.db(inst).QueryContext(sqlCtx(tc.t), "SHOW SLAVE STATUS")
		if err == nil {
			cols, _ := rows.Columns()
			vals := make([]sql.NullString, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if rows.Next() && rows.Scan(ptrs...) == nil {
				for i, c := range cols {
					switch c {
					case "Last_IO_Error":
						ioErr = vals[i].String
					case "Last_SQL_Error":
						sqlErr = vals[i].String
					}
				}
			}
			rows.Close()
		}
		if sqlErr != "" || time.Now().After(deadline) {
			tc.t.Fatalf("%s did not catch up: gtid_slave_pos %q, primary at %q; IO error %q, SQL error %q",
				inst.Name, got, want, ioErr, sqlErr)
		}
	}
}

// takeOptions backs up inst as the backup account over TCP.
func takeOptions(inst *dbtest.Instance, prefix string) TakeOptions {
	return TakeOptions{
		Prefix: prefix, Name: filepath.Base(strings.TrimSuffix(prefix, "/")), Namespace: "ns", Cluster: "c",
		SourceInstance: inst.Name, SourceRole: "replica",
		Host: inst.Host, Port: inst.Port, User: backupUser, Password: backupPassword,
		DataDir: inst.DataDir, DefaultsFile: inst.ConfigFile,
		// mariadb-backup polls the redo log every second by default.
		ExtraArgs: []string{"--log-copy-interval=100"},
	}
}

// restoreInto stops inst, replaces its data directory with the backup under prefix, checks
// the prepared directory's binlog info against the manifest and starts inst again (it keeps
// its address, config and server_id).
func (tc *testCluster) restoreInto(inst *dbtest.Instance, store objectstore.Store, prefix string) *Manifest {
	tc.t.Helper()
	tc.forget(inst)
	inst.Stop(tc.t)
	if err := os.RemoveAll(inst.DataDir); err != nil {
		tc.t.Fatal(err)
	}
	began := time.Now()
	m, err := Restore(tc.t.Context(), store, prefix, RestoreOptions{TargetDir: inst.DataDir, UseMemory: "64M"})
	if err != nil {
		tc.t.Fatalf("Restore: %v", err)
	}
	tc.t.Logf("Restore of %d stored bytes into %s: %v", m.StoredBytes(), inst.Name, time.Since(began).Round(time.Millisecond))
	b, err := os.ReadFile(filepath.Join(inst.DataDir, "xtrabackup_binlog_info"))
	if err != nil {
		tc.t.Fatal(err)
	}
	bi, err := parseBinlogInfo(string(b))
	if err != nil || len(domainsBehind(m.GTIDPosition, bi.GTID)) > 0 || bi.File != m.BinlogFile || bi.Position != m.BinlogPosition {
		tc.t.Errorf("restored xtrabackup_binlog_info %q (%v), manifest %s %d %s", b, err, m.BinlogFile, m.BinlogPosition, m.GTIDPosition)
	}
	tc.rollBackPrepared(inst)
	inst.Start(tc.t)
	return m
}

// rollBackPrepared does what restore.Options.rollBackPrepared does before a server starts on
// restored data (this package cannot import that one): a backup taken under writes can hold
// transactions between their prepare and their commit, which mariadbd refuses to start with
// unless --tc-heuristic-recover resolves them; in that mode it rolls them back and exits.
func (tc *testCluster) rollBackPrepared(inst *dbtest.Instance) {
	tc.t.Helper()
	server, err := findTool("", "mariadbd")
	if err != nil {
		tc.t.Fatal(err)
	}
	binlog := filepath.Join(tc.t.TempDir(), "recovery-binlog")
	out, _ := exec.CommandContext(tc.t.Context(), server, "--defaults-file="+inst.ConfigFile, "--skip-log-error",
		"--log-bin="+binlog, "--log-bin-index="+binlog+".index", "--tc-heuristic-recover=ROLLBACK").CombinedOutput()
	if !strings.Contains(string(out), "Please restart without --tc-heuristic-recover") {
		tc.t.Fatalf("mariadbd --tc-heuristic-recover=ROLLBACK on %s did not finish its recovery:\n%s", inst.DataDir, out)
	}
	if m := regexp.MustCompile(`Found (\d+) prepared transaction\(s\) in InnoDB`).FindStringSubmatch(string(out)); m != nil {
		tc.t.Logf("rolled back %s prepared transaction(s) in the restored data", m[1])
	}
}

// seqOf returns the sequence number of domain 0 in a GTID position.
func seqOf(t *testing.T, pos string) uint64 {
	t.Helper()
	for _, g := range strings.Split(pos, ",") {
		if p := strings.Split(strings.TrimSpace(g), "-"); len(p) == 3 && p[0] == "0" {
			n, err := strconv.ParseUint(p[2], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no domain 0 in %q", pos)
	return 0
}

// writer commits one row per transaction into app.w on the primary, as fast as it can, until
// stopped.
type writer struct {
	done   chan struct{}
	wg     sync.WaitGroup
	writes atomic.Int64
}

// startWriter starts a writer; a failed write fails the test and ends it.
func (tc *testCluster) startWriter() *writer {
	w := &writer{done: make(chan struct{})}
	w.wg.Go(func() {
		for {
			select {
			case <-w.done:
				return
			default:
			}
			if _, err := tc.db(tc.primary).Exec("INSERT INTO app.w (at) VALUES (NOW(6))"); err != nil {
				tc.t.Errorf("writer: %v", err)
				return
			}
			w.writes.Add(1)
		}
	})
	return w
}

// stop ends the writer and returns how many writes the primary acknowledged.
func (w *writer) stop() int64 {
	close(w.done)
	w.wg.Wait()
	return w.writes.Load()
}
