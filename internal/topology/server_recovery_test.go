package topology

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"
)

// Real-server tests of recovery paths: a server back on an empty volume, fencing a primary
// with commits waiting for acknowledgements, a primary crash-restarted with
// --init-rpl-role=SLAVE. Helpers are in server_test.go.

// An instance re-created on an empty volume (a lost disk, a re-clone by hand) comes back
// with only the operator account its init script made, like a pod's init does. Accounts are
// never replicated, so the engine must make the replication and monitor accounts on it again
// — or replicas fail with "Access denied" the day it becomes the primary.
func TestServerInstanceRecreatedOnEmptyVolumeGetsItsAccounts(t *testing.T) {
	h := newHarness(t, 3)
	h.converge("three instances healthy", healthyWith("db-0"))
	db := h.sqlDB(0)
	mustExec(t, db, "CREATE DATABASE app")
	mustExec(t, db, "CREATE TABLE app.rows (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(20))")
	mustExec(t, db, "INSERT INTO app.rows (v) VALUES ('before')")
	h.waitSameRows("db-0", "db-1", "db-2")

	in := h.db.Instances[2]
	in.Recreate(t)
	root, err := sql.Open("mysql", in.RootDSN(""))
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	// What the pod's init script does: the operator account only, and no bootstrap root.
	for _, q := range []string{
		"SET SESSION sql_log_bin=0",
		fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", testAccounts.Operator.User, testAccounts.Operator.Password),
		fmt.Sprintf("GRANT ALL PRIVILEGES ON *.* TO '%s'@'%%' WITH GRANT OPTION", testAccounts.Operator.User),
	} {
		conn, err := root.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		_, err = conn.ExecContext(context.Background(), q)
		conn.Close()
		if err != nil && q != "SET SESSION sql_log_bin=0" {
			t.Fatalf("%s: %v", q, err)
		}
	}
	h.converge("re-created db-2 replicates again", healthyWith("db-0"))
	h.waitSameRows("db-0", "db-1", "db-2")

	h.e.RequestSwitchover("db-2")
	h.converge("switchover to the re-created db-2", healthyWith("db-2"))
	mustExec(t, h.sqlDB(2), "INSERT INTO app.rows (v) VALUES ('after')")
	h.waitSameRows("db-0", "db-1", "db-2")
}

// Fencing a primary whose client is waiting for a semi-sync acknowledgement (no replica
// receives) must finish well before the semi-sync timeout, and that client must never be told
// its write committed: the waiting commit is what a failover leaves behind on the old primary.
func TestServerFenceDoesNotAcknowledgeAWaitingCommit(t *testing.T) {
	h := newHarness(t, 2)
	h.converge("two instances healthy", healthyWith("db-0"))
	admin := h.sqlDB(0)
	mustExec(t, admin, "CREATE DATABASE app")
	mustExec(t, admin, "CREATE TABLE app.rows (id INT PRIMARY KEY)")
	h.createAppAccount()
	h.waitSameRows("db-0", "db-1")

	members := map[string]Member{}
	for _, in := range h.db.Instances {
		members[in.Name] = Member{Name: in.Name, Host: in.Host, Port: in.Port}
	}
	ctx := context.Background()
	if err := h.e.run(ctx, members, members["db-1"], Step{Kind: StepStopIO, Instance: "db-1"}); err != nil {
		t.Fatal(err)
	}
	app, err := sql.Open("mysql", fmt.Sprintf("%s:%s@tcp(%s)/?timeout=2s", appAccount.User, appAccount.Password, h.db.Instances[0].Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	// One client with its own account, one wrongly using the operator's account (which the
	// fence spares only while idle).
	asOperator := h.sqlDB(0)
	insertErr := make(chan error, 2)
	for i, db := range []*sql.DB{app, asOperator} {
		go func() {
			_, err := db.Exec("INSERT INTO app.rows VALUES (?)", i+1)
			insertErr <- err
		}()
	}
	// Wait until both commits wait for an acknowledgement that cannot come.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		// The first waits for the acknowledgement, the second behind it.
		var inserting, waitingAck int
		if err := admin.QueryRow("SELECT COUNT(*), COALESCE(SUM(STATE LIKE '%semi-sync%'), 0) FROM information_schema.PROCESSLIST "+
			"WHERE INFO LIKE 'INSERT INTO app.rows%'").Scan(&inserting, &waitingAck); err != nil {
			t.Fatal(err)
		}
		if inserting == 2 && waitingAck >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d client inserts running, %d waiting for a semi-sync acknowledgement; want 2 and at least 1", inserting, waitingAck)
		}
	}
	start := time.Now()
	if err := h.e.run(ctx, members, members["db-0"], Step{Kind: StepFence, Instance: "db-0"}); err != nil {
		t.Fatalf("fence: %v", err)
	}
	took := time.Since(start)
	var timeoutMS int64
	if err := admin.QueryRow("SELECT @@rpl_semi_sync_master_timeout").Scan(&timeoutMS); err != nil {
		t.Fatal(err)
	}
	timeout := time.Duration(timeoutMS) * time.Millisecond
	if took >= timeout/2 {
		t.Errorf("fence took %s: it waited for the commit's semi-sync timeout", took)
	}
	for range 2 {
		select {
		case err := <-insertErr:
			if err == nil {
				t.Fatal("a waiting commit was acknowledged to its client by the fence")
			}
			t.Logf("fence took %s; a waiting client got: %v", took.Round(time.Millisecond), err)
		case <-time.After(min(timeout, time.Minute)): // Required durability: the timeout is ~49 days
			t.Fatal("a waiting client got no answer")
		}
	}
	var ro int
	if err := admin.QueryRow("SELECT @@read_only").Scan(&ro); err != nil || ro != 1 {
		t.Errorf("read_only=%d (%v) after fence", ro, err)
	}
}

// A primary killed under write load and restarted at once — before Dolphin notices — with
// --init-rpl-role=SLAVE (how pods start MariaDB) rolls back the tail no replica acknowledged.
// A replica may have received part of it; then promoting the restarted primary again would make
// that replica errant, so the engine promotes the replica instead and the old primary rejoins.
// Either way: no acknowledged write lost, no instance errant, every copy the same.
func TestServerPrimaryCrashRestartedWithReplicaRoleLosesNothing(t *testing.T) {
	h := newHarness(t, 3)
	h.converge("three instances healthy", healthyWith("db-0"))
	mustExec(t, h.sqlDB(0), "CREATE DATABASE app")
	mustExec(t, h.sqlDB(0), "CREATE TABLE app.rows (id BIGINT PRIMARY KEY, v VARCHAR(20))")
	// An application account: MariaDB's read_only does not stop the operator's (READ_ONLY
	// ADMIN), which could write on the restarted, still read-only primary and give a GTID the
	// replicas already hold to a different transaction.
	h.createAppAccount()
	w := startWriterAs(h, appAccount)
	healthyNoErrant := func(d Decision) bool { return d.State == StateHealthy && len(d.Errant) == 0 }
	failovers := 0
	for round := 1; round <= 4; round++ {
		for n := w.n.Load(); w.n.Load() < n+50; time.Sleep(5 * time.Millisecond) {
		}
		old := h.e.Primary()
		in := h.db.Instances[h.index(old)]
		in.Kill(t)
		in.Start(t, "--init-rpl-role=SLAVE")
		d := h.converge(fmt.Sprintf("round %d: healthy again without errant instances", round), healthyNoErrant)
		if d.Primary != old {
			failovers++
		}
		t.Logf("round %d: %s killed and restarted; primary now %s", round, old, d.Primary)
	}
	for n := w.n.Load(); w.n.Load() < n+20; time.Sleep(5 * time.Millisecond) {
	}
	w.finish()
	primary := h.e.Primary()
	if missing, acked := w.missingOn(h.index(primary)); missing != 0 || acked < 200 {
		t.Errorf("%d of %d acknowledged writes are missing on the primary %s", missing, acked, primary)
	}
	h.waitSameRows("db-0", "db-1", "db-2")
	t.Logf("4 crash-restarts: %d needed a failover to a replica holding the rolled-back tail", failovers)
}

// An operator restarted between the two halves of a switchover (the old primary fenced, the
// target not promoted yet) resumes it from the persisted state: the new engine promotes the
// target instead of forgetting the request, and the old primary replicates from it.
func TestServerSwitchoverResumedByANewEngine(t *testing.T) {
	h := newHarness(t, 3)
	h.converge("three instances healthy", healthyWith("db-0"))
	mustExec(t, h.sqlDB(0), "CREATE DATABASE app")
	mustExec(t, h.sqlDB(0), "CREATE TABLE app.rows (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(20))")
	h.waitSameRows("db-0", "db-1", "db-2")

	h.e.RequestSwitchover("db-2")
	if sw := h.e.State().Switchover; sw == nil || sw.To != "db-2" || sw.Fenced {
		t.Fatalf("persisted switchover right after the request: %+v, want to db-2, not fenced", sw)
	}
	d, err := h.e.Cycle(context.Background())
	if err != nil || d.State != StateSwitchover {
		t.Fatalf("first switchover cycle: state %s (%s), %v; want Switchover", d.State, d.Message, err)
	}
	state := h.e.State()
	if sw := state.Switchover; sw == nil || sw.To != "db-2" || !sw.Fenced {
		t.Fatalf("persisted switchover after the fence: %+v, want to db-2, fenced", sw)
	}
	var readOnly bool
	if err := h.sqlDB(0).QueryRow("SELECT @@read_only").Scan(&readOnly); err != nil || !readOnly {
		t.Fatalf("db-0 after the fence: read_only=%v, %v; want read-only", readOnly, err)
	}

	// The operator dies here; a new one starts from what was persisted.
	h.e.Close()
	h.e = New(h.cfg, state)
	h.converge("the new engine finishes the switchover", healthyWith("db-2"))
	if h.e.State().Switchover != nil {
		t.Errorf("the switchover is still pending after it finished: %+v", h.e.State().Switchover)
	}
	mustExec(t, h.sqlDB(2), "INSERT INTO app.rows (v) VALUES ('after')")
	h.waitSameRows("db-0", "db-1", "db-2")
}

// An operator that stopped in the middle of a switchover's promotion — the target's
// replication reset and its semi-sync source side turned on, still read-only — leaves a
// server whose applier, once it replicates again, waits the whole semi-sync timeout for
// acknowledgements nobody sends. The restarted operator's engine must turn that side off
// before it waits for the target to apply: no commit on the target may have timed out
// waiting (Rpl_semi_sync_master_no_tx stays 0), and the switchover ends with db-2 primary.
func TestServerSwitchoverResumedAfterAnInterruptedPromotion(t *testing.T) {
	h := newHarness(t, 3)
	h.converge("three instances healthy", healthyWith("db-0"))
	mustExec(t, h.sqlDB(0), "CREATE DATABASE app")
	mustExec(t, h.sqlDB(0), "CREATE TABLE app.rows (id BIGINT PRIMARY KEY, v VARCHAR(20))")
	h.waitSameRows("db-0", "db-1", "db-2")
	w := startWriter(h)
	defer w.finish()
	for n := w.n.Load(); w.n.Load() < n+20; time.Sleep(10 * time.Millisecond) {
	}

	// The first operator: fence db-0, then the promotion of db-2 stops half-way.
	members := map[string]Member{}
	for _, in := range h.db.Instances {
		members[in.Name] = Member{Name: in.Name, Host: in.Host, Port: in.Port}
	}
	if err := h.e.run(t.Context(), members, members["db-0"], Step{Kind: StepFence, Instance: "db-0"}); err != nil {
		t.Fatal(err)
	}
	target, err := h.e.conn(members["db-2"])
	if err != nil {
		t.Fatal(err)
	}
	if err := target.ResetReplication(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := target.SetSemiSyncSource(t.Context(), true); err != nil {
		t.Fatal(err)
	}

	// The restarted operator resumes from what the first one recorded.
	h.e.Close()
	h.e = New(h.cfg, Persisted{Primary: "db-0", Switchover: &SwitchoverRequest{To: "db-2", Fenced: true, From: "db-0"}})
	h.converge("the switchover ends on db-2", healthyWith("db-2"))
	for n := w.n.Load(); w.n.Load() < n+20; time.Sleep(10 * time.Millisecond) {
	}
	var name string
	var noTx int
	if err := h.pool(2).QueryRow("SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_no_tx'").Scan(&name, &noTx); err != nil {
		t.Fatal(err)
	}
	if noTx != 0 {
		t.Errorf("db-2 committed %d transaction(s) without an acknowledgement after waiting the semi-sync timeout: its source side was left on while it replicated", noTx)
	}
}
