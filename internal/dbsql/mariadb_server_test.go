package dbsql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestMariaDBServer runs every Instance operation against two real MariaDB
// servers: accounts, replication with semi-sync, waiting, killing clients,
// and a switchover with a rejoin. It proves what exact-SQL tests cannot: the
// statements work, passwords with quotes survive, and the operator's own
// statements never reach the binary log.
func TestMariaDBServer(t *testing.T) {
	dbtest.RequireMariaDB(t)
	c := dbtest.Start(t, dbtest.Options{Instances: 2})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	srv := c.Instances

	// Application-style root sessions (binary logging on), opened before
	// EnsureAccounts drops root@127.0.0.1; open sessions survive that.
	writer, sleeper := rootConn(ctx, t, srv[0]), rootConn(ctx, t, srv[0])
	baseline := make([]GTIDSet, len(srv))
	for i, s := range srv {
		baseline[i] = mustParse(t, FlavorMariaDB, queryString(ctx, t, rootConn(ctx, t, s), "SELECT @@gtid_binlog_state"))
	}

	op := accountsAsRoot(ctx, t, srv)
	for i, s := range srv {
		// Idempotent, and the operator may run it itself.
		if err := op[i].EnsureAccounts(ctx, testAccounts); err != nil {
			t.Fatalf("%s: EnsureAccounts again as operator: %v", s.Name, err)
		}
		checkLockedDown(ctx, t, s)
	}

	src0 := semiSyncPair(ctx, t, op, srv)
	must(t, op[1].ConfigureReplication(ctx, src0))
	must(t, op[1].ConfigureReplication(ctx, src0)) // idempotent
	semiSyncConnected(ctx, t, op[0], srv[0].Name)

	for _, q := range []string{"CREATE DATABASE app", "CREATE TABLE app.t (id INT PRIMARY KEY)", "INSERT INTO app.t VALUES (1)"} {
		if _, err := writer.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	st0 := status(ctx, t, op[0])
	if got, want := seq0(st0.Executed), seq0(baseline[0])+3; got != want {
		t.Errorf("primary executed %q: domain 0 at %d, want %d (3 application writes; admin statements must not be binlogged)",
			st0.Executed, got, want)
	}
	must(t, op[1].WaitForGTID(ctx, st0.Executed, 10*time.Second))

	st1 := status(ctx, t, op[1])
	rep := st1.Replica
	if rep == nil || !rep.IORunning || !rep.SQLRunning || rep.SourceHost != srv[0].Host || rep.SourcePort != srv[0].Port {
		t.Fatalf("replica status %+v", rep)
	}
	if !rep.Received.Equal(st0.Executed) || !st1.Executed.Equal(st0.Executed) {
		t.Errorf("replica received %q executed %q, want both %q", rep.Received, st1.Executed, st0.Executed)
	}
	if st1.ServerID != srv[1].ServerID() || !st1.ReadOnly || st1.SuperReadOnly || !strings.Contains(st1.Version, "MariaDB") {
		t.Errorf("replica server fields: %+v", st1)
	}
	checkNoErrant(ctx, t, op, srv)
	testenv.Eventually(t, 10*time.Second, "semi-sync active with one client on the primary", func() error {
		ss := status(ctx, t, op[0]).SemiSync
		if !ss.SourceEnabled || !ss.SourceActive || ss.Clients != 1 || ss.WaitPoint != "AFTER_SYNC" || ss.TimeoutMS <= 0 {
			return fmt.Errorf("%+v", ss)
		}
		return nil
	})
	if ss := st1.SemiSync; ss.SourceEnabled || !ss.ReplicaEnabled {
		t.Errorf("replica semi-sync %+v", ss)
	}

	err := op[1].WaitForGTID(ctx, mustParse(t, FlavorMariaDB, "0-1-1000000"), 300*time.Millisecond)
	if !errors.Is(err, ErrWaitTimeout) {
		t.Errorf("waiting for a position never reached: %v, want ErrWaitTimeout", err)
	}
	// MASTER_GTID_WAIT watches gtid_slave_pos: a server waiting for its own writes waits out
	// the timeout (why a failover never waits on a candidate that is no replica).
	if err := op[0].WaitForGTID(ctx, st0.Executed, 300*time.Millisecond); !errors.Is(err, ErrWaitTimeout) {
		t.Errorf("the primary waiting for its own writes: %v, want ErrWaitTimeout (MASTER_GTID_WAIT watches gtid_slave_pos)", err)
	}

	// KillConnections: clients go, replication and excepted users stay.
	spared := plainOperatorConn(ctx, t, srv[0])
	dumpThreads := threadIDs(ctx, t, srv[0], "COMMAND LIKE 'Binlog Dump%'")
	replicaThreads := threadIDs(ctx, t, srv[1], "USER = 'system user'")
	must(t, op[0].KillConnections(ctx, []string{testAccounts.Operator.User}))
	must(t, op[1].KillConnections(ctx, []string{testAccounts.Operator.User}))
	if got := threadIDs(ctx, t, srv[0], "COMMAND LIKE 'Binlog Dump%'"); got != dumpThreads || got == "" {
		t.Errorf("binlog dump threads before KillConnections %q, after %q", dumpThreads, got)
	}
	if got := threadIDs(ctx, t, srv[1], "USER = 'system user'"); got != replicaThreads || got == "" {
		t.Errorf("replica system threads before KillConnections %q, after %q", replicaThreads, got)
	}
	if err := sleeper.PingContext(ctx); err == nil {
		t.Error("sleeping root connection survived KillConnections")
	}
	if err := spared.PingContext(ctx); err != nil {
		t.Errorf("connection of an excepted user was killed: %v", err)
	}
	if _, err := spared.ExecContext(ctx, "INSERT INTO app.t VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	st0 = status(ctx, t, op[0])
	must(t, op[1].WaitForGTID(ctx, st0.Executed, 10*time.Second))
	if rep := status(ctx, t, op[1]).Replica; rep == nil || !rep.IORunning || !rep.SQLRunning {
		t.Fatalf("replication after KillConnections: %+v", rep)
	}
	if ss := status(ctx, t, op[0]).SemiSync; ss.Clients != 1 || !ss.SourceActive {
		t.Errorf("semi-sync after KillConnections: %+v", ss)
	}

	// Fencing: the receiver stops, the applier keeps going.
	must(t, op[1].StopReplicationIO(ctx))
	if rep := status(ctx, t, op[1]).Replica; rep == nil || rep.IORunning || !rep.SQLRunning {
		t.Errorf("after StopReplicationIO: %+v", rep)
	}
	must(t, op[1].StartReplication(ctx))
	semiSyncConnected(ctx, t, op[0], srv[0].Name)
	testenv.Eventually(t, 10*time.Second, "replication running again", func() error {
		if rep := status(ctx, t, op[1]).Replica; rep == nil || !rep.IORunning || !rep.SQLRunning {
			return fmt.Errorf("%+v", rep)
		}
		return nil
	})

	// Switchover: 1 becomes primary, 0 rejoins as its replica.
	must(t, op[0].SetReadOnly(ctx, true))
	must(t, op[0].SetSemiSyncSource(ctx, false))
	st0 = status(ctx, t, op[0])
	must(t, op[1].WaitForGTID(ctx, st0.Executed, 10*time.Second))
	must(t, op[1].ResetReplication(ctx))
	must(t, op[1].SetReadOnly(ctx, false))
	must(t, op[1].SetSemiSyncSource(ctx, true))
	if st := status(ctx, t, op[1]); st.Replica != nil || st.ReadOnly {
		t.Fatalf("new primary: replica %+v read_only %v", st.Replica, st.ReadOnly)
	}
	must(t, op[0].SeedGTIDForRejoin(ctx))
	src1 := src0
	src1.Host, src1.Port = srv[1].Host, srv[1].Port
	must(t, op[0].ConfigureReplication(ctx, src1))
	semiSyncConnected(ctx, t, op[1], srv[1].Name)
	if _, err := plainOperatorConn(ctx, t, srv[1]).ExecContext(ctx, "INSERT INTO app.t VALUES (3)"); err != nil {
		t.Fatal(err)
	}
	st1 = status(ctx, t, op[1])
	must(t, op[0].WaitForGTID(ctx, st1.Executed, 10*time.Second))
	if st := status(ctx, t, op[0]); st.Replica == nil || !st.Replica.IORunning || !st.Replica.SQLRunning ||
		!st.Executed.Equal(st1.Executed) {
		t.Fatalf("rejoined old primary: %+v executed %q, want %q", st.Replica, st.Executed, st1.Executed)
	}
	var n int
	if err := plainOperatorConn(ctx, t, srv[0]).QueryRowContext(ctx, "SELECT COUNT(*) FROM app.t").Scan(&n); err != nil || n != 3 {
		t.Errorf("rows on the rejoined server: %d, %v; want 3", n, err)
	}
}

// accountsAsRoot makes Dolphin's accounts on every server as the install-time
// root (which they drop) and returns an operator Instance for each.
func accountsAsRoot(ctx context.Context, t *testing.T, srv []*dbtest.Instance) []Instance {
	t.Helper()
	op := make([]Instance, len(srv))
	for i, s := range srv {
		root, err := Open(Config{Flavor: FlavorMariaDB, Addr: s.Addr(), User: "root"})
		if err != nil {
			t.Fatal(err)
		}
		if err := root.EnsureAccounts(ctx, testAccounts); err != nil {
			t.Fatalf("%s: EnsureAccounts as root: %v", s.Name, err)
		}
		root.Close()
		op[i] = openOperator(t, s)
	}
	return op
}

// semiSyncPair makes instance 0 the writable semi-sync primary and instance 1
// ready to be its semi-sync replica; it returns instance 0 as a replication
// source.
func semiSyncPair(ctx context.Context, t *testing.T, op []Instance, srv []*dbtest.Instance) Source {
	t.Helper()
	must(t, op[0].SetReadOnly(ctx, false))
	must(t, op[0].SetSemiSyncSource(ctx, true))
	must(t, op[1].SetSemiSyncReplica(ctx, true))
	return Source{Host: srv[0].Host, Port: srv[0].Port, User: testAccounts.Replication.User, Password: testAccounts.Replication.Password}
}

// semiSyncConnected waits until one semi-sync replica is connected to
// source, doing what the topology engine does when a replica's connection is
// stuck ending (MariaDB's ack-receiver stall, see SemiSyncStatus.StalledDumps):
// restart the source side. Without this a reconnecting replica can leave the
// source with no replica for good, and this test would flake under CPU load.
func semiSyncConnected(ctx context.Context, t *testing.T, source Instance, name string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ss := status(ctx, t, source).SemiSync
		if ss.Clients == 1 {
			return
		}
		if ss.StalledDumps > 0 && ss.Clients == 0 {
			t.Logf("%s: %d dump thread(s) stuck ending: restarting the semi-sync source side", name, ss.StalledDumps)
			must(t, source.RestartSemiSyncSource(ctx, false))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no semi-sync replica connected after 30s: %+v", name, ss)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkNoErrant asserts that no server binlogged a transaction of its own
// that its primary (instance 0) does not have, and that the replica's binary
// log holds no transaction with its own server id.
func checkNoErrant(ctx context.Context, t *testing.T, op []Instance, srv []*dbtest.Instance) {
	t.Helper()
	st0, st1 := status(ctx, t, op[0]), status(ctx, t, op[1])
	if !st0.Executed.Contains(st1.Executed) {
		t.Errorf("errant GTIDs: replica executed %q is not within primary %q", st1.Executed, st0.Executed)
	}
	state := queryString(ctx, t, plainOperatorConn(ctx, t, srv[1]), "SELECT @@gtid_binlog_state")
	for g := range strings.SplitSeq(state, ",") {
		if parts := strings.Split(g, "-"); len(parts) == 3 && parts[1] == fmt.Sprint(srv[1].ServerID()) {
			t.Errorf("replica binlogged %s itself (gtid_binlog_state %q)", g, state)
		}
	}
}

// checkLockedDown asserts that only root@localhost is left of the root
// accounts, that no anonymous account exists, and that root can no longer log
// in over TCP without a password.
func checkLockedDown(ctx context.Context, t *testing.T, s *dbtest.Instance) {
	t.Helper()
	rows, err := plainOperatorConn(ctx, t, s).QueryContext(ctx,
		"SELECT CONCAT(User, '@', Host) FROM mysql.user WHERE User IN ('root', '') ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var left []string
	for rows.Next() {
		var a string
		if err := rows.Scan(&a); err != nil {
			t.Fatal(err)
		}
		left = append(left, a)
	}
	if strings.Join(left, " ") != "root@localhost" {
		t.Errorf("%s: root/anonymous accounts left: %q, want only root@localhost", s.Name, left)
	}
	db, err := sql.Open("mysql", s.RootDSN("timeout=2s"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.PingContext(ctx); err == nil {
		t.Errorf("%s: passwordless root still logs in over TCP", s.Name)
	}
}

func openOperator(t *testing.T, s *dbtest.Instance) Instance {
	t.Helper()
	in, err := Open(Config{Flavor: FlavorMariaDB, Addr: s.Addr(),
		User: testAccounts.Operator.User, Password: testAccounts.Operator.Password})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	return in
}

// rootConn is one open plain root session (binary logging on).
func rootConn(ctx context.Context, t *testing.T, s *dbtest.Instance) *sql.Conn {
	t.Helper()
	return plainConn(ctx, t, s, "root", "")
}

// plainOperatorConn is one open session as the operator account without the
// Instance's session setup, i.e. like an application: binary logging on.
func plainOperatorConn(ctx context.Context, t *testing.T, s *dbtest.Instance) *sql.Conn {
	t.Helper()
	return plainConn(ctx, t, s, testAccounts.Operator.User, testAccounts.Operator.Password)
}

func plainConn(ctx context.Context, t *testing.T, s *dbtest.Instance, user, password string) *sql.Conn {
	t.Helper()
	mc := mysql.NewConfig()
	mc.Net, mc.Addr, mc.Timeout = "tcp", s.Addr(), 2*time.Second
	mc.User, mc.Passwd = user, password
	mc.Logger = nopLogger{} // killed sessions are expected here
	conn, err := mysql.NewConnector(mc)
	if err != nil {
		t.Fatal(err)
	}
	return pin(ctx, t, sql.OpenDB(conn))
}

func pin(ctx context.Context, t *testing.T, db *sql.DB) *sql.Conn {
	t.Helper()
	conn, err := db.Conn(ctx)
	if err == nil {
		err = conn.PingContext(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); db.Close() })
	return conn
}

// threadIDs lists the ids of the threads matching where, as "1,5,9".
func threadIDs(ctx context.Context, t *testing.T, s *dbtest.Instance, where string) string {
	t.Helper()
	return queryString(ctx, t, plainOperatorConn(ctx, t, s), "SELECT COALESCE(GROUP_CONCAT(ID ORDER BY ID), '') "+
		"FROM information_schema.PROCESSLIST WHERE "+where)
}

func queryString(ctx context.Context, t *testing.T, conn *sql.Conn, q string) string {
	t.Helper()
	var s string
	if err := conn.QueryRowContext(ctx, q).Scan(&s); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return s
}

func status(ctx context.Context, t *testing.T, in Instance) *Status {
	t.Helper()
	s, err := in.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// seq0 is the sequence number of replication domain 0 in a MariaDB position.
func seq0(g GTIDSet) uint64 { return g.(mariaDBSet).domains[0].seq }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
