package topology

import (
	"database/sql"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
)

// TestServerFallsBack: a cluster cut over with a way back (Config.Fallback) on real servers.
// After the cutover the old server is pointed at the primary and follows every write the
// application makes on the cluster; asked to fall back (a new engine with the request, as the
// manager makes it), under an application that writes to the cluster until refused and then
// to the old server, the primary is fenced, the server catches up, is detached and opened;
// the cluster is retired (every instance read-only, no role published) and every write the
// application was told committed — before the cutover, between, after the fall back — is on
// the old server once.
func TestServerFallsBack(t *testing.T) {
	h, x, root := followingHarness(t, "SELECT, REPLICATION SLAVE, BINLOG MONITOR, READ_ONLY ADMIN, CONNECTION ADMIN, PROCESS, REPLICATION SLAVE ADMIN, SLAVE MONITOR, RELOAD")
	db := h.db
	src := db.Instances[3]
	d := h.converge("following", func(d Decision) bool { return d.State == StateHealthy && len(d.Plan) == 0 && d.Primary != "" })
	primary := d.Primary
	pin := db.Instances[h.index(primary)]

	// Cut over with a way back, under an application moving from the server to the primary.
	toCluster := &switchingWriter{from: appPool(t, src.Addr()), to: appPool(t, pin.Addr())}
	toCluster.start()
	x.Cutover = "go"
	h.cfg.Fallback = &Fallback{Source: src.Addr(), Open: x.Open, PrimaryHost: pin.Host, PrimaryPort: pin.Port}
	h.restart()
	h.converge("cut over, the way back open", func(d Decision) bool {
		st := h.e.State()
		return d.State == StateHealthy && len(d.Plan) == 0 && st.Cutover != nil && st.FallbackStarted != nil
	})
	if st := h.e.State().FallbackStarted; st.Error != "" {
		t.Fatalf("the way back: %+v", st)
	}
	for deadline := time.Now().Add(10 * time.Second); toCluster.onTarget.Load() < 50 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	// The old server follows what the cluster takes.
	var pos string
	if err := h.pool(h.index(primary)).QueryRow("SELECT @@gtid_binlog_pos").Scan(&pos); err != nil {
		t.Fatal(err)
	}
	var waited int
	if err := root.QueryRow("SELECT MASTER_GTID_WAIT(?, 30)", pos).Scan(&waited); err != nil || waited != 0 {
		t.Fatalf("the old server did not follow the cluster to %s (%d, %v)", pos, waited, err)
	}
	rs := slaveStatusOf(t, root)
	t.Logf("the old server follows %s: %s", net.JoinHostPort(rs["Master_Host"], rs["Master_Port"]), rs["Gtid_IO_Pos"])
	if rs["Master_Host"] != pin.Host || rs["Master_Port"] != strconv.Itoa(pin.Port) {
		t.Errorf("the old server replicates from %s:%s, want the primary %s", rs["Master_Host"], rs["Master_Port"], pin.Addr())
	}

	// The cluster's credentials change (a new generation): the server, replicating, is pointed
	// again — from what it holds, nothing applied twice (the writes go on meanwhile).
	h.cfg.Credentials.Generation = "rotated"
	h.restart()
	h.converge("pointed again", func(d Decision) bool {
		st := h.e.State().FallbackStarted
		return st != nil && st.Generation == "rotated" && d.State == StateHealthy && len(d.Plan) == 0
	})
	if st := h.e.State().FallbackStarted; st.Error != "" {
		t.Fatalf("pointing the server again: %+v", st)
	}
	time.Sleep(500 * time.Millisecond)
	if err := h.pool(h.index(primary)).QueryRow("SELECT @@gtid_binlog_pos").Scan(&pos); err != nil {
		t.Fatal(err)
	}
	if err := root.QueryRow("SELECT MASTER_GTID_WAIT(?, 30)", pos).Scan(&waited); err != nil || waited != 0 {
		t.Fatalf("the old server, pointed again, did not follow the cluster to %s (%d, %v): %v", pos, waited, err, slaveStatusOf(t, root))
	}
	if rs := slaveStatusOf(t, root); rs["Slave_SQL_Running"] != "Yes" || rs["Last_SQL_Errno"] != "0" {
		t.Fatalf("the old server after being pointed again: %v", rs)
	}

	// Fall back under a second application, moving from the cluster to the old server.
	toCluster.stop()
	back := &switchingWriter{prefix: "back ", from: appPool(t, pin.Addr()), to: appPool(t, src.Addr())}
	back.start()
	h.cfg.Fallback.FallBack = "back"
	h.restart()
	d = h.converge("fell back", func(d Decision) bool {
		if f := h.e.State().FallBackFailed; f != nil {
			t.Fatalf("the fall back failed: %s", f.Error)
		}
		return h.e.State().FellBack != nil && d.State == StateFellBack
	})
	for deadline := time.Now().Add(10 * time.Second); back.onTarget.Load() < 50 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	back.stop()
	fb := h.e.State().FellBack
	t.Logf("fell back to %s at %s: servers' write pause %s, the application's %s (%d writes on the cluster, %d on the server)",
		fb.Instance, fb.Position, fb.Pause, back.pause(), back.onSource.Load(), back.onTarget.Load())
	if fb.Position == "" || fb.Warning != "" || back.onTarget.Load() == 0 {
		t.Fatalf("fall back record %+v, %d writes on the server after it (%v)", fb, back.onTarget.Load(), back.lastErr())
	}
	var ro int
	if err := root.QueryRow("SELECT @@read_only").Scan(&ro); err != nil || ro != 0 {
		t.Errorf("the old server after the fall back: read_only %d (%v), want 0", ro, err)
	}
	if rs := slaveStatusOf(t, root); rs != nil {
		t.Errorf("the old server still replicates after the fall back: %v", rs)
	}
	h.checkNoneWritable("after the fall back")
	for n, r := range Roles(ClusterView{Instances: nil, FellBack: fb}, d, nil) {
		t.Errorf("%s published %q after the fall back", n, r)
	}
	// Every acknowledged write of both applications on the old server, once.
	got := map[string]int{}
	rows, err := root.Query("SELECT v FROM app.rows")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		got[v]++
	}
	missing := 0
	for _, v := range append(toCluster.ackedValues(), back.ackedValues()...) {
		if got[v] != 1 {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d of the %d acknowledged writes are not on the old server once", missing, len(toCluster.ackedValues())+len(back.ackedValues()))
	}
	// Retired for good: a new engine (an operator restart) keeps it so.
	h.restart()
	h.converge("still retired", func(d Decision) bool {
		if slices.ContainsFunc(d.Plan, func(s Step) bool { return s.Kind == StepPromote }) {
			t.Fatalf("a retired cluster promotes: %v", steps(d))
		}
		return d.State == StateFellBack && len(d.Plan) == 0
	})
	h.checkNoneWritable("after a restart")
}

// slaveStatusOf is db's SHOW SLAVE STATUS row (nil without replication).
func slaveStatusOf(t *testing.T, db *sql.DB) map[string]string {
	t.Helper()
	rows, err := db.Query("SHOW SLAVE STATUS")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	m, err := dbsql.ResultMaps(rows)
	if err != nil {
		t.Fatal(err)
	}
	if len(m) == 0 {
		return nil
	}
	return m[0]
}
