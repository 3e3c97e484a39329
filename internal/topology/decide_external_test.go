package topology

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
)

// testSource is the external source of the tests: a server outside the cluster.
func testSource() *ExternalSource {
	return &ExternalSource{Host: "old-db.example", Port: 3306, User: "migrate", Password: "pw", ID: "abc"}
}

// following makes the instance replicate from testSource, pointed there by this engine.
func (b *ib) following(x *ExternalSource) *ib {
	lag := int64(0)
	b.v.Status.Replica = &dbsql.ReplicaStatus{SourceHost: x.Host, SourcePort: x.Port, IORunning: true, SQLRunning: true, SecondsBehindSource: &lag}
	b.v.ReplicationGeneration = x.replicationGeneration()
	b.v.Status.SemiSync.SourceEnabled, b.v.Status.SemiSync.SourceActive = true, true
	return b
}

// external makes v follow testSource; the primary following it counts its replicas receiving
// from it as semi-sync clients (cluster counts them for writable sources only).
func external(v ClusterView) ClusterView {
	v.External = testSource()
	for i, src := range v.Instances {
		if src.Name != v.Primary || src.Status == nil || !src.Status.ReadOnly {
			continue
		}
		for _, r := range v.Instances {
			if r.Status != nil && r.Status.Replica != nil && r.Status.Replica.IORunning && r.Status.Replica.SourceHost == src.Host {
				v.Instances[i].Status.SemiSync.Clients++
			}
		}
	}
	return v
}

// TestDecideFollowsAnExternalSource: while a cluster follows a server outside it, no plan opens
// an instance for writes — the bootstrap, a failover and a switchover each point the new
// primary at the source instead — and a primary that follows it is left alone.
func TestDecideFollowsAnExternalSource(t *testing.T) {
	x := testSource()
	cases := []struct {
		name    string
		view    ClusterView
		state   State
		primary string
		plan    []string
		message string
	}{
		{"bootstrap: the most advanced follows the source, the others replicate from it",
			external(cluster("", inst(0).executed("0-9-100"), inst(1).executed("0-9-100"), inst(2).executed("0-9-100"))),
			StateBootstrap, "db-0", []string{"FollowExternal(db-0 semisync=true)", "Replicate(db-1 from db-0 rejoin)", "Replicate(db-2 from db-0 rejoin)"}, ""},
		{"following: nothing to do, the state says so",
			external(cluster("db-0", inst(0).following(x).executed("0-9-120"), inst(1).replicaOf(0, "0-9-120").executed("0-9-120"),
				inst(2).replicaOf(0, "0-9-120").executed("0-9-120"))),
			StateHealthy, "db-0", nil, "db-0 follows old-db.example:3306 (read-only until the cutover)"},
		{"read-only primary not pointed at the source yet: pointed, not promoted",
			external(cluster("db-0", inst(0).executed("0-9-120"), inst(1).replicaOf(0, "0-9-120"), inst(2).replicaOf(0, "0-9-120"))),
			StateHealing, "db-0", []string{"FollowExternal(db-0 semisync=true)"}, ""},
		{"the source's account changed: pointed again",
			func() ClusterView {
				v := external(cluster("db-0", inst(0).following(x), inst(1).replicaOf(0, ""), inst(2).replicaOf(0, "")))
				v.External.ID = "def"
				return v
			}(),
			StateHealing, "db-0", []string{"FollowExternal(db-0 semisync=true)"}, ""},
		{"receiver stopped: started again",
			external(cluster("db-0", inst(0).following(x).ioStopped(), inst(1).replicaOf(0, ""), inst(2).replicaOf(0, ""))),
			StateHealing, "db-0", []string{"StartReplication(db-0)"}, ""},
		{"the source purged the position: reported, nothing retried",
			func() ClusterView {
				b := inst(0).following(x).ioStopped()
				b.v.Status.Replica.LastIOErrno, b.v.Status.Replica.LastIOError = 1236, "Could not find GTID state requested by slave in any binlog files"
				return external(cluster("db-0", b, inst(1).replicaOf(0, ""), inst(2).replicaOf(0, "")))
			}(),
			StateDegraded, "db-0", nil, "no longer has the binary logs"},
		{"a writable primary is never pointed at the source",
			external(cluster("db-0", inst(0).writable(), inst(1).replicaOf(0, ""), inst(2).replicaOf(0, ""))),
			StateDegraded, "db-0", nil, "accepts writes although the cluster follows old-db.example:3306"},
		{"failover: the candidate follows the source instead of taking writes",
			func() ClusterView {
				v := cluster("db-0", inst(0).down(), inst(1).executed("0-9-130"), inst(2).executed("0-9-129").replicaOf(0, "0-9-129").ioStopped())
				v.PrimaryMisses, v.Failover = 5, &FailoverProgress{From: "db-0", Fenced: true}
				return external(v)
			}(),
			StateFailover, "db-1", []string{"FollowExternal(db-1 semisync=true)", "Replicate(db-2 from db-1)"}, ""},
		{"cutover asked: the following primary is cut over",
			func() ClusterView {
				v := external(cluster("db-0", inst(0).following(x).executed("0-9-150"), inst(1).replicaOf(0, "0-9-150").executed("0-9-150"),
					inst(2).replicaOf(0, "0-9-150").executed("0-9-150")))
				v.External.Cutover = "req-1"
				return v
			}(),
			StateCutover, "db-0", []string{"Cutover(db-0)"}, "cutting over from old-db.example:3306 to db-0"},
		{"cutover asked while the primary is not pointed at the source: pointed first, the cutover waits",
			func() ClusterView {
				v := external(cluster("db-0", inst(0).executed("0-9-150"), inst(1).replicaOf(0, ""), inst(2).replicaOf(0, "")))
				v.External.Cutover = "req-1"
				return v
			}(),
			StateDegraded, "db-0", []string{"FollowExternal(db-0 semisync=true)"}, "the cutover waits until db-0 replicates from old-db.example:3306"},
		{"cutover asked while the receiver is stopped: started, the cutover waits",
			func() ClusterView {
				v := external(cluster("db-0", inst(0).following(x).ioStopped(), inst(1).replicaOf(0, ""), inst(2).replicaOf(0, "")))
				v.External.Cutover = "req-1"
				return v
			}(),
			StateHealing, "db-0", []string{"StartReplication(db-0)"}, ""},
		{"cutover asked while the primary is far behind: it waits",
			func() ClusterView {
				b := inst(0).following(x)
				lag := int64(30)
				b.v.Status.Replica.SecondsBehindSource = &lag
				v := external(cluster("db-0", b, inst(1).replicaOf(0, ""), inst(2).replicaOf(0, "")))
				v.External.Cutover = "req-1"
				return v
			}(),
			StateDegraded, "db-0", nil, "the cutover waits: db-0 is 30 s behind"},
		{"cutover asked while no replica acknowledges: it waits",
			func() ClusterView {
				v := external(cluster("db-0", inst(0).following(x), inst(1).down(), inst(2).down()))
				v.External.Cutover = "req-1"
				return v
			}(),
			StateDegraded, "db-0", nil, "no replica acknowledges what db-0 applies"},
		{"a cutover that failed is not tried again for the same request",
			func() ClusterView {
				v := external(cluster("db-0", inst(0).following(x), inst(1).replicaOf(0, ""), inst(2).replicaOf(0, "")))
				v.External.Cutover, v.CutoverFailed = "req-1", "req-1"
				return v
			}(),
			StateDegraded, "db-0", nil, "failed and is not tried again"},
		{"a new request after a failed one: tried",
			func() ClusterView {
				v := external(cluster("db-0", inst(0).following(x), inst(1).replicaOf(0, ""), inst(2).replicaOf(0, "")))
				v.External.Cutover, v.CutoverFailed = "req-2", "req-1"
				return v
			}(),
			StateCutover, "db-0", []string{"Cutover(db-0)"}, ""},
		{"a replica opened by hand is fenced, never adopted",
			external(cluster("db-0", inst(0).following(x), inst(1).writable(), inst(2).replicaOf(0, ""))),
			StateSplitBrain, "db-0", []string{"Fence(db-1)"}, "accepted writes while the cluster follows"},
		{"the primary holds writes of the cluster's own: never pointed at the source again",
			external(cluster("db-0", inst(0).serverID(1000).executed("0-1000-7"), inst(1).replicaOf(0, ""), inst(2).replicaOf(0, ""))),
			StateDegraded, "db-0", []string{"SemiSyncSource(db-0 semisync=true)"}, "holds writes of the cluster's own"},
		{"switchover: the primary stops following before its fence",
			func() ClusterView {
				v := external(cluster("db-0", inst(0).following(x).executed("0-9-140"), inst(1).replicaOf(0, "0-9-140").executed("0-9-140"),
					inst(2).replicaOf(0, "0-9-140").executed("0-9-140")))
				v.Switchover = &SwitchoverRequest{To: "db-1"}
				return v
			}(),
			StateSwitchover, "db-0", []string{"StopReplication(db-0)", "Fence(db-0)"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.view)
			if d.State != tc.state || d.Primary != tc.primary || !slices.Equal(steps(d), tc.plan) {
				t.Errorf("got %s primary %s plan %v (%s), want %s primary %s plan %v", d.State, d.Primary, steps(d), d.Message, tc.state, tc.primary, tc.plan)
			}
			if !strings.Contains(d.Message, tc.message) {
				t.Errorf("message %q lacks %q", d.Message, tc.message)
			}
			for _, s := range d.Plan {
				if s.Kind == StepPromote {
					t.Errorf("a plan opened %s for writes while the cluster follows an external source", s.Instance)
				}
			}
			// The primary Service selects no pod: clients write to the source until the cutover.
			// (A writable primary keeps its clients: it may be a cutover whose record was lost.)
			p, _ := tc.view.instance(tc.view.Primary)
			cutover := slices.ContainsFunc(d.Plan, func(s Step) bool { return s.Kind == StepCutover })
			if roles := Roles(tc.view, d, nil); (!p.Reachable() || p.Status.ReadOnly) && !cutover && slices.Contains(mapsValues(roles), RolePrimary) {
				t.Errorf("roles %v publish a primary while the cluster follows an external source", roles)
			}
		})
	}
}

func mapsValues(m map[string]Role) []Role {
	var out []Role
	for _, r := range m {
		out = append(out, r)
	}
	return out
}

// TestDecideCutover: the cutover's step makes the primary the primary Service's at once; a
// cutover found done without its record (an operator stopped between the opening and the
// record) is recorded, and the cluster is its own again — never pointed back at the source.
func TestDecideCutover(t *testing.T) {
	x := testSource()
	v := external(cluster("db-0", inst(0).following(x).executed("0-9-150"), inst(1).replicaOf(0, "0-9-150"), inst(2).replicaOf(0, "0-9-150")))
	v.External.Cutover = "req-1"
	d := Decide(v)
	if roles := Roles(v, d, nil); roles["db-0"] != RolePrimary {
		t.Errorf("roles %v: the primary cut over takes the primary Service's clients with the cutover", roles)
	}
	if roles := Roles(v, d, errors.New("cutover undone")); roles["db-0"] == RolePrimary {
		t.Errorf("roles %v after a failed cutover: the primary stays out", roles)
	}

	done := external(cluster("db-0", inst(0).writable().executed("0-9-160"), inst(1).replicaOf(0, "0-9-160").executed("0-9-160"),
		inst(2).replicaOf(0, "0-9-160").executed("0-9-160")))
	done.External.Cutover = "req-1"
	d = Decide(done)
	if d.CutOver == nil || d.CutOver.Instance != "db-0" || d.CutOver.Warning == "" {
		t.Fatalf("cut over without a record: got %+v (%s)", d.CutOver, d.Message)
	}
	if d.State != StateHealthy || len(d.Plan) != 0 || strings.Contains(d.Message, "follows") {
		t.Errorf("after an unrecorded cutover: %s %v (%s), want a healthy cluster of its own", d.State, steps(d), d.Message)
	}
	// Writable but still replicating: not a cutover (someone opened it by hand): reported.
	open := external(cluster("db-0", inst(0).following(x).writable(), inst(1).replicaOf(0, ""), inst(2).replicaOf(0, "")))
	open.External.Cutover = "req-1"
	if d = Decide(open); d.CutOver != nil || !strings.Contains(d.Message, "accepts writes although") {
		t.Errorf("a writable primary still replicating from the source: %+v (%s)", d.CutOver, d.Message)
	}
}

// TestFollowingCornerCases: what a following cluster's primary that misses observations, or
// acknowledges alone, or restarted after an unrecorded cutover, leads to.
func TestFollowingCornerCases(t *testing.T) {
	x := testSource()
	// Suspected: it takes no clients (it took none before).
	v := external(cluster("db-0", inst(0).down(), inst(1).replicaOf(0, ""), inst(2).replicaOf(0, "")))
	v.PrimaryMisses = 1
	if d := Decide(v); d.State != StatePrimarySuspect || Roles(v, d, nil)["db-0"] == RolePrimary {
		t.Errorf("a suspected following primary: %s, roles %v", d.State, Roles(v, d, nil))
	}
	// Semi-sync fallen back: nothing acknowledged alone is recorded (the source holds it all).
	b := inst(0).following(x)
	b.v.Status.SemiSync.SourceActive = false
	v = external(cluster("db-0", b, inst(1).replicaOf(0, ""), inst(2).replicaOf(0, "")))
	if d := Decide(v); d.AckedAlone != nil {
		t.Errorf("acknowledged alone recorded while following: %+v", d.AckedAlone)
	}
	// The opened primary restarted (read-only, detached, holding writes of its own) after a
	// cutover whose record was lost: recorded, then opened again — never pointed at the source.
	v = external(cluster("db-0", inst(0).serverID(1000).executed("0-1000-7"), inst(1).serverID(1001).replicaOf(0, "0-1000-7"),
		inst(2).serverID(1002).replicaOf(0, "0-1000-7")))
	v.External.Cutover = "req-1"
	d := Decide(v)
	if d.CutOver == nil || !slices.Equal(steps(d), []string{"Promote(db-0 semisync=true)"}) {
		t.Errorf("restarted after an unrecorded cutover: record %+v, plan %v (%s)", d.CutOver, steps(d), d.Message)
	}
}

// TestFollowingWithoutTheAccount: the account's Secret is gone (ExternalSource.Unavailable).
// The engine still runs: the following primary keeps its replication as the server has it,
// nothing points an instance at the source again (even where the account's generation
// differs), no cutover or verification begins though asked, and the status says why; a
// failed primary is still replaced — the new one is never opened for writes.
func TestFollowingWithoutTheAccount(t *testing.T) {
	x := testSource()
	x.Unavailable = "the Secret old-db of spec.bootstrap.external does not exist"
	p := inst(0).following(x)
	p.v.ReplicationGeneration = "external:older-account"
	v := external(cluster("db-0", p, inst(1).replicaOf(0, ""), inst(2).replicaOf(0, "")))
	v.External = x
	v.External.Cutover, v.External.Verify = "now", "v1"
	d := Decide(v)
	if len(d.Plan) != 0 || d.CutOver != nil || !strings.Contains(d.Message, "Secret old-db") || !strings.Contains(d.Message, "cannot point") {
		t.Errorf("following without the account: plan %v, cut over %+v (%s)", steps(d), d.CutOver, d.Message)
	}
	// The following primary is lost: a replica takes its place, pointed at the source only
	// once the account is back (the engine's step refuses before touching the server).
	v = external(cluster("db-0", inst(0).down(), inst(1).replicaOf(0, ""), inst(2).replicaOf(0, "")))
	v.External = x
	v.PrimaryMisses = 10
	d = Decide(v)
	for _, s := range d.Plan {
		if s.Kind == StepPromote {
			t.Errorf("a following cluster without its account promoted %s: %v", s.Instance, steps(d))
		}
	}
}
