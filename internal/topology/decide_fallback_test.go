package topology

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// cutOverWithFallback is a cluster cut over from old-db with a way back: db-0 the writable
// primary, two replicas.
func cutOverWithFallback() ClusterView {
	v := cluster("db-0", inst(0).writable(), inst(1).replicaOf(0, ""), inst(2).replicaOf(0, ""))
	v.Now = time.Date(2026, 12, 7, 16, 0, 0, 0, time.UTC)
	v.Fallback = &Fallback{Source: "old-db:3306", PrimaryHost: "db-primary.ns.svc", PrimaryPort: 3306}
	return v
}

// TestDecideFallback: after the cutover the server is pointed at the primary once the cluster
// is healthy (again after a failure that may pass, never after the server took writes of its
// own); a fall back begins only while the server follows less than 5 s behind and a failed
// one is not made again for the same request; the primary leaves the Service in the fall
// back's own cycle.
func TestDecideFallback(t *testing.T) {
	lag := func(s int64) *int64 { return &s }
	for _, tc := range []struct {
		name    string
		edit    func(*ClusterView)
		plan    []string
		state   State
		message string
	}{
		{"not pointed yet", func(*ClusterView) {}, []string{"StartFallback(db-0)"}, StateHealthy, ""},
		{"pointed, following", func(v *ClusterView) {
			v.FallbackStarted = &FallbackStart{At: v.Now}
			v.FallbackSeen = &FallbackObservation{Replicating: true, Lag: lag(0)}
		}, nil, StateHealthy, ""},
		{"pointed, not replicating", func(v *ClusterView) {
			v.FallbackStarted = &FallbackStart{At: v.Now}
			v.FallbackSeen = &FallbackObservation{Error: "Access denied"}
		}, nil, StateDegraded, "old-db:3306 does not replicate from db-0 (the way back): Access denied"},
		{"failed a moment ago", func(v *ClusterView) {
			v.FallbackStarted = &FallbackStart{At: v.Now.Add(-5 * time.Second), Error: "connection refused"}
		}, nil, StateDegraded, "the way back to old-db:3306 is not open: connection refused"},
		{"failed a while ago: again", func(v *ClusterView) {
			v.FallbackStarted = &FallbackStart{At: v.Now.Add(-time.Minute), Error: "connection refused"}
		}, []string{"StartFallback(db-0)"}, StateHealthy, ""},
		{"the server moved: never again", func(v *ClusterView) {
			v.FallbackStarted = &FallbackStart{At: v.Now.Add(-time.Hour), Error: "the source moved", Permanent: true}
		}, nil, StateDegraded, "is not open: the source moved"},
		{"fall back asked, caught up", func(v *ClusterView) {
			v.FallbackStarted = &FallbackStart{At: v.Now}
			v.FallbackSeen = &FallbackObservation{Replicating: true, Lag: lag(1)}
			v.Fallback.FallBack = "back"
		}, []string{"FallBack(db-0)"}, StateFallBack, "falling back"},
		{"fall back asked, behind", func(v *ClusterView) {
			v.FallbackStarted = &FallbackStart{At: v.Now}
			v.FallbackSeen = &FallbackObservation{Replicating: true, Lag: lag(30)}
			v.Fallback.FallBack = "back"
		}, nil, StateDegraded, "the fall back waits: old-db:3306 is 30 s behind"},
		{"fall back asked, not yet pointed", func(v *ClusterView) { v.Fallback.FallBack = "back" }, []string{"StartFallback(db-0)"}, StateHealthy, ""},
		{"fall back failed for this request", func(v *ClusterView) {
			v.FallbackStarted = &FallbackStart{At: v.Now}
			v.FallbackSeen = &FallbackObservation{Replicating: true, Lag: lag(0)}
			v.Fallback.FallBack, v.FallBackFailed = "back", "back"
		}, nil, StateDegraded, "failed and is not tried again"},
		{"a replica to repair first", func(v *ClusterView) {
			v.Instances[1].Status.Replica.IORunning = false
			v.Fallback.FallBack = "back"
		}, []string{"StartReplication(db-1)"}, "", "the fall back to old-db:3306 waits until the cluster has nothing else to do"},
		{"the cluster's passwords changed: pointed again", func(v *ClusterView) {
			v.FallbackStarted = &FallbackStart{At: v.Now, Generation: "g1"}
			v.FallbackSeen = &FallbackObservation{Read: true, Replicating: true, Lag: lag(0)}
			v.CredentialsGeneration = "g2"
		}, []string{"StartFallback(db-0)"}, StateHealthy, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := cutOverWithFallback()
			tc.edit(&v)
			d := Decide(v)
			if !slices.Equal(steps(d), tc.plan) || (tc.state != "" && d.State != tc.state) || !strings.Contains(d.Message, tc.message) {
				t.Fatalf("plan %v state %s (%s); want %v %s containing %q", steps(d), d.State, d.Message, tc.plan, tc.state, tc.message)
			}
			if slices.Contains(tc.plan, "FallBack(db-0)") && Roles(v, d, nil)["db-0"] == RolePrimary {
				t.Error("the primary keeps the Service in the fall back's cycle")
			}
		})
	}
}

// TestDecideFellBack: once writes moved back, the cluster is retired — nothing is promoted
// (not the read-only primary, not after its loss), no instance takes clients, and a writable
// one is reported rather than fenced.
func TestDecideFellBack(t *testing.T) {
	rec := &CutoverRecord{Source: "db-0", Instance: "old-db:3306", At: time.Date(2026, 12, 7, 16, 5, 0, 0, time.UTC), Position: "0-1000-42"}
	v := cluster("db-0", inst(0), inst(1).replicaOf(0, ""), inst(2).replicaOf(0, ""))
	v.FellBack = rec
	d := Decide(v)
	roles := Roles(v, d, nil)
	if len(d.Plan) != 0 || d.State != StateFellBack || !strings.Contains(d.Message, "writes moved back to old-db:3306") {
		t.Errorf("fell back: plan %v state %s (%s)", steps(d), d.State, d.Message)
	}
	for n, r := range roles {
		if r != RoleNone {
			t.Errorf("%s is published %q after the fall back", n, r)
		}
	}
	v = cluster("db-0", inst(0).down(), inst(1).replicaOf(0, ""), inst(2).replicaOf(0, ""))
	v.FellBack, v.PrimaryMisses = rec, 10
	for _, s := range Decide(v).Plan {
		if s.Kind == StepPromote {
			t.Errorf("a retired cluster promoted %s", s.Instance)
		}
	}
	v = cluster("db-0", inst(0).writable(), inst(1).replicaOf(0, ""), inst(2).replicaOf(0, ""))
	v.FellBack = rec
	if d := Decide(v); !strings.Contains(d.Message, "db-0 accepts writes although the cluster fell back") || slices.ContainsFunc(d.Plan, func(s Step) bool { return s.Kind == StepFence }) {
		t.Errorf("a writable instance after the fall back: plan %v (%s)", steps(d), d.Message)
	}
}

// TestDecideFallBackInterrupted: an operator stopped in the middle of a fall back. The recorded
// primary is read-only (fenced) while the fall back is asked: found fallen back when the server
// is seen detached and writable (recorded, retired, nothing published); not opened again while
// the server is not seen; and a server left detached but read-only (a fall back that failed
// after its detach) is pointed at the cluster again once the primary is open.
func TestDecideFallBackInterrupted(t *testing.T) {
	fenced := func(seen *FallbackObservation) ClusterView {
		v := cluster("db-0", inst(0).executed("0-1000-50"), inst(1).replicaOf(0, ""), inst(2).replicaOf(0, ""))
		v.Now = time.Date(2026, 12, 7, 16, 0, 0, 0, time.UTC)
		v.Fallback = &Fallback{Source: "old-db:3306", PrimaryHost: "db-primary.ns.svc", PrimaryPort: 3306, FallBack: "back"}
		v.FallbackStarted = &FallbackStart{At: v.Now.Add(-time.Hour)}
		v.FallbackSeen = seen
		return v
	}
	v := fenced(&FallbackObservation{Read: true, Detached: true, Writable: true})
	d := Decide(v)
	if d.FellBack == nil || d.FellBack.Instance != "old-db:3306" || d.FellBack.Position != "0-1000-50" ||
		d.State != StateFellBack || len(d.Plan) != 0 {
		t.Errorf("opened server, no record: fell back %+v, state %s, plan %v (%s)", d.FellBack, d.State, steps(d), d.Message)
	}
	for n, r := range Roles(v, d, nil) {
		if r != RoleNone {
			t.Errorf("%s published %q in the cycle that found the fall back", n, r)
		}
	}
	for _, seen := range []*FallbackObservation{nil, {Error: "connection refused"}} {
		d = Decide(fenced(seen))
		if slices.ContainsFunc(d.Plan, func(s Step) bool { return s.Kind == StepPromote }) || !strings.Contains(d.Message, "is not opened again until old-db:3306 is seen") {
			t.Errorf("server not seen (%+v): plan %v (%s)", seen, steps(d), d.Message)
		}
	}
	// Seen following (not opened): the primary is opened again (the fall back never got far).
	d = Decide(fenced(&FallbackObservation{Read: true, Replicating: true}))
	if !slices.Equal(steps(d), []string{"Promote(db-0 semisync=true)"}) {
		t.Errorf("server still following: plan %v (%s)", steps(d), d.Message)
	}
	// The primary open again, the server detached and read-only: pointed again.
	v = cutOverWithFallback()
	v.FallbackStarted = &FallbackStart{At: v.Now.Add(-time.Hour)}
	v.FallbackSeen = &FallbackObservation{Read: true, Detached: true, Error: "old-db:3306 has no replication connection"}
	if d := Decide(v); !slices.Equal(steps(d), []string{"StartFallback(db-0)"}) {
		t.Errorf("detached read-only server: plan %v (%s)", steps(d), d.Message)
	}
}

// TestDecideFellBackKeepsItsRecord: a retired cluster that loses its primary makes no failover
// progress, reports no promotion, and refuses a switchover.
func TestDecideFellBackKeepsItsRecord(t *testing.T) {
	v := cluster("db-0", inst(0).down(), inst(1).replicaOf(0, "0-1-5"), inst(2).replicaOf(0, "0-1-5"))
	v.FellBack, v.PrimaryMisses = &CutoverRecord{Instance: "old-db:3306"}, 10
	d := Decide(v)
	if d.Primary != "db-0" || d.PromotedFrom != "" || d.Failover != nil || d.State != StateFellBack {
		t.Errorf("retired, primary lost: primary %s from %q failover %+v state %s plan %v", d.Primary, d.PromotedFrom, d.Failover, d.State, steps(d))
	}
	for _, s := range d.Plan {
		if s.Kind == StepReplicate && s.Source != "db-0" {
			t.Errorf("a retired cluster re-points %s at %s", s.Instance, s.Source)
		}
	}
	v = cluster("db-0", inst(0), inst(1).replicaOf(0, ""), inst(2).replicaOf(0, ""))
	v.FellBack, v.Switchover = &CutoverRecord{Instance: "old-db:3306"}, &SwitchoverRequest{To: "db-1"}
	if d := Decide(v); d.Switchover != nil || d.SwitchoverRefused == "" || slices.ContainsFunc(d.Plan, func(s Step) bool { return s.Kind == StepFence }) {
		t.Errorf("retired, a switchover asked: %+v refused %q plan %v", d.Switchover, d.SwitchoverRefused, steps(d))
	}
}
