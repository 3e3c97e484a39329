package topology

import (
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
)

// TestServerFollowsAnExternalSource runs the engine on three servers that follow a fourth one
// outside the cluster (ClusterView.External), an application writing on that one the whole
// time: the bootstrap points one instance at the source and the others at it, no instance is
// ever writable, every acknowledged write reaches all three; the primary following the source
// is killed and the failover points the promoted replica at the source, which goes on from
// what it applied — the same rows everywhere again, nothing errant.
// followingHarness is an engine on three servers (db-0..db-2) that follows a fourth (db-3, the
// source, returned with a root pool on it) holding app.rows with 100 rows; migrate is the
// account on the source, with the privileges grants lists.
func followingHarness(t *testing.T, grants string) (h *harness, x *ExternalSource, root *sql.DB) {
	t.Helper()
	db := dbtest.Start(t, dbtest.Options{Instances: 4})
	src := db.Instances[3] // the server outside the cluster
	root, err := sql.Open("mysql", src.RootDSN(""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	for _, q := range []string{
		"CREATE USER 'migrate'@'%' IDENTIFIED BY 'migrate-Secret-5'",
		"GRANT " + grants + " ON *.* TO 'migrate'@'%'",
		"CREATE USER 'app'@'%' IDENTIFIED BY 'app-Secret-6'",
		"GRANT SELECT, INSERT ON app.* TO 'app'@'%'",
		"CREATE DATABASE app",
		"CREATE TABLE app.rows (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(20))",
		"SET GLOBAL read_only = OFF",
	} {
		mustExec(t, root, q)
	}
	for i := range 100 {
		mustExec(t, root, "INSERT INTO app.rows (v) VALUES (?)", fmt.Sprint("before ", i))
	}
	members := make([]Member, 3)
	for i, in := range db.Instances[:3] {
		members[i] = Member{Name: in.Name, Host: in.Host, Port: in.Port}
	}
	h = &harness{t: t, db: db}
	x = &ExternalSource{Host: src.Host, Port: src.Port, User: "migrate", Password: "migrate-Secret-5", ID: "test",
		Open: func() (*sql.DB, error) {
			return sql.Open("mysql", "migrate:migrate-Secret-5@tcp("+src.Addr()+")/?timeout=2s")
		}}
	h.cfg = Config{
		Flavor:      dbsql.FlavorMariaDB,
		Members:     func() []Member { return members },
		Credentials: Credentials{Accounts: testAccounts, Bootstrap: dbsql.Account{User: "root"}},
		Settings:    Settings{FailoverEnabled: true, DetectionAttempts: 2},
		Interval:    200 * time.Millisecond,
		WaitTimeout: 30 * time.Second,
		Reporter:    h,
		Log:         testr.New(t),
		External:    x,
	}
	h.e = New(h.cfg, Persisted{})
	t.Cleanup(func() { h.e.Close() })
	return h, x, root
}

// restart starts a new engine on the harness's cluster with the state of the current one, as
// the manager does when the configuration changes (a request by annotation).
func (h *harness) restart() {
	h.e.Close()
	h.e = New(h.cfg, h.e.State())
	e := h.e
	h.t.Cleanup(func() { e.Close() })
}

func TestServerFollowsAnExternalSource(t *testing.T) {
	// What following needs, and what the cutover's fence needs on top (docs/migrate.md).
	h, x, root := followingHarness(t, "SELECT, REPLICATION SLAVE, BINLOG MONITOR, READ_ONLY ADMIN, CONNECTION ADMIN, PROCESS")
	db, src := h.db, h.db.Instances[3]

	// The application writes on the source throughout.
	var acked atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := root.Exec("INSERT INTO app.rows (v) VALUES (?)", fmt.Sprint("during ", i)); err == nil {
				acked.Add(1)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	stopWriter := func() {
		select {
		case <-stop:
		default:
			close(stop)
			<-done
		}
	}
	t.Cleanup(stopWriter)

	following := func(d Decision) bool { return d.State == StateHealthy && d.Primary != "" }
	d := h.converge("following the source", following)
	first := d.Primary
	h.checkNoneWritable("after the bootstrap")
	for deadline := time.Now().Add(30 * time.Second); acked.Load() < 200 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}

	// The primary that follows the source dies; a replica takes its place, following the source.
	db.Instances[h.index(first)].Kill(t)
	// Degraded while the dead one stays down; the new primary follows the source.
	d = h.converge("a failover away from "+first, func(d Decision) bool {
		return (d.State == StateHealthy || d.State == StateDegraded) && d.Primary != first && d.Primary != "" && len(d.Plan) == 0
	})
	second := d.Primary
	t.Logf("failover %s -> %s while following: %s", first, second, d.Message)
	h.checkNoneWritable("after the failover")
	for _, p := range h.promotions {
		if p.To == second && !p.Planned {
			goto promoted
		}
	}
	t.Errorf("no failover to %s reported: %+v", second, h.promotions)
promoted:
	db.Instances[h.index(first)].Start(t)
	before := acked.Load()
	for deadline := time.Now().Add(30 * time.Second); acked.Load() < before+200 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	stopWriter()
	var want int
	if err := root.QueryRow("SELECT COUNT(*) FROM app.rows").Scan(&want); err != nil {
		t.Fatal(err)
	}
	if int64(want) < 100+acked.Load() {
		t.Fatalf("the source holds %d rows, fewer than the %d acknowledged", want, 100+acked.Load())
	}
	d = h.converge("every instance following again", func(d Decision) bool {
		return following(d) && len(d.Errant) == 0
	})
	// Every row of the source, on every instance of the cluster.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		counts := map[string]int{}
		for _, in := range db.Instances[:3] {
			var n int
			if err := h.pool(h.index(in.Name)).QueryRow("SELECT COUNT(*) FROM app.rows").Scan(&n); err != nil {
				counts[in.Name] = -1
				continue
			}
			counts[in.Name] = n
		}
		if counts["db-0"] == want && counts["db-1"] == want && counts["db-2"] == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rows on the cluster %v, the source has %d; %s", counts, want, h.describe())
		}
	}
	h.waitSameRows("db-0", "db-1", "db-2")
	var tbl, srcSum, clusterSum sql.NullString
	if err := root.QueryRow("CHECKSUM TABLE app.rows").Scan(&tbl, &srcSum); err != nil {
		t.Fatal(err)
	}
	if err := h.pool(0).QueryRow("CHECKSUM TABLE app.rows").Scan(&tbl, &clusterSum); err != nil || clusterSum != srcSum {
		t.Errorf("checksum on the cluster %v (%v), on the source %v", clusterSum, err, srcSum)
	}
	h.checkNoneWritable("at the end")
	t.Logf("%d rows, %d written during the run, on the source and all three instances; %s", want, acked.Load(), d.Message)

	// A verification, asked as the manager asks it (a new engine with the request), while an
	// application writes on the source.
	primary := d.Primary
	app := &switchingWriter{from: appPool(t, src.Addr()), to: appPool(t, db.Instances[h.index(primary)].Addr())}
	app.start()
	x.Verify = "v1"
	h.restart()
	h.converge("verified", func(Decision) bool {
		v := h.e.State().Verification
		return v != nil && v.ID == "v1"
	})
	if v := h.e.State().Verification; v.Error != "" || v.Tables != 1 || len(v.Mismatched) != 0 || v.Position == "" {
		t.Fatalf("verification %+v", v)
	} else {
		t.Logf("verified under writes: %d table equal at %s", v.Tables, v.Position)
	}
	if d = h.converge("following after the verification", func(d Decision) bool { return d.State == StateHealthy && len(d.Plan) == 0 }); d.Primary != primary {
		t.Fatalf("primary %s after the verification, was %s", d.Primary, primary)
	}

	// The cutover, asked the same way, under the application, which writes to the source
	// until it refuses, then to the cluster's primary.
	x.Cutover = "req-1"
	h.restart()
	d = h.converge("cut over", func(d Decision) bool { return d.State == StateHealthy && len(d.Plan) == 0 })
	rec := h.e.State().Cutover
	if rec == nil || rec.Instance != primary || rec.Position == "" || rec.Warning != "" {
		t.Fatalf("cutover record %+v", rec)
	}
	for deadline := time.Now().Add(10 * time.Second); app.onTarget.Load() < 50 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	app.stop()
	t.Logf("cut over to %s at %s: servers' write pause %s, the application's %s (%d writes on the source, %d on the cluster)",
		primary, rec.Position, rec.Pause, app.pause(), app.onSource.Load(), app.onTarget.Load())
	if app.onTarget.Load() == 0 {
		t.Fatalf("the application never wrote on the cluster after the cutover: %v", app.lastErr())
	}
	var ro int
	if err := root.QueryRow("SELECT @@read_only").Scan(&ro); err != nil || ro != 1 {
		t.Errorf("the source after the cutover: read_only %d (%v), want 1", ro, err)
	}
	// Every write the application was told committed, on the cluster's primary, once (a write
	// whose session the fence ended may have committed unacknowledged: it may be there too).
	got := map[string]int{}
	rs, err := h.pool(h.index(primary)).Query("SELECT v FROM app.rows WHERE v LIKE 'app %'")
	if err != nil {
		t.Fatal(err)
	}
	for rs.Next() {
		var v string
		if err := rs.Scan(&v); err != nil {
			t.Fatal(err)
		}
		got[v]++
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	missing := 0
	for _, v := range app.ackedValues() {
		if got[v] != 1 {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d of the application's %d acknowledged writes are not on the cluster once", missing, len(app.ackedValues()))
	}
	h.waitSameRows("db-0", "db-1", "db-2")
	st, err := statusOf(h, h.index(primary))
	if err != nil || st.ReadOnly || st.Replica != nil {
		t.Errorf("the primary after the cutover: %+v (%v), want writable and detached", st, err)
	}
}

// appPool is a pool of the migrated application account on addr.
func appPool(t *testing.T, addr string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", "app:app-Secret-6@tcp("+addr+")/?timeout=1s&readTimeout=5s&writeTimeout=5s")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

// switchingWriter writes one row at a time to `from` until it refuses (read-only, or its
// session ended), then to `to`, as an application told to move does: it counts the writes
// acknowledged on each and the pause between the last on `from` and the first on `to`.
type switchingWriter struct {
	from, to *sql.DB
	// prefix starts every value written ("" for "app N").
	prefix             string
	onSource, onTarget atomic.Int64
	mu                 sync.Mutex
	lastFrom, firstTo  time.Time
	acked              []string
	err                error
	stopc, done        chan struct{}
}

func (w *switchingWriter) ackedValues() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.acked...)
}

func (w *switchingWriter) start() {
	w.stopc, w.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(w.done)
		moved := false
		for i := 0; ; i++ {
			select {
			case <-w.stopc:
				return
			default:
			}
			db := w.from
			if moved {
				db = w.to
			}
			v := fmt.Sprint(w.prefix, "app ", i)
			_, err := db.Exec("INSERT INTO app.rows (v) VALUES (?)", v)
			now := time.Now()
			w.mu.Lock()
			if err == nil {
				w.acked = append(w.acked, v)
			}
			switch {
			case err == nil && !moved:
				w.onSource.Add(1)
				w.lastFrom = now
			case err == nil:
				if w.onTarget.Add(1) == 1 {
					w.firstTo = now
				}
			default:
				w.err = err
				moved = true // refused or cut off by the fence: the application moves
			}
			w.mu.Unlock()
			if err != nil {
				time.Sleep(time.Millisecond)
			}
		}
	}()
}

func (w *switchingWriter) stop() { close(w.stopc); <-w.done }

func (w *switchingWriter) pause() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.firstTo.Sub(w.lastFrom)
}

func (w *switchingWriter) lastErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// checkNoneWritable fails the test when an instance of the cluster (db-0..db-2) accepts writes.
func (h *harness) checkNoneWritable(when string) {
	h.t.Helper()
	for _, in := range h.db.Instances[:3] {
		var ro int
		err := h.pool(h.index(in.Name)).QueryRow("SELECT @@read_only").Scan(&ro)
		if err == nil && ro != 1 {
			h.t.Errorf("%s: %s is writable while the cluster follows an external source", when, in.Name)
		}
	}
}

// TestServerCutoverFailsThenAskedAgain: a cutover the source refuses (the account may not set
// read_only) fails before anything moved: recorded, not tried again for the same request, the
// source writable and untouched, the cluster still following and read-only. Once the privilege
// is granted, a new request cuts over.
func TestServerCutoverFailsThenAskedAgain(t *testing.T) {
	h, x, root := followingHarness(t, "SELECT, REPLICATION SLAVE, BINLOG MONITOR")
	d := h.converge("following the source", func(d Decision) bool { return d.State == StateHealthy && d.Primary != "" })
	primary := d.Primary

	x.Cutover = "c1"
	h.restart()
	h.converge("the cutover failed", func(Decision) bool { return h.e.State().CutoverFailed != nil })
	f := h.e.State().CutoverFailed
	if f.ID != "c1" || !strings.Contains(f.Error, "READ_ONLY ADMIN") {
		t.Errorf("failure record %+v, want request c1 and the missing privilege named", f)
	}
	if h.e.State().Cutover != nil {
		t.Fatalf("a failed cutover recorded as done: %+v", h.e.State().Cutover)
	}
	// Not tried again for c1: the next cycles say so and plan nothing.
	d = h.converge("the failure reported", func(d Decision) bool { return strings.Contains(d.Message, "not tried again") })
	for _, s := range d.Plan {
		if s.Kind == StepCutover {
			t.Fatalf("cutover c1 planned again: %v", steps(d))
		}
	}
	var ro int
	if err := root.QueryRow("SELECT @@read_only").Scan(&ro); err != nil || ro != 0 {
		t.Errorf("the source after a refused cutover: read_only %d (%v), want 0", ro, err)
	}
	mustExec(t, root, "INSERT INTO app.rows (v) VALUES ('after c1')")
	h.checkNoneWritable("after the failed cutover")
	h.waitSameRows("db-0", "db-1", "db-2") // still following: the row above arrives everywhere

	mustExec(t, root, "GRANT READ_ONLY ADMIN, CONNECTION ADMIN, PROCESS ON *.* TO 'migrate'@'%'")
	x.Cutover = "c2"
	h.restart()
	h.converge("cut over by c2", func(d Decision) bool { return h.e.State().Cutover != nil && d.State == StateHealthy })
	if co := h.e.State().Cutover; co.Instance != primary || co.Position == "" {
		t.Errorf("cutover record %+v", co)
	}
	if err := root.QueryRow("SELECT @@read_only").Scan(&ro); err != nil || ro != 1 {
		t.Errorf("the source after the cutover: read_only %d (%v), want 1", ro, err)
	}
	st, err := statusOf(h, h.index(primary))
	if err != nil || st.ReadOnly || st.Replica != nil {
		t.Errorf("the primary after the cutover: %+v (%v), want writable and detached", st, err)
	}
}
