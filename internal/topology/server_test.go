package topology

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	_ "github.com/go-sql-driver/mysql"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/sqlobjects"
)

// These tests run the engine against real mariadbd processes (internal/dbsql/dbtest). They
// are skipped under -short.

var testAccounts = dbsql.Accounts{
	Operator:    dbsql.Account{User: "dolphin", Password: "op-Secret-1"},
	Replication: dbsql.Account{User: "dolphin-repl", Password: "repl-Secret-2"},
	Monitor:     dbsql.Account{User: "dolphin-monitor", Password: "mon-Secret-3"},
}

type harness struct {
	t   *testing.T
	db  *dbtest.Cluster
	e   *Engine
	cfg Config // e's configuration, to start another engine on the same cluster
	// reports counts promotions seen by the reporter.
	mu         sync.Mutex
	promotions []Promotion
	pools      map[int]*sql.DB // shared client pools for polling helpers, by instance
}

func (h *harness) Report(_ context.Context, r Report) {
	if r.Promotion != nil {
		h.mu.Lock()
		h.promotions = append(h.promotions, *r.Promotion)
		h.mu.Unlock()
	}
}

func newHarness(t *testing.T, n int) *harness {
	t.Helper()
	h := &harness{t: t, db: dbtest.Start(t, dbtest.Options{Instances: n})}
	members := make([]Member, n)
	for i, in := range h.db.Instances {
		members[i] = Member{Name: in.Name, Host: in.Host, Port: in.Port}
	}
	h.cfg = Config{
		Flavor:      dbsql.FlavorMariaDB,
		Members:     func() []Member { return members },
		Credentials: Credentials{Accounts: testAccounts, Bootstrap: dbsql.Account{User: "root"}},
		Settings:    Settings{FailoverEnabled: true, DetectionAttempts: 2},
		Interval:    200 * time.Millisecond,
		WaitTimeout: 30 * time.Second,
		Reporter:    h,
		Log:         testr.New(t),
	}
	h.e = New(h.cfg, Persisted{})
	t.Cleanup(func() { h.e.Close() })
	return h
}

// converge runs cycles until the decision satisfies done.
func (h *harness) converge(what string, done func(Decision) bool) Decision {
	h.t.Helper()
	var d Decision
	var err error
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		d, err = h.e.Cycle(context.Background())
		if err == nil && done(d) {
			return d
		}
		if len(d.Plan) == 0 || err != nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
	h.t.Fatalf("%s: not reached; last state %s (%s), err %v; the instances: %s", what, d.State, d.Message, err, h.describe())
	return d
}

// describe says what each instance holds and how its replication stands, for a failure message.
func (h *harness) describe() string {
	var parts []string
	for i, in := range h.db.Instances {
		st, err := statusOf(h, i)
		switch {
		case err != nil:
			parts = append(parts, fmt.Sprintf("%s: %v", in.Name, err))
		case st.Replica == nil:
			parts = append(parts, fmt.Sprintf("%s: executed %s, no replication", in.Name, st.Executed))
		default:
			r := st.Replica
			parts = append(parts, fmt.Sprintf("%s: executed %s, replicating from %s (io %v, sql %v, io error %d %q, sql error %d %q)",
				in.Name, st.Executed, r.SourceHost, r.IORunning, r.SQLRunning, r.LastIOErrno, r.LastIOError, r.LastSQLErrno, r.LastSQLError))
		}
	}
	return strings.Join(parts, "; ")
}

func healthyWith(primary string) func(Decision) bool {
	return func(d Decision) bool { return d.State == StateHealthy && d.Primary == primary }
}

// sqlDB opens a plain client connection (binary logging on, like an application) as the
// operator account, which is allowed to write.
func (h *harness) sqlDB(i int) *sql.DB {
	h.t.Helper()
	in := h.db.Instances[i]
	db, err := sql.Open("mysql", fmt.Sprintf("%s:%s@tcp(%s)/?timeout=2s&readTimeout=10s&writeTimeout=10s",
		testAccounts.Operator.User, testAccounts.Operator.Password, in.Addr()))
	if err != nil {
		h.t.Fatal(err)
	}
	db.SetMaxOpenConns(2)
	h.t.Cleanup(func() { db.Close() })
	return db
}

// pool is a client pool to instance i shared by helpers that poll (a new pool per poll would
// exhaust the test servers' max_connections).
func (h *harness) pool(i int) *sql.DB {
	h.t.Helper()
	h.mu.Lock()
	db, ok := h.pools[i]
	h.mu.Unlock()
	if ok {
		return db
	}
	db = h.sqlDB(i)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pools == nil {
		h.pools = map[int]*sql.DB{}
	}
	if prev, ok := h.pools[i]; ok {
		return prev
	}
	h.pools[i] = db
	return db
}

func (h *harness) index(name string) int {
	for i, in := range h.db.Instances {
		if in.Name == name {
			return i
		}
	}
	h.t.Fatalf("no instance %s", name)
	return -1
}

func mustExec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// waitSameRows waits until app.rows has the same CHECKSUM TABLE on every named instance.
func (h *harness) waitSameRows(names ...string) {
	h.t.Helper()
	want := ""
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		sums := map[string]string{}
		for _, n := range names {
			var tbl, sum sql.NullString
			err := h.pool(h.index(n)).QueryRow("CHECKSUM TABLE app.rows").Scan(&tbl, &sum)
			if err != nil {
				sums[n] = "error: " + err.Error()
				continue
			}
			sums[n] = sum.String
		}
		same := true
		want = sums[names[0]]
		for _, s := range sums {
			same = same && s == want && want != "" && want[0] != 'e'
		}
		if same {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("table checksums differ: %v", sums)
		}
	}
}

func TestServerBootstrapSingleInstance(t *testing.T) {
	h := newHarness(t, 1)
	h.converge("single instance healthy", healthyWith("db-0"))
	db := h.sqlDB(0)
	mustExec(t, db, "CREATE DATABASE app")
	mustExec(t, db, "CREATE TABLE app.rows (id INT PRIMARY KEY)")
	mustExec(t, db, "INSERT INTO app.rows VALUES (1)")
	var semi string
	if err := db.QueryRow("SELECT @@rpl_semi_sync_master_enabled").Scan(&semi); err != nil || semi != "0" {
		t.Errorf("a single instance must not wait for semi-sync acknowledgements: %q %v", semi, err)
	}
}

func TestServerBootstrapReplicateSwitchover(t *testing.T) {
	h := newHarness(t, 3)
	h.converge("three instances healthy", healthyWith("db-0"))
	db := h.sqlDB(0)
	mustExec(t, db, "CREATE DATABASE app")
	mustExec(t, db, "CREATE TABLE app.rows (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(20))")
	for i := 0; i < 50; i++ {
		mustExec(t, db, "INSERT INTO app.rows (v) VALUES (?)", fmt.Sprint("row", i))
	}
	h.waitSameRows("db-0", "db-1", "db-2")
	var clients int
	var name string
	if err := db.QueryRow("SHOW STATUS LIKE 'Rpl_semi_sync_master_clients'").Scan(&name, &clients); err != nil || clients != 2 {
		t.Errorf("primary has %d semi-sync replicas (%v), want 2", clients, err)
	}

	// Planned switchover to db-2.
	start := time.Now()
	h.e.RequestSwitchover("db-2")
	h.converge("switchover to db-2", healthyWith("db-2"))
	t.Logf("switchover took %s", time.Since(start))
	mustExec(t, h.sqlDB(2), "INSERT INTO app.rows (v) VALUES ('after switchover')")
	h.waitSameRows("db-0", "db-1", "db-2")
	var ro int
	if err := h.sqlDB(0).QueryRow("SELECT @@read_only").Scan(&ro); err != nil || ro != 1 {
		t.Errorf("old primary read_only=%d (%v), want 1", ro, err)
	}
	if len(h.promotions) != 1 || !h.promotions[0].Planned || h.promotions[0].From != "db-0" || h.promotions[0].To != "db-2" {
		t.Errorf("promotions %+v", h.promotions)
	}
}

// writer inserts rows into app.rows on whatever the engine says is the primary and records
// every id whose INSERT returned success (an acknowledged write).
type writer struct {
	h     *harness
	acked sync.Map
	n     atomic.Int64
	// last is the time and instance of the latest acknowledged write.
	mu       sync.Mutex
	last     time.Time
	lastName string
	stop     chan struct{}
	done     chan struct{}
}

// startWriter writes as the application account (created now if it does not exist yet):
// unlike Dolphin's own, read_only stops it, so a write can never land on a fenced server.
func startWriter(h *harness) *writer {
	h.createAppAccount()
	return startWriterAs(h, appAccount)
}

// appAccount is an application account: unlike the operator's, read_only stops it.
var appAccount = dbsql.Account{User: "app", Password: "app-Secret-4"}

// createAppAccount creates appAccount on the primary db-0, allowed to read and write database
// app, with the statements a MySQLUser is applied with (sqlobjects, replicated like any
// application statement; there is no Kubernetes in these tests to declare it).
func (h *harness) createAppAccount() {
	h.t.Helper()
	in := h.db.Instances[0]
	db, err := dbsql.OpenReplicated(dbsql.Config{Flavor: dbsql.FlavorMariaDB, Addr: in.Addr(),
		User: testAccounts.Operator.User, Password: testAccounts.Operator.Password})
	if err != nil {
		h.t.Fatal(err)
	}
	defer db.Close()
	srv := sqlobjects.NewServer(db, sqlobjects.MariaDB)
	want := sqlobjects.User{Name: appAccount.User, Host: "%", Password: appAccount.Password,
		Grants: []sqlobjects.Grant{{Privileges: []string{"INSERT", "SELECT"}, Database: "app"}}}
	have, err := srv.ObserveUser(h.t.Context(), want.Name, want.Host)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := srv.Apply(h.t.Context(), sqlobjects.PlanUser(srv.Flavor(), want, have, true)); err != nil {
		h.t.Fatal(err)
	}
}

// startWriterAs writes as account (create it first).
func startWriterAs(h *harness, account dbsql.Account) *writer {
	w := &writer{h: h, stop: make(chan struct{}), done: make(chan struct{})}
	conns := map[string]*sql.DB{}
	for _, in := range h.db.Instances {
		db, err := sql.Open("mysql", fmt.Sprintf("%s:%s@tcp(%s)/?timeout=2s&readTimeout=10s&writeTimeout=10s",
			account.User, account.Password, in.Addr()))
		if err != nil {
			h.t.Fatal(err)
		}
		db.SetMaxOpenConns(2)
		h.t.Cleanup(func() { db.Close() })
		conns[in.Name] = db
	}
	go func() {
		defer close(w.done)
		for id := int64(1); ; id++ {
			select {
			case <-w.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			target := h.e.Primary()
			_, err := conns[target].ExecContext(ctx, "INSERT INTO app.rows (id, v) VALUES (?, 'w')", id)
			cancel()
			if err == nil {
				w.acked.Store(id, true)
				w.mu.Lock()
				w.last, w.lastName = time.Now(), target
				w.mu.Unlock()
				w.n.Add(1)
			} else {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}()
	return w
}

func (w *writer) finish() { close(w.stop); <-w.done }

func (w *writer) lastAck() time.Time { w.mu.Lock(); defer w.mu.Unlock(); return w.last }

func (w *writer) lastAckOn() string { w.mu.Lock(); defer w.mu.Unlock(); return w.lastName }

// missingOn counts acknowledged ids absent from instance i. It snapshots the acknowledged ids
// before reading the table, so writes acknowledged while it reads are not counted.
func (w *writer) missingOn(i int) (missing, acked int) {
	var ids []int64
	w.acked.Range(func(k, _ any) bool { ids = append(ids, k.(int64)); return true })
	present := map[int64]bool{}
	rows, err := w.h.pool(i).Query("SELECT id FROM app.rows")
	if err != nil {
		w.h.t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			w.h.t.Fatal(err)
		}
		present[id] = true
	}
	for _, id := range ids {
		if !present[id] {
			missing++
			w.h.t.Logf("acknowledged id %d missing on %s", id, w.h.db.Instances[i].Name)
		}
	}
	return missing, len(ids)
}

// runningCluster bootstraps a 3-instance cluster with table app.rows and runs the engine
// loop until the test ends.
func runningCluster(t *testing.T, extra ...Reporter) *harness {
	return runningClusterWith(t, nil, extra...)
}

// runningClusterWith is runningCluster with the engine's configuration changed by tune
// first (nil: the harness's fast detection, 200ms × 2).
func runningClusterWith(t *testing.T, tune func(*Config), extra ...Reporter) *harness {
	h := newHarness(t, 3)
	if tune != nil {
		h.e.Close()
		tune(&h.cfg)
		h.e = New(h.cfg, Persisted{})
	}
	if len(extra) > 0 {
		h.e.cfg.Reporter = append(multiReporter{h}, extra...)
	}
	h.converge("three instances healthy", healthyWith("db-0"))
	mustExec(t, h.sqlDB(0), "CREATE DATABASE app")
	mustExec(t, h.sqlDB(0), "CREATE TABLE app.rows (id BIGINT PRIMARY KEY, v VARCHAR(20))")
	ctx, cancel := context.WithCancel(context.Background())
	loop := make(chan struct{})
	go func() { defer close(loop); _ = h.e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-loop })
	return h
}

func TestServerFailoverLosesNoAcknowledgedWriteAndOldPrimaryRejoins(t *testing.T) {
	h := runningCluster(t)

	w := startWriter(h)
	time.Sleep(700 * time.Millisecond)
	before := w.n.Load()
	killed := time.Now()
	h.db.Instances[0].Kill(t)
	for h.e.Primary() == "db-0" {
		if time.Since(killed) > 30*time.Second {
			t.Fatal("no failover within 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	newPrimary := h.e.Primary()
	for n := w.n.Load(); w.n.Load() < n+20; time.Sleep(10 * time.Millisecond) {
		if time.Since(killed) > 30*time.Second {
			t.Fatal("writes did not resume on the new primary")
		}
	}
	w.finish()
	t.Logf("failover %s -> %s in %s; %d writes acked before the kill, %d in total", "db-0", newPrimary, time.Since(killed), before, w.n.Load())
	if before < 10 {
		t.Fatalf("writer acknowledged only %d writes before the kill", before)
	}
	missing, acked := w.missingOn(h.index(newPrimary))
	if missing != 0 {
		t.Errorf("%d of %d acknowledged writes are missing on the new primary %s", missing, acked, newPrimary)
	}

	// The crashed primary restarts as a replica would (init_rpl_role=SLAVE truncates any
	// unacknowledged tail) and rejoins without manual work.
	h.db.Instances[0].Start(t, "--init-rpl-role=SLAVE")
	newHost := h.db.Instances[h.index(newPrimary)].Host
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		st, err := statusOf(h, 0)
		if err == nil && st.Replica != nil && st.Replica.IORunning && st.Replica.SQLRunning && st.Replica.SourceHost == newHost {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("old primary did not rejoin as a replica of %s: %+v %v", newPrimary, st, err)
		}
	}
	h.waitSameRows("db-0", "db-1", "db-2")
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.promotions) != 1 || h.promotions[0].Planned || h.promotions[0].From != "db-0" || h.promotions[0].Duration <= 0 {
		t.Errorf("promotions %+v, want one unplanned from db-0 with a duration", h.promotions)
	}
}

// statusOf reads one instance's status through the dbsql layer as the operator.
func statusOf(h *harness, i int) (*dbsql.Status, error) {
	in, err := dbsql.Open(dbsql.Config{Flavor: dbsql.FlavorMariaDB, Addr: h.db.Instances[i].Addr(),
		User: testAccounts.Operator.User, Password: testAccounts.Operator.Password})
	if err != nil {
		return nil, err
	}
	defer in.Close()
	return in.Status(context.Background())
}

func TestServerErrantReplicaIsExcludedFromPromotion(t *testing.T) {
	h := newHarness(t, 3)
	h.converge("three instances healthy", healthyWith("db-0"))
	mustExec(t, h.sqlDB(0), "CREATE DATABASE app")
	mustExec(t, h.sqlDB(0), "CREATE TABLE app.rows (id BIGINT PRIMARY KEY, v VARCHAR(20))")
	mustExec(t, h.sqlDB(0), "INSERT INTO app.rows VALUES (1, 'a')")
	h.waitSameRows("db-0", "db-1", "db-2")

	// A write on a replica by an account that read_only does not stop: an errant GTID.
	mustExec(t, h.sqlDB(1), "INSERT INTO app.rows VALUES (1000, 'errant')")
	d := h.converge("errant replica detected", func(d Decision) bool { return d.Errant["db-1"] })
	if d.State != StateDegraded {
		t.Errorf("state %s, want Degraded", d.State)
	}

	h.db.Instances[0].Kill(t)
	d = h.converge("failover away from the errant replica", func(d Decision) bool { return d.Primary != "db-0" && d.State != StateFailover })
	if d.Primary != "db-2" {
		t.Fatalf("promoted %s; the errant db-1 must never be promoted", d.Primary)
	}
	if !d.Errant["db-1"] {
		t.Error("db-1 lost its errant mark")
	}
}

// TestServerBusyPrimaryNeverMakesAReplicaErrant: under a steady writer, a replica observed a
// moment after the primary holds transactions the primary's observation lacks; that must
// never be taken for an errant replica (with automatic re-clone it would discard a healthy
// replica). Many cycles in a row, none may report one.
func TestServerBusyPrimaryNeverMakesAReplicaErrant(t *testing.T) {
	h := newHarness(t, 3)
	h.converge("three instances healthy", healthyWith("db-0"))
	mustExec(t, h.sqlDB(0), "CREATE DATABASE app")
	mustExec(t, h.sqlDB(0), "CREATE TABLE app.rows (id BIGINT PRIMARY KEY, v VARCHAR(20))")
	var writers []*writer
	for range 3 {
		w := startWriter(h)
		writers = append(writers, w)
	}
	defer func() {
		for _, w := range writers {
			w.finish()
		}
	}()
	deadline := time.Now().Add(20 * time.Second)
	cycles := 0
	for ; cycles < 300 && time.Now().Before(deadline); cycles++ {
		d, err := h.e.Cycle(context.Background())
		if err != nil {
			t.Fatalf("cycle %d: %v", cycles, err)
		}
		if len(d.Errant) > 0 {
			t.Fatalf("cycle %d: %v taken for errant under a busy primary: %s", cycles, d.Errant, d.Message)
		}
	}
	var n int64
	for _, w := range writers {
		n += w.n.Load()
	}
	if n == 0 {
		t.Fatal("the writers wrote nothing: the check proved nothing")
	}
	t.Logf("%d cycles, %d writes, no replica taken for errant", cycles, n)
}
