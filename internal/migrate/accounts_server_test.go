package migrate

import (
	"database/sql"
	"slices"
	"strings"
	"testing"

	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
)

// TestServerCopyAccounts copies a source's accounts into a new server: an application logs in
// to the new server with its old password (copied as the hash the source stores), every copied
// account and role shows the same grants on both, the server's and Dolphin's own accounts and
// the migration account stay behind, an account the target cannot create (its authentication
// plugin is not loaded there) is reported with the reason while the others are copied, and the
// target's binary log holds nothing of it.
func TestServerCopyAccounts(t *testing.T) {
	c := dbtest.Start(t, dbtest.Options{Instances: 2})
	src, dst := c.Instances[0], c.Instances[1]
	srcRoot, dstRoot := open(t, src.RootDSN("")), open(t, dst.RootDSN(""))
	execAll(t, srcRoot,
		"CREATE DATABASE app",
		"CREATE ROLE reader",
		"GRANT SELECT ON app.* TO reader",
		"CREATE USER 'app'@'%' IDENTIFIED BY 'app pw'",
		"GRANT INSERT, UPDATE ON app.* TO 'app'@'%'",
		"GRANT reader TO 'app'@'%'",
		"SET DEFAULT ROLE reader FOR 'app'@'%'",
		// An authentication plugin the target does not load: that account fails, the others not.
		"INSTALL SONAME 'auth_ed25519'",
		"CREATE USER 'report'@'10.0.0.%' IDENTIFIED VIA ed25519 USING PASSWORD('r')",
		"CREATE USER 'migrate'@'%' IDENTIFIED BY 'pw'",
		"GRANT SELECT, REPLICATION SLAVE ON *.* TO 'migrate'@'%'",
		"CREATE USER 'dolphin-old'@'%' IDENTIFIED BY 'x'",
		// A grant the target cannot apply (its table is not there): the account is not left
		// behind with part of its grants.
		"CREATE TABLE app.t (id INT PRIMARY KEY)",
		"CREATE USER 'tbl'@'%' IDENTIFIED BY 't'",
		"GRANT SELECT ON app.t TO 'tbl'@'%'",
		"GRANT SELECT ON app.* TO PUBLIC")
	before := gtidBinlogPos(t, dstRoot)

	res, err := CopyAccounts(t.Context(), open(t, "migrate:pw@tcp("+src.Addr()+")/"), dstRoot,
		func(a Account) bool { return a.User == "migrate" })
	if err != nil {
		t.Fatalf("CopyAccounts: %v", err)
	}
	if why, ok := res.Failed["'report'@'10.0.0.%'"]; !ok || !strings.Contains(why, "ed25519") {
		t.Errorf("failed: %v; want 'report'@'10.0.0.%%', for its plugin", res.Failed)
	}
	if why, ok := res.Failed["'tbl'@'%'"]; len(res.Failed) != 2 || !ok || !strings.Contains(why, "app.t") {
		t.Errorf("failed: %v; want also 'tbl'@'%%', for its table grant", res.Failed)
	}
	if n := str(t, dstRoot, "SELECT COUNT(*) FROM mysql.user WHERE User = 'tbl'"); n != "0" {
		t.Error("'tbl' was left on the target with part of its grants")
	}
	var skipped []string
	for _, a := range res.Skipped {
		skipped = append(skipped, a.User)
	}
	for _, u := range []string{"migrate", "dolphin-old", "root", "mariadb.sys"} {
		if !slices.Contains(skipped, u) {
			t.Errorf("skipped %v: want %s among them", skipped, u)
		}
	}
	if s, d := grantsOf(t, srcRoot, Account{User: "PUBLIC", Role: true}), grantsOf(t, dstRoot, Account{User: "PUBLIC", Role: true}); !slices.Equal(s, d) {
		t.Errorf("PUBLIC's grants: source %q, target %q", s, d)
	}
	for _, g := range grantsOf(t, dstRoot, Account{User: "root", Host: "localhost"}) {
		if strings.Contains(g, "reader") {
			t.Errorf("the loading account holds the copied role: %s", g)
		}
	}
	want := []Account{{User: "reader", Role: true}, {User: "app", Host: "%"}}
	if !slices.Equal(res.Copied, want) {
		t.Errorf("copied %v, want %v", res.Copied, want)
	}
	for _, a := range want {
		s, d := grantsOf(t, srcRoot, a), grantsOf(t, dstRoot, a)
		if !slices.Equal(s, d) {
			t.Errorf("%s: grants on the source %q, on the target %q", a, s, d)
		}
	}
	for _, u := range []string{"migrate", "dolphin-old"} {
		if n := str(t, dstRoot, "SELECT COUNT(*) FROM mysql.user WHERE User = '"+u+"'"); n != "0" {
			t.Errorf("%s was copied", u)
		}
	}
	app := open(t, "app:app pw@tcp("+dst.Addr()+")/")
	if got := str(t, app, "SELECT CURRENT_ROLE()"); got != "reader" {
		t.Errorf("the application on the target: current role %q, want its default reader", got)
	}
	if after := gtidBinlogPos(t, dstRoot); after != before {
		t.Errorf("the target's binary log moved from %q to %q", before, after)
	}
}

func grantsOf(t *testing.T, db *sql.DB, a Account) []string {
	t.Helper()
	g, err := showAll(t.Context(), db, "SHOW GRANTS FOR "+a.sql())
	if err != nil {
		t.Fatalf("SHOW GRANTS FOR %s: %v", a, err)
	}
	slices.Sort(g)
	return g
}
