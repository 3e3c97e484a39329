package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestServerLogicalCopyThenReplicate is a migration's first half on real servers: a source with
// data, a view, a routine and a trigger, written to all along by an application; a logical copy
// into a new server through the migration account; replication from the source continuing at
// the copy's position. Once caught up the new server holds exactly the source's rows (every
// acknowledged write, nothing twice: a primary key would refuse a repeat) and the same table
// checksums, the schema objects came along, and the copy itself left the new server's binary
// log empty (sql_log_bin=0: nothing of it to replicate again).
func TestServerLogicalCopyThenReplicate(t *testing.T) {
	c := dbtest.Start(t, dbtest.Options{Instances: 2})
	src, dst := c.Instances[0], c.Instances[1]
	srcRoot := open(t, src.RootDSN(""))
	execAll(t, srcRoot,
		"SET GLOBAL read_only = OFF", // dbtest servers start as Dolphin's do: read-only
		"CREATE DATABASE app",
		"CREATE TABLE app.t (id INT PRIMARY KEY, v VARCHAR(40) NOT NULL, b VARBINARY(16)) ENGINE=InnoDB",
		"INSERT INTO app.t SELECT seq, CONCAT('row-', seq), UNHEX('00FF10') FROM app.seq_1_to_20000",
		"CREATE TABLE app.audit (id INT PRIMARY KEY AUTO_INCREMENT, tid INT NOT NULL) ENGINE=InnoDB",
		"CREATE TRIGGER app.t_ins AFTER INSERT ON app.t FOR EACH ROW INSERT INTO app.audit (tid) VALUES (NEW.id)",
		"CREATE VIEW app.big AS SELECT id FROM app.t WHERE id > 10000",
		"CREATE PROCEDURE app.count_rows(OUT n INT) SELECT COUNT(*) INTO n FROM app.t",
		"CREATE DATABASE empty_schema",
		"CREATE USER 'migrate'@'%' IDENTIFIED BY 'mig pw #1'",
		"GRANT SELECT, SHOW VIEW, TRIGGER, EVENT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'migrate'@'%'",
		"CREATE USER 'app'@'%' IDENTIFIED BY 'app-pw'",
		"GRANT INSERT, SELECT ON app.* TO 'app'@'%'")
	dstBinlogBefore := gtidBinlogPos(t, open(t, dst.RootDSN("")))

	// The application writes through the whole copy.
	app := open(t, "app:app-pw@tcp("+src.Addr()+")/app")
	var (
		acked   []int
		ackedMu sync.Mutex
		stop    atomic.Bool
		wg      sync.WaitGroup
	)
	wg.Go(func() {
		for id := 100001; !stop.Load(); id++ {
			if _, err := app.Exec("INSERT INTO t VALUES (?, 'live', NULL)", id); err != nil {
				t.Errorf("application write %d: %v", id, err)
				return
			}
			ackedMu.Lock()
			acked = append(acked, id)
			ackedMu.Unlock()
		}
	})
	testenv.Eventually(t, 10*time.Second, "the application writing", func() error {
		ackedMu.Lock()
		defer ackedMu.Unlock()
		if len(acked) < 50 {
			return fmt.Errorf("%d writes", len(acked))
		}
		return nil
	})

	var progressCalls atomic.Int64
	res, err := LogicalCopy(t.Context(), LogicalCopyOptions{
		Source:   Endpoint{Host: src.Host, Port: src.Port, User: "migrate", Password: "mig pw #1"},
		Target:   Endpoint{Socket: dst.SocketPath(), User: "root"},
		TmpDir:   t.TempDir(),
		Progress: func(int64) { progressCalls.Add(1) },
	})
	if err != nil {
		t.Fatalf("LogicalCopy: %v", err)
	}
	t.Logf("copied %d bytes in %v at GTID %s", res.Bytes, res.Took.Round(time.Millisecond), res.GTIDPosition)
	if res.GTIDPosition == "" || res.Bytes == 0 || progressCalls.Load() == 0 {
		t.Fatalf("result %+v after %d progress calls", res, progressCalls.Load())
	}
	dstRoot := open(t, dst.RootDSN("interpolateParams=true"))
	if got := str(t, dstRoot, "SELECT @@gtid_slave_pos"); got != res.GTIDPosition {
		t.Errorf("the target's gtid_slave_pos is %q, want the copy's %q", got, res.GTIDPosition)
	}
	if after := gtidBinlogPos(t, dstRoot); after != dstBinlogBefore {
		t.Errorf("the copy wrote the target's binary log: gtid_binlog_pos %q, was %q", after, dstBinlogBefore)
	}

	// Replicate from the source at the copy's position while the application still writes.
	execAll(t, dstRoot, fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='%s', MASTER_PORT=%d, MASTER_USER='migrate', "+
		"MASTER_PASSWORD='mig pw #1', MASTER_USE_GTID=slave_pos", src.Host, src.Port), "START SLAVE")
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	final := gtidBinlogPos(t, srcRoot)
	var waited int
	if err := dstRoot.QueryRow("SELECT MASTER_GTID_WAIT(?, 60)", final).Scan(&waited); err != nil || waited != 0 {
		var status string
		_ = dstRoot.QueryRow("SELECT CONCAT(@@gtid_slave_pos)").Scan(&status)
		t.Fatalf("the target did not reach the source's %s (wait %d, %v; at %s)", final, waited, err, status)
	}

	srcIDs, dstIDs := ids(t, srcRoot), ids(t, dstRoot)
	if !slices.Equal(srcIDs, dstIDs) {
		t.Fatalf("the target holds %d rows, the source %d: not the same rows", len(dstIDs), len(srcIDs))
	}
	missing := 0
	for _, id := range acked {
		if _, ok := slices.BinarySearch(dstIDs, id); !ok {
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("%d of %d acknowledged writes are missing on the target", missing, len(acked))
	}
	for _, table := range []string{"app.t", "app.audit"} {
		if a, b := checksum(t, srcRoot, table), checksum(t, dstRoot, table); a != b {
			t.Errorf("CHECKSUM TABLE %s: source %d, target %d", table, a, b)
		}
	}
	var n int
	if _, err := dstRoot.Exec("CALL app.count_rows(@n)"); err != nil {
		t.Fatalf("the routine came along? %v", err)
	}
	if err := dstRoot.QueryRow("SELECT @n").Scan(&n); err != nil || n != len(dstIDs) {
		t.Errorf("app.count_rows on the target: %d, %v; want %d", n, err, len(dstIDs))
	}
	if got := str(t, dstRoot, "SELECT COUNT(*) FROM app.big"); got == "0" {
		t.Error("the view app.big is empty on the target")
	}
	if got := str(t, dstRoot, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = 'empty_schema'"); got != "1" {
		t.Error("the empty schema did not come along")
	}
	t.Logf("%d rows equal, %d acknowledged writes all there, checksums equal", len(dstIDs), len(acked))
}

func str(t *testing.T, db *sql.DB, q string) string {
	t.Helper()
	var s sql.NullString
	if err := db.QueryRow(q).Scan(&s); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return s.String
}

func ids(t *testing.T, db *sql.DB) []int {
	t.Helper()
	rows, err := db.Query("SELECT id FROM app.t ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var id int
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	return out
}

func checksum(t *testing.T, db *sql.DB, table string) int64 {
	t.Helper()
	var name string
	var sum sql.NullInt64
	if err := db.QueryRow("CHECKSUM TABLE "+table+" EXTENDED").Scan(&name, &sum); err != nil || !sum.Valid {
		t.Fatalf("CHECKSUM TABLE %s: %v (%v)", table, err, sum)
	}
	return sum.Int64
}

// TestServerLogicalCopyFailures: a wrong password and an unreachable target each fail with the
// failing tool's own words.
func TestServerLogicalCopyFailures(t *testing.T) {
	c := dbtest.Start(t, dbtest.Options{Instances: 2})
	src, dst := c.Instances[0], c.Instances[1]
	execAll(t, open(t, src.RootDSN("")), "CREATE USER 'migrate'@'%' IDENTIFIED BY 'pw'",
		"GRANT SELECT, SHOW VIEW, TRIGGER, EVENT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'migrate'@'%'",
		// More than a pipe holds, so that a loader failing early leaves the dump writing.
		"SET GLOBAL read_only = OFF", "CREATE DATABASE app", "CREATE TABLE app.t (id INT PRIMARY KEY, v CHAR(100) NOT NULL)",
		"INSERT INTO app.t SELECT seq, REPEAT('x', 100) FROM app.seq_1_to_50000")
	execAll(t, open(t, dst.RootDSN("")), "CREATE USER 'limited'@'localhost' IDENTIFIED BY 'pw'")
	for _, tc := range []struct {
		name   string
		source Endpoint
		target Endpoint
		want   []string
	}{
		{"wrong password", Endpoint{Host: src.Host, Port: src.Port, User: "migrate", Password: "wrong"},
			Endpoint{Socket: dst.SocketPath(), User: "root"}, []string{"mariadb-dump failed", "Access denied"}},
		{"target unreachable", Endpoint{Host: src.Host, Port: src.Port, User: "migrate", Password: "pw"},
			Endpoint{Socket: t.TempDir() + "/none.sock", User: "root"}, []string{"mariadb failed", "none.sock"}},
		// The loader stops at its first statement while the dump has megabytes to write.
		{"loader fails early", Endpoint{Host: src.Host, Port: src.Port, User: "migrate", Password: "pw"},
			Endpoint{Socket: dst.SocketPath(), User: "limited", Password: "pw"}, []string{"mariadb failed", "denied"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			began := time.Now()
			_, err := LogicalCopy(ctx, LogicalCopyOptions{Source: tc.source, Target: tc.target, TmpDir: t.TempDir()})
			if ctx.Err() != nil {
				t.Fatalf("LogicalCopy returned only when its context ended (%v): %v", time.Since(began), err)
			}
			if err == nil {
				t.Fatal("LogicalCopy succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			t.Logf("%v", err)
		})
	}
}
