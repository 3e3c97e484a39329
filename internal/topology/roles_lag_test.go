package topology

import (
	"strings"
	"testing"
	"time"
)

// TestRolesWithholdLaggingReplicas checks which replicas the replicas Service keeps: those
// at most Settings.MaxReplicaLag behind (or of unknown lag), not one further behind or
// whose applier stopped — unless the plan starts it again this cycle — and every one when
// there is no limit. Withheld says why for each replica left out, and only for those.
func TestRolesWithholdLaggingReplicas(t *testing.T) {
	lag := func(s int64) func(*ib) { return func(b *ib) { b.v.Status.Replica.SecondsBehindSource = &s } }
	applierStopped := func(errno int) func(*ib) { return func(b *ib) { b.sqlError(errno) } }
	for _, tc := range []struct {
		name    string
		max     time.Duration
		db2     func(*ib)
		restart bool // the plan starts db-2's replication
		want    Role
		why     string
	}{
		{"in time", time.Minute, lag(60), false, RoleReplica, ""},
		{"too far behind", time.Minute, lag(61), false, RoleNone, "61 s behind"},
		{"lag unknown", time.Minute, func(*ib) {}, false, RoleReplica, ""},
		{"no limit", 0, lag(3600), false, RoleReplica, ""},
		{"applier stopped on an error", time.Minute, applierStopped(1062), false, RoleNone, "error 1062"},
		{"applier stopped, started by this plan", time.Minute, applierStopped(0), true, RoleReplica, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db2 := inst(2).executed("0-1-10").replicaOf(0, "0-1-10")
			tc.db2(db2)
			v := cluster("db-0", inst(0).writable().executed("0-1-10"), inst(1).executed("0-1-10").replicaOf(0, "0-1-10"), db2)
			v.Settings.MaxReplicaLag = tc.max
			d := Decision{Primary: "db-0", State: StateHealthy}
			if tc.restart {
				d.Plan = []Step{{Kind: StepStartReplication, Instance: "db-2"}}
			}
			roles, withheld := Roles(v, d, nil), Withheld(v, d, nil)
			if roles["db-2"] != tc.want || roles["db-1"] != RoleReplica || roles["db-0"] != RolePrimary {
				t.Fatalf("roles %v, want db-2 %q", roles, tc.want)
			}
			if why := withheld["db-2"]; (tc.why == "") != (why == "") || !strings.Contains(why, tc.why) || len(withheld) > 1 {
				t.Fatalf("withheld %v, want db-2's reason to say %q", withheld, tc.why)
			}
		})
	}
}

// TestRolesWithholdAFailedApplierThroughDecide goes through Decide, whose plan retries a
// stopped applier every cycle: one stopped on an error stays withheld all the same, one
// stopped without an error (restarted by this plan) stays published.
func TestRolesWithholdAFailedApplierThroughDecide(t *testing.T) {
	for _, tc := range []struct {
		errno int
		want  Role
	}{{1062, RoleNone}, {0, RoleReplica}} {
		db2 := inst(2).executed("0-1-10").replicaOf(0, "0-1-10")
		db2.v.Status.Replica.SQLRunning, db2.v.Status.Replica.LastSQLErrno = false, tc.errno
		v := cluster("db-0", inst(0).writable().executed("0-1-10"), inst(1).executed("0-1-10").replicaOf(0, "0-1-10"), db2)
		v.Settings.MaxReplicaLag = time.Minute
		d := Decide(v)
		restarts := false
		for _, s := range d.Plan {
			restarts = restarts || (s.Kind == StepStartReplication && s.Instance == "db-2")
		}
		if !restarts {
			t.Fatalf("errno %d: the plan %v does not restart db-2's replication (the case under test)", tc.errno, steps(d))
		}
		if got := Roles(v, d, nil)["db-2"]; got != tc.want {
			t.Errorf("errno %d: db-2's role %q, want %q (withheld %v)", tc.errno, got, tc.want, Withheld(v, d, nil))
		}
	}
}
