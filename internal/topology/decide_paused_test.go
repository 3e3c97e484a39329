package topology

import (
	"strings"
	"testing"
)

// TestPausedFailsOverAndFencesOnly: a paused cluster (spec.paused) keeps the plans that
// protect the data and the clients — the failover of a lost primary, unless failover is off,
// and the fence of a second writable server — and withholds every other: repairs, settings,
// switchovers. The same views unpaused are planned, so each case shows what pausing changes.
func TestPausedFailsOverAndFencesOnly(t *testing.T) {
	lost := func() ClusterView {
		v := cluster("db-0", inst(0).down(), inst(1).executed("0-1-10").replicaOf(0, "0-1-10").ioStopped(), inst(2).executed("0-1-10").replicaOf(0, "0-1-10").ioStopped())
		v.PrimaryMisses = 5
		return v
	}
	noFailover := func() ClusterView {
		v := lost()
		v.Settings.FailoverEnabled = false
		return v
	}
	splitBrain := func() ClusterView {
		return cluster("db-0", inst(0).writable().executed("0-1-10"), inst(1).writable().executed("0-1-10"), inst(2).executed("0-1-10").replicaOf(0, "0-1-10"))
	}
	stoppedReplica := func() ClusterView {
		return cluster("db-0", inst(0).writable().executed("0-1-10"), inst(1).executed("0-1-10").replicaOf(0, "0-1-10").ioStopped(), inst(2).executed("0-1-10").replicaOf(0, "0-1-10"))
	}
	switchover := func() ClusterView {
		v := cluster("db-0", inst(0).writable().executed("0-1-10"), inst(1).executed("0-1-10").replicaOf(0, "0-1-10"), inst(2).executed("0-1-10").replicaOf(0, "0-1-10"))
		v.Switchover = &SwitchoverRequest{To: "db-1"}
		return v
	}
	variables := func() ClusterView {
		v := cluster("db-0", inst(0).writable().executed("0-1-10"), inst(1).executed("0-1-10").replicaOf(0, "0-1-10"), inst(2).executed("0-1-10").replicaOf(0, "0-1-10"))
		v.Instances[1].NeedsVariables = true
		return v
	}
	for _, tc := range []struct {
		name     string
		view     func() ClusterView
		keptPlan bool // the plan survives pausing
		state    State
	}{
		{"a lost primary is failed over", lost, true, StateFailover},
		{"a second writable server is fenced", splitBrain, true, StateSplitBrain},
		{"a replica whose receiver stopped is not restarted", stoppedReplica, false, ""},
		{"a requested switchover is not done", switchover, false, ""},
		{"run-time settings are not applied", variables, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.view()
			unpaused := Decide(v)
			if len(unpaused.Plan) == 0 {
				t.Fatalf("unpaused: no plan (%s: %s): the case shows nothing", unpaused.State, unpaused.Message)
			}
			v = tc.view()
			v.Settings.Paused = true
			d := Decide(v)
			if tc.keptPlan {
				if d.State != tc.state || len(d.Plan) != len(unpaused.Plan) {
					t.Fatalf("paused: %s %v (%s), want %s with the unpaused plan %v", d.State, d.Plan, d.Message, tc.state, unpaused.Plan)
				}
				return
			}
			if len(d.Plan) != 0 || !strings.Contains(d.Message, "paused") {
				t.Fatalf("paused: plan %v, message %q; want no plan and a message saying paused (unpaused: %v)", d.Plan, d.Message, unpaused.Plan)
			}
		})
	}
	// Failover turned off stays off.
	v := noFailover()
	v.Settings.Paused = true
	if d := Decide(v); d.State != StatePrimaryLost || len(d.Plan) != 0 {
		t.Fatalf("paused, failover off: %s %v, want PrimaryLost and no plan", d.State, d.Plan)
	}
}

// A switchover and a pause: one not yet begun is withheld and leaves no trace — the primary,
// the promotion and the request stay what they were, unfenced, for after the pause; one
// whose fence already ran (the old primary is read-only) is finished, or the cluster would
// have no writable primary for the whole pause.
func TestPausedSwitchover(t *testing.T) {
	pending := func() ClusterView {
		v := cluster("db-0", inst(0).writable().executed("0-1-10"), inst(1).executed("0-1-10").replicaOf(0, "0-1-10"), inst(2).executed("0-1-10").replicaOf(0, "0-1-10"))
		v.Switchover = &SwitchoverRequest{To: "db-1"}
		return v
	}
	v := pending()
	v.Settings.Paused = true
	d := Decide(v)
	if len(d.Plan) != 0 || d.Primary != "db-0" || d.PromotedFrom != "" || d.Switchover == nil || d.Switchover.Fenced || d.Switchover.To != "db-1" {
		t.Fatalf("paused, switchover not begun: plan %v primary %s promotedFrom %q switchover %+v; want nothing done, the request kept unfenced", d.Plan, d.Primary, d.PromotedFrom, d.Switchover)
	}

	// The fence ran before the pause: db-0 is read-only.
	fenced := func() ClusterView {
		v := pending()
		v.Instances[0].Status.ReadOnly = true
		v.Switchover = &SwitchoverRequest{To: "db-1", From: "db-0", Fenced: true}
		return v
	}
	unpaused := Decide(fenced())
	if len(unpaused.Plan) == 0 {
		t.Fatalf("unpaused, fenced switchover: no plan (%s: %s): the case shows nothing", unpaused.State, unpaused.Message)
	}
	v = fenced()
	v.Settings.Paused = true
	if d := Decide(v); len(d.Plan) != len(unpaused.Plan) || d.Primary != unpaused.Primary {
		t.Fatalf("paused, fenced switchover: plan %v primary %s (%s); want it finished like unpaused: %v primary %s", d.Plan, d.Primary, d.Message, unpaused.Plan, unpaused.Primary)
	}
}
