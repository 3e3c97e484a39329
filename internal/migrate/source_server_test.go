package migrate

import (
	"database/sql"
	"slices"
	"strings"
	"testing"

	_ "github.com/go-sql-driver/mysql"

	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
)

// TestServerObserveAndCheck reads real servers through a migration account, as the checks
// will before a migration starts: a source set up as docs/migrate.md will ask passes every
// check; a misconfigured one fails each check it should, blocking or not; a source without a
// binary log is refused for that. Observe changes nothing on the source.
func TestServerObserveAndCheck(t *testing.T) {
	t.Run("Good", func(t *testing.T) {
		inst := dbtest.Start(t, dbtest.Options{Instances: 1}).Instances[0]
		root := open(t, inst.RootDSN(""))
		execAll(t, root,
			"CREATE DATABASE app",
			"CREATE TABLE app.orders (id INT PRIMARY KEY, v VARCHAR(20)) ENGINE=InnoDB",
			"CREATE VIEW app.recent AS SELECT id FROM app.orders",
			"CREATE USER 'migrate'@'%' IDENTIFIED BY 'pw'",
			"GRANT SELECT, SHOW VIEW, TRIGGER, EVENT, REPLICATION SLAVE, BINLOG MONITOR, READ_ONLY ADMIN, CONNECTION ADMIN, PROCESS ON *.* TO 'migrate'@'%'")
		before := gtidBinlogPos(t, root)
		src := observe(t, "migrate:pw@tcp("+inst.Addr()+")/")
		if !strings.Contains(src.Version, "MariaDB") || src.ServerID != uint64(inst.ServerID()) || !src.LogBin ||
			src.BinlogFormat != "ROW" || src.Account != "migrate@%" || src.GTIDBinlogPos != before {
			t.Errorf("observed %+v", src)
		}
		if want := []Table{{"app", "orders", "InnoDB", true}}; !slices.Equal(src.Tables, want) {
			t.Errorf("tables %+v, want %+v (no view, no system table)", src.Tables, want)
		}
		if fs := Check(src, Target{EngineVersion: src.Version, Copy: CopyLogical}); len(fs) != 0 {
			t.Errorf("findings on a good source: %v", fs)
		}
		if after := gtidBinlogPos(t, root); after != before {
			t.Errorf("the source's binary log moved from %q to %q while it was observed", before, after)
		}
	})

	t.Run("Misconfigured", func(t *testing.T) {
		inst := dbtest.Start(t, dbtest.Options{Instances: 1, ExtraConfig: map[string]string{
			"binlog_format": "MIXED", "binlog_row_image": "MINIMAL", "gtid_strict_mode": "0",
			"expire_logs_days": "0.5", "server_id": "1001",
		}}).Instances[0]
		root := open(t, inst.RootDSN(""))
		execAll(t, root,
			"CREATE DATABASE app",
			"CREATE TABLE app.log (id INT PRIMARY KEY) ENGINE=MyISAM",
			"CREATE TABLE app.events (v INT) ENGINE=InnoDB",
			"CREATE TABLE app.keyed (id INT PRIMARY KEY) ENGINE=InnoDB",
			"CREATE USER 'partial'@'%' IDENTIFIED BY 'pw'",
			"GRANT SELECT ON *.* TO 'partial'@'%'")
		src := observe(t, "partial:pw@tcp("+inst.Addr()+")/")
		// Read with SELECT alone, the keys are still seen.
		if want := []Table{{"app", "events", "InnoDB", false}, {"app", "keyed", "InnoDB", true}, {"app", "log", "MyISAM", true}}; !slices.Equal(src.Tables, want) {
			t.Errorf("tables %+v, want %+v", src.Tables, want)
		}
		fs := Check(src, Target{EngineVersion: "10.11.19", Copy: CopyLogical})
		got := map[string]bool{}
		for _, f := range fs {
			got[f.Check] = f.Blocking
			t.Logf("%s", f)
		}
		want := map[string]bool{
			"binlog-format": true, "server-id": true, "privileges": true, "engines": true,
			"primary-keys": false, "binlog-row-image": false, "gtid-strict-mode": false, "binlog-retention": false,
			"cutover-privileges": false,
		}
		if len(got) != len(want) {
			t.Errorf("checks failed %v, want %v", got, want)
		}
		for check, blocking := range want {
			if b, ok := got[check]; !ok || b != blocking {
				t.Errorf("check %s: failed=%v blocking=%v, want failed, blocking=%v", check, ok, b, blocking)
			}
		}
	})

	t.Run("LogLeavesChangesOut", func(t *testing.T) {
		inst := dbtest.Start(t, dbtest.Options{Instances: 1, ExtraConfig: map[string]string{
			"binlog_ignore_db": "scratch", "log_slave_updates": "0",
		}}).Instances[0]
		root := open(t, inst.RootDSN(""))
		execAll(t, root, "SET GLOBAL gtid_slave_pos = '7-99-5'") // once a replica of another server
		src := observe(t, inst.RootDSN(""))
		got := map[string]bool{}
		for _, f := range Check(src, Target{EngineVersion: src.Version, Copy: CopyLogical}) {
			got[f.Check] = f.Blocking
			t.Logf("%s", f)
		}
		if !src.BinlogFiltersKnown || src.BinlogIgnoreDB != "scratch" || !got["binlog-filters"] || !got["log-slave-updates"] || len(got) != 2 {
			t.Errorf("observed filters known=%v ignore=%q, findings %v; want binlog-filters and log-slave-updates, blocking",
				src.BinlogFiltersKnown, src.BinlogIgnoreDB, got)
		}
	})

	t.Run("NoBinaryLog", func(t *testing.T) {
		inst := dbtest.Start(t, dbtest.Options{Instances: 1, ExtraConfig: map[string]string{"skip-log-bin": ""}}).Instances[0]
		src := observe(t, inst.RootDSN(""))
		fs := Check(src, Target{EngineVersion: src.Version, Copy: CopyLogical})
		if src.LogBin || len(fs) != 1 || fs[0].Check != "binlog" || !fs[0].Blocking {
			t.Errorf("log_bin=%v, findings %v; want one blocking binlog finding", src.LogBin, fs)
		}
	})
}

func open(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func observe(t *testing.T, dsn string) Source {
	t.Helper()
	src, err := Observe(t.Context(), open(t, dsn))
	if err != nil {
		t.Fatalf("Observe: %v", err)
	}
	return src
}

func execAll(t *testing.T, db *sql.DB, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func gtidBinlogPos(t *testing.T, db *sql.DB) string {
	t.Helper()
	var pos string
	if err := db.QueryRow("SELECT @@gtid_binlog_pos").Scan(&pos); err != nil {
		t.Fatal(err)
	}
	return pos
}
