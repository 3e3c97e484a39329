package sqlobjects

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
)

var testAccounts = dbsql.Accounts{
	Operator:    dbsql.Account{User: "dolphin", Password: "op-pw"},
	Replication: dbsql.Account{User: "dolphin-repl", Password: "repl-pw"},
	Monitor:     dbsql.Account{User: "dolphin-monitor", Password: "mon-pw"},
	Schema:      dbsql.Account{User: "dolphin-schema", Password: "op-pw"},
}

// pair makes instance 0 a writable primary and instance 1 its read-only replica, with
// Dolphin's accounts on both; it returns the operator connections.
func pair(ctx context.Context, t *testing.T, c *dbtest.Cluster) []dbsql.Instance {
	t.Helper()
	ops := make([]dbsql.Instance, len(c.Instances))
	for i, s := range c.Instances {
		root, err := dbsql.Open(dbsql.Config{Flavor: dbsql.FlavorMariaDB, Addr: s.Addr(), User: "root"})
		if err != nil {
			t.Fatal(err)
		}
		if err := root.EnsureAccounts(ctx, testAccounts); err != nil {
			t.Fatalf("%s: EnsureAccounts: %v", s.Name, err)
		}
		root.Close()
		op, err := dbsql.Open(dbsql.Config{Flavor: dbsql.FlavorMariaDB, Addr: s.Addr(), User: testAccounts.Operator.User, Password: testAccounts.Operator.Password})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { op.Close() })
		ops[i] = op
	}
	must(t, ops[0].SetReadOnly(ctx, false))
	must(t, ops[1].SetReadOnly(ctx, true))
	must(t, ops[1].ConfigureReplication(ctx, dbsql.Source{Host: c.Instances[0].Host, Port: c.Instances[0].Port,
		User: testAccounts.Replication.User, Password: testAccounts.Replication.Password}))
	return ops
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// schemaServer opens s as the schema account, like the operator does.
func schemaServer(t *testing.T, s *dbtest.Instance) *Server {
	t.Helper()
	db, err := dbsql.OpenReplicated(dbsql.Config{Flavor: dbsql.FlavorMariaDB, Addr: s.Addr(), User: testAccounts.Schema.User, Password: testAccounts.Schema.Password})
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(db, MariaDB)
	t.Cleanup(func() { srv.Close() })
	return srv
}

// converge observes, plans and applies until nothing is left to do, like one reconcile; it
// returns how many statements it ran and fails when a second pass still finds work.
func converge(ctx context.Context, t *testing.T, s *Server, u User, setPassword bool) int {
	t.Helper()
	have, err := s.ObserveUser(ctx, u.Name, u.Host)
	must(t, err)
	plan := PlanUser(s.Flavor(), u, have, setPassword)
	must(t, s.Apply(ctx, plan))
	again, err := s.ObserveUser(ctx, u.Name, u.Host)
	must(t, err)
	cur, _ := PasswordIsCurrent(again, u.Password)
	if rest := PlanUser(s.Flavor(), u, again, !cur); len(rest) > 0 {
		t.Fatalf("after applying %q the plan is still %q", statements(plan), statements(rest))
	}
	return len(plan)
}

func login(ctx context.Context, s *dbtest.Instance, user, password, database string) (*sql.DB, error) {
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr, cfg.User, cfg.Passwd, cfg.DBName = "tcp", s.Addr(), user, password, database
	cfg.Timeout = 3 * time.Second
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(conn)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

func executed(ctx context.Context, t *testing.T, op dbsql.Instance) dbsql.GTIDSet {
	t.Helper()
	st, err := op.Status(ctx)
	must(t, err)
	return st.Executed
}

// TestServerUsersAndDatabases applies users, grants and databases on a real primary and
// checks them through the accounts themselves: created, replicated to the replica, changed,
// repaired after changes by hand, rotated under a connected client, refused on a read-only
// server, and dropped. A converged account or database costs no transaction.
func TestServerUsersAndDatabases(t *testing.T) {
	dbtest.RequireMariaDB(t)
	c := dbtest.Start(t, dbtest.Options{Instances: 2})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	ops := pair(ctx, t, c)
	primary, replica := c.Instances[0], c.Instances[1]
	srv := schemaServer(t, primary)
	must(t, srv.CheckWritable(ctx))
	// The schema account itself holds nothing that passes read_only or administers servers.
	schema, err := srv.ObserveUser(ctx, testAccounts.Schema.User, "%")
	must(t, err)
	for _, p := range []string{"READ_ONLY ADMIN", "SUPER", "SHUTDOWN", "FILE", "RELOAD", "BINLOG ADMIN", "CONNECTION ADMIN"} {
		if schema.Privileges[Scope{Database: "*", Table: "*"}].Privileges[p] {
			t.Errorf("the schema account holds %s", p)
		}
	}
	// A privilege it cannot grant is the server refusing the declaration, not a wait.
	err = srv.Apply(ctx, []Statement{{SQL: "GRANT SUPER ON *.* TO ?@?", Args: []any{testAccounts.Monitor.User, "%"}}})
	if !IsRefused(err) {
		t.Errorf("granting a privilege the schema account lacks: %v, want refused", err)
	}

	// A database with declared defaults, and an application account on it.
	shop := Database{Name: "shop-db", CharacterSet: "utf8mb4", Collation: "utf8mb4_bin"}
	applyDatabase := func(d Database) int {
		t.Helper()
		have, err := srv.ObserveDatabase(ctx, d.Name)
		must(t, err)
		plan, err := PlanDatabase(d, have)
		must(t, err)
		must(t, srv.Apply(ctx, plan))
		have, err = srv.ObserveDatabase(ctx, d.Name)
		must(t, err)
		if rest, _ := PlanDatabase(d, have); len(rest) > 0 || !have.Exists {
			t.Fatalf("database %s after %q: %+v, plan %q", d.Name, statements(plan), have, statements(rest))
		}
		return len(plan)
	}
	if n := applyDatabase(shop); n != 1 {
		t.Errorf("creating the database took %d statements, want 1", n)
	}
	app := User{Name: "app", Host: "%", Password: "first-Pa55", MaxUserConnections: 10, Grants: []Grant{
		{Privileges: []string{"SELECT", "INSERT", "UPDATE", "DELETE", "CREATE"}, Database: "shop-db"},
		{Privileges: []string{"SELECT"}, Database: "*"},
	}}
	if n := converge(ctx, t, srv, app, false); n != 3 {
		t.Errorf("creating the account took %d statements, want 3 (CREATE USER and two GRANTs)", n)
	}
	appDB, err := login(ctx, primary, "app", app.Password, "shop-db")
	must(t, err)
	defer appDB.Close()
	if _, err := appDB.ExecContext(ctx, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))"); err != nil {
		t.Fatalf("the application account cannot create a table in its database: %v", err)
	}
	if _, err := appDB.ExecContext(ctx, "INSERT INTO t VALUES (1, 'a')"); err != nil {
		t.Fatal(err)
	}
	if _, err := appDB.ExecContext(ctx, "DROP TABLE t"); err == nil {
		t.Error("the application account dropped a table without the DROP privilege")
	}

	// Converged: observing and planning again writes nothing (no GTID per resync).
	before := executed(ctx, t, ops[0])
	if n := converge(ctx, t, srv, app, false); n != 0 {
		t.Errorf("a converged account planned %d statements", n)
	}
	if n := applyDatabase(shop); n != 0 {
		t.Errorf("a converged database planned %d statements", n)
	}
	if after := executed(ctx, t, ops[0]); !after.Contains(before) || !before.Contains(after) {
		t.Errorf("a converged pass wrote transactions: %s -> %s", before, after)
	}

	// Everything replicated: the replica has the account (with its password) and the table.
	if err := ops[1].WaitForGTID(ctx, executed(ctx, t, ops[0]), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	repDB, err := login(ctx, replica, "app", app.Password, "shop-db")
	if err != nil {
		t.Fatalf("the account did not replicate: %v", err)
	}
	var n int
	must(t, repDB.QueryRowContext(ctx, "SELECT COUNT(*) FROM t").Scan(&n))
	repDB.Close()
	if n != 1 {
		t.Errorf("replica has %d rows, want 1", n)
	}

	// Drift by hand (an administrator on the primary) is found and repaired.
	root, err := login(ctx, primary, testAccounts.Operator.User, testAccounts.Operator.Password, "")
	must(t, err)
	defer root.Close()
	for _, q := range []string{
		"REVOKE INSERT ON `shop-db`.* FROM 'app'@'%'",
		"GRANT DROP, ALTER ON `shop-db`.* TO 'app'@'%'",
		"GRANT SELECT ON `mysql`.`user` TO 'app'@'%'",
		"GRANT PROCESS ON *.* TO 'app'@'%'",
		"ALTER USER 'app'@'%' WITH MAX_USER_CONNECTIONS 99",
		"ALTER DATABASE `shop-db` COLLATE utf8mb4_general_ci",
	} {
		if _, err := root.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if n := converge(ctx, t, srv, app, false); n != 5 {
		t.Errorf("repairing took %d statements, want 5 (ALTER USER, GRANT INSERT, REVOKE DROP/ALTER, REVOKE PROCESS, REVOKE on the table)", n)
	}
	if n := applyDatabase(shop); n != 1 {
		t.Errorf("repairing the collation took %d statements, want 1", n)
	}
	if fresh, err := login(ctx, primary, "app", app.Password, "shop-db"); err != nil {
		t.Error(err)
	} else {
		if _, err := fresh.ExecContext(ctx, "INSERT INTO t VALUES (2, 'b')"); err != nil {
			t.Errorf("INSERT after the repair: %v", err)
		}
		fresh.Close()
	}

	// A privilege removed from the declaration is revoked.
	app.Grants[0].Privileges = []string{"SELECT", "INSERT", "UPDATE", "CREATE"}
	if n := converge(ctx, t, srv, app, false); n != 1 {
		t.Errorf("revoking DELETE took %d statements, want 1", n)
	}
	// Database privileges reach open sessions at their next USE (the server caches them per
	// session); a new connection has the new set at once.
	fresh, err := login(ctx, primary, "app", app.Password, "shop-db")
	must(t, err)
	if _, err := fresh.ExecContext(ctx, "DELETE FROM t"); err == nil {
		t.Error("DELETE still allowed after it was removed from the grants")
	}
	fresh.Close()

	// Password rotation under a connected client: the open session keeps working, the new
	// password logs in, the old one no longer does.
	session, err := appDB.Conn(ctx)
	must(t, err)
	defer session.Close()
	have, err := srv.ObserveUser(ctx, "app", "%")
	must(t, err)
	app.Password = "second-Pa55"
	if cur, known := PasswordIsCurrent(have, app.Password); cur || !known {
		t.Fatalf("new password: current=%v known=%v, want a known difference", cur, known)
	}
	if n := converge(ctx, t, srv, app, true); n != 1 {
		t.Errorf("rotating took %d statements, want 1", n)
	}
	if _, err := session.ExecContext(ctx, "INSERT INTO t VALUES (3, 'c')"); err != nil {
		t.Errorf("a session opened before the rotation broke: %v", err)
	}
	if db, err := login(ctx, primary, "app", "second-Pa55", "shop-db"); err != nil {
		t.Errorf("new password refused: %v", err)
	} else {
		db.Close()
	}
	if db, err := login(ctx, primary, "app", "first-Pa55", "shop-db"); err == nil {
		db.Close()
		t.Error("old password still accepted")
	}

	// No password reached the binary log (and so no relay log or archive): MariaDB logs the
	// statements as typed, and Dolphin sends only the hash.
	for _, pw := range []string{"first-Pa55", "second-Pa55"} {
		if ev := binlogMentions(ctx, t, root, pw); ev != "" {
			t.Errorf("the binary log holds the password %q: %s", pw, ev)
		}
	}
	if ev := binlogMentions(ctx, t, root, "ALTER USER"); ev == "" {
		t.Error("no ALTER USER in the binary log: the check above looked at nothing")
	}

	// A read-only server (a replica, or a fenced primary) refuses everything, and nothing
	// reaches its binary log.
	repSrv := schemaServer(t, replica)
	if err := repSrv.CheckWritable(ctx); !errors.Is(err, ErrReadOnly) {
		t.Errorf("CheckWritable on the replica: %v, want ErrReadOnly", err)
	}
	for _, st := range []Statement{
		{SQL: "CREATE DATABASE `errant`"},
		PlanDropUser("app", "%"),
		{SQL: "GRANT SELECT ON *.* TO ?@?", Args: []any{"app", "%"}},
	} {
		if err := repSrv.Apply(ctx, []Statement{st}); !errors.Is(err, ErrReadOnly) {
			t.Errorf("%s on the replica: %v, want ErrReadOnly", st, err)
		}
	}
	// The replica may still be applying the primary's last transactions: what matters is that
	// it holds nothing the primary lacks (read the replica first, then the primary).
	if after, primarySet := executed(ctx, t, ops[1]), executed(ctx, t, ops[0]); !primarySet.Contains(after) {
		t.Errorf("the replica wrote transactions of its own: it has %s, the primary %s", after, primarySet)
	}

	// Dropping the account and the database.
	must(t, srv.Apply(ctx, []Statement{PlanDropUser("app", "%"), PlanDropDatabase("shop-db")}))
	if have, err := srv.ObserveUser(ctx, "app", "%"); err != nil || have.Exists {
		t.Errorf("account after DROP USER: %+v, %v", have, err)
	}
	if have, err := srv.ObserveDatabase(ctx, "shop-db"); err != nil || have.Exists {
		t.Errorf("database after DROP DATABASE: %+v, %v", have, err)
	}
	must(t, srv.Apply(ctx, []Statement{PlanDropUser("app", "%"), PlanDropDatabase("shop-db")})) // idempotent
}

// binlogMentions returns the first binary log event of the server whose text contains s, or "".
func binlogMentions(ctx context.Context, t *testing.T, db *sql.DB, s string) string {
	t.Helper()
	rows, err := db.QueryContext(ctx, "SHOW BINARY LOGS")
	must(t, err)
	var files []string
	for rows.Next() {
		var name string
		var size any
		must(t, rows.Scan(&name, &size))
		files = append(files, name)
	}
	rows.Close()
	for _, f := range files {
		ev, err := db.QueryContext(ctx, "SHOW BINLOG EVENTS IN '"+f+"'")
		must(t, err)
		for ev.Next() {
			var logName, evType, info string
			var pos, serverID, end any
			must(t, ev.Scan(&logName, &pos, &evType, &serverID, &end, &info))
			if strings.Contains(info, s) {
				ev.Close()
				return info
			}
		}
		ev.Close()
	}
	return ""
}
