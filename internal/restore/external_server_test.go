package restore

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/migrate"
)

// TestServerFromExternal seeds an empty data directory with a logical copy of a server Dolphin
// does not run (a view, a trigger, two GTID domains, an application account), then starts a
// server on it that replicates from the source where the copy ended: a row written on the
// source afterwards arrives, and the application account logs in with its own password. A
// copy with a wrong password leaves no marker, and the next attempt succeeds on the same
// directory.
func TestServerFromExternal(t *testing.T) {
	c := dbtest.Start(t, dbtest.Options{Instances: 1})
	src := c.Instances[0]
	sdb := openDB(t, socketDSN(src, "root", ""))
	execAll(t, sdb,
		"SET GLOBAL read_only = OFF",
		"CREATE DATABASE app",
		"CREATE TABLE app.t (id INT PRIMARY KEY, v VARCHAR(100) NOT NULL)",
		"CREATE TABLE app.audit (id INT AUTO_INCREMENT PRIMARY KEY, t_id INT NOT NULL)",
		"CREATE TRIGGER app.t_audit AFTER INSERT ON app.t FOR EACH ROW INSERT INTO app.audit (t_id) VALUES (NEW.id)",
		"INSERT INTO app.t SELECT seq, CONCAT('row-', seq) FROM app.seq_1_to_3000",
		"CREATE VIEW app.big AS SELECT id FROM app.t WHERE id > 2900",
		"SET SESSION gtid_domain_id = 1",
		"CREATE TABLE app.u (id INT PRIMARY KEY)",
		"INSERT INTO app.u SELECT seq FROM app.seq_1_to_10",
		"SET SESSION gtid_domain_id = 0",
		"CREATE USER 'migrate'@'%' IDENTIFIED BY 'mig pw #1'",
		"GRANT SELECT, SHOW VIEW, TRIGGER, EVENT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'migrate'@'%'",
		"CREATE USER 'app'@'%' IDENTIFIED BY 'app-pw'",
		"GRANT INSERT, SELECT ON app.* TO 'app'@'%'",
	)
	wantPos := str(t, sdb, "SELECT @@gtid_binlog_pos")
	wantSum := checksum(t, sdb, "app.t")

	inst := target(t)
	tmp, err := os.MkdirTemp("", tmpDirTemplate) // short: the socket goes there
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	opts := ExternalOptions{
		Source:  migrate.Endpoint{Host: src.Host, Port: src.Port, User: "migrate", Password: "wrong"},
		DataDir: inst.DataDir, DefaultsFile: inst.ConfigFile,
		OperatorUser: operatorUser, OperatorPassword: newOperatorPw, RootPassword: newRootPw,
		TmpDir: tmp, StartTimeout: time.Minute, StopTimeout: time.Minute,
		Log: func(format string, args ...any) { t.Logf("external: "+format, args...) },
	}
	if _, err := FromExternal(t.Context(), opts); err == nil || !strings.Contains(err.Error(), "Access denied") {
		t.Fatalf("a copy with a wrong password: %v, want the source's access denied", err)
	}
	for _, name := range []string{InitializedMarker, RestoredMarker, StagingDir} {
		if slices.Contains(dirEntries(t, inst.DataDir), name) {
			t.Errorf("a failed copy left %s in the data directory", name)
		}
	}

	opts.Source.Password = "mig pw #1"
	res, err := FromExternal(t.Context(), opts)
	if err != nil {
		t.Fatalf("FromExternal: %v", err)
	}
	if res.Skipped || !SameGTIDPosition(res.GTIDPosition, wantPos) || res.Bytes == 0 {
		t.Errorf("result %+v, want the source's position %q", res, wantPos)
	}
	var copied []string
	for _, a := range res.Accounts.Copied {
		copied = append(copied, a.User)
	}
	if !slices.Contains(copied, "app") || slices.Contains(copied, "migrate") {
		t.Errorf("accounts copied %v, want app and never the migration account", copied)
	}
	mk, err := readMarker(inst.DataDir)
	if err != nil || !strings.HasPrefix(mk.Source, "external copy from migrate@") || !SameGTIDPosition(mk.GTIDPosition, wantPos) {
		t.Errorf("%s: %+v (%v)", RestoredMarker, mk, err)
	}
	if again, err := FromExternal(t.Context(), opts); err != nil || !again.Skipped {
		t.Errorf("a second FromExternal = %+v, %v; want Skipped", again, err)
	}

	inst.StartAs(t, "root", newRootPw)
	root := openDB(t, socketDSN(inst, "root", newRootPw))
	if got := checksum(t, root, "app.t"); got != wantSum {
		t.Errorf("app.t's checksum %s, the source's %s", got, wantSum)
	}
	if n := count(t, root, "app.audit"); n != 3000 {
		t.Errorf("app.audit has %d rows, want the source's 3000 (the trigger's, not fired again by the load)", n)
	}
	if n := count(t, root, "app.big"); n != 100 {
		t.Errorf("the view app.big has %d rows, want 100", n)
	}
	for _, v := range []string{"gtid_binlog_pos", "gtid_slave_pos"} {
		if got := str(t, root, "SELECT @@"+v); !SameGTIDPosition(got, wantPos) {
			t.Errorf("@@%s %q, want the copy's position %q", v, got, wantPos)
		}
	}
	app := openDB(t, tcpDSN(inst, "app", "app-pw"))
	if n := count(t, app, "app.u"); n != 10 {
		t.Errorf("the application account reads %d rows of app.u, want 10", n)
	}
	op := openDB(t, socketDSN(inst, operatorUser, newOperatorPw))
	if got := str(t, op, "SELECT CURRENT_USER()"); !strings.HasPrefix(got, operatorUser+"@") {
		t.Errorf("the operator account is %q", got)
	}

	// Replication from the source continues exactly where the copy ended.
	execAll(t, root, fmt.Sprintf("CHANGE MASTER TO MASTER_HOST = '%s', MASTER_PORT = %d, MASTER_USER = 'migrate', MASTER_PASSWORD = 'mig pw #1', MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1", src.Host, src.Port),
		"START SLAVE")
	execAll(t, sdb, "INSERT INTO app.t VALUES (3001, 'after the copy')")
	deadline := time.Now().Add(30 * time.Second)
	for count(t, root, "app.t") != 3001 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if got, want := checksum(t, root, "app.t"), checksum(t, sdb, "app.t"); got != want {
		t.Errorf("after replicating from the source: app.t's checksum %s, the source's %s (slave status: %v)", got, want,
			str(t, root, "SELECT CONCAT(@@gtid_slave_pos, ' ', @@gtid_current_pos)"))
	}
	if _, err := os.Stat(filepath.Join(inst.DataDir, InitializedMarker)); err != nil {
		t.Error(err)
	}
}

// TestServerChangesAfterTheAccounts: the copy's second look at the source's binary log, after
// its accounts were copied, finds an account created meanwhile (replication would create it
// again and stop with "Operation CREATE USER failed") and names it; without one it passes.
func TestServerChangesAfterTheAccounts(t *testing.T) {
	src := dbtest.Start(t, dbtest.Options{Instances: 1}).Instances[0]
	root, err := sql.Open("mysql", src.RootDSN(""))
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, q := range []string{"SET GLOBAL read_only = OFF", "CREATE USER 'migrate'@'%' IDENTIFIED BY 'pw'",
		"GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'migrate'@'%'", "CREATE DATABASE app", "CREATE TABLE app.t (id INT PRIMARY KEY)"} {
		if _, err := root.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	at, err := migrate.MasterCoordinates(t.Context(), root)
	if err != nil {
		t.Fatal(err)
	}
	o := &ExternalOptions{Source: migrate.Endpoint{Host: src.Host, Port: src.Port, User: "migrate", Password: "pw"}}
	if _, err := root.Exec("INSERT INTO app.t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if err := o.noChangesSince(t.Context(), at); err != nil {
		t.Fatalf("row changes only: %v", err)
	}
	if _, err := root.Exec("CREATE USER 'late'@'%' IDENTIFIED BY 'x'"); err != nil {
		t.Fatal(err)
	}
	err = o.noChangesSince(t.Context(), at)
	if !errors.Is(err, migrate.ErrChangedDuringCopy) || !strings.Contains(err.Error(), "CREATE USER 'late'") || strings.Contains(err.Error(), "'x'") {
		t.Fatalf("an account created after the copy's look (named, its password not shown): %v", err)
	}
	t.Log(err)
}
