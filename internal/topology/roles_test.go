package topology

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"
)

func TestRolesFollowTheRecordNotOneProbe(t *testing.T) {
	const attempts = 3
	lostPrimary := func(misses int) ClusterView {
		v := cluster("db-0",
			inst(0).down(),
			inst(1).executed("0-1-10").replicaOf(0, "0-1-10"),
			inst(2).executed("0-1-10").replicaOf(0, "0-1-10").ioStopped())
		v.Settings.DetectionAttempts = attempts
		v.PrimaryMisses = misses
		return v
	}
	for misses := 1; misses < attempts; misses++ {
		v := lostPrimary(misses)
		d := Decide(v)
		if d.State != StatePrimarySuspect {
			t.Fatalf("%d misses: state %s, want %s", misses, d.State, StatePrimarySuspect)
		}
		got := Roles(v, d, nil)
		want := map[string]Role{"db-0": RolePrimary, "db-1": RoleReplica, "db-2": RoleReplica}
		if !maps.Equal(got, want) {
			t.Fatalf("%d of %d misses: roles %v, want %v (the primary must keep its role)", misses, attempts, got, want)
		}
	}
	// Enough misses: the failover fences first. The record still names db-0 until a replica
	// is promoted, and db-0 keeps the primary Service through the fence — whether it refuses
	// connections (killed, restarting) or is silent (hung, cut off) — so that the promotion
	// moves it in one change (kube-proxy applies a second change no sooner than its
	// minSyncPeriod after the first; docs/design/0050).
	v := lostPrimary(attempts)
	v.Instances[2].Status.Replica.IORunning = false
	v.Instances[1].Status.Replica.IORunning = false
	v.Instances[0].Err = fmt.Errorf("status probe: %w", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)})
	d := Decide(v)
	if d.State != StateFailover || d.Primary != "db-0" {
		t.Fatalf("fence phase: state %s primary %s", d.State, d.Primary)
	}
	want := map[string]Role{"db-0": RolePrimary, "db-1": RoleReplica, "db-2": RoleReplica}
	if got := Roles(v, d, nil); !maps.Equal(got, want) {
		t.Fatalf("fence phase, primary refusing connections: roles %v, want %v (db-0 kept while the failover proceeds)", got, want)
	}
	silent := v
	silent.Instances = slices.Clone(v.Instances)
	silent.Instances[0].Err = fmt.Errorf("status probe: %w", context.DeadlineExceeded)
	if sd := Decide(silent); sd.State != StateFailover || len(sd.Plan) == 0 {
		t.Fatalf("fence phase, silent primary: state %s plan %v", sd.State, steps(sd))
	} else if got := Roles(silent, sd, nil); !maps.Equal(got, want) {
		t.Fatalf("fence phase, silent primary: roles %v, want %v (db-0 kept while the failover proceeds)", got, want)
	}
	// A fence that failed part way keeps the failover, which no longer proceeds: db-0 is
	// withdrawn and clients are refused at once.
	want = map[string]Role{"db-0": RoleNone, "db-1": RoleReplica, "db-2": RoleReplica}
	if got := Roles(v, d, errors.New("stop io failed")); !maps.Equal(got, want) {
		t.Fatalf("failed fence: roles %v, want %v", got, want)
	}
	// A failover that waits (here: no replica left to promote) withdraws db-0 even when it
	// refuses connections: nothing will move the Service soon.
	waiting := lostPrimary(attempts)
	waiting.Failover = &FailoverProgress{From: "db-0", Fenced: true}
	waiting.Instances[1] = inst(1).down().v
	waiting.Instances[2] = inst(2).down().v
	waiting.Instances[0].Err = v.Instances[0].Err // refusing connections: withdrawn all the same
	if wd := Decide(waiting); wd.State == StateFailover || len(wd.Plan) > 0 {
		t.Fatalf("waiting failover: state %s plan %v", wd.State, steps(wd))
	} else if got := Roles(waiting, wd, nil)["db-0"]; got != RoleNone {
		t.Fatalf("waiting failover (%s: %s): db-0 has role %q, want none", wd.State, wd.Message, got)
	}
	v.Failover = d.Failover
	d = Decide(v)
	if d.Primary != "db-1" || d.PromotedFrom != "db-0" {
		t.Fatalf("promotion phase: primary %s from %s, plan %v", d.Primary, d.PromotedFrom, steps(d))
	}
	want = map[string]Role{"db-0": RoleNone, "db-1": RolePrimary, "db-2": RoleReplica}
	if got := Roles(v, d, nil); !maps.Equal(got, want) {
		t.Fatalf("after the promotion: roles %v, want %v", got, want)
	}
	// The same promotion failing part way publishes no new primary, and the lost one stays
	// withdrawn: the failover goes on.
	want = map[string]Role{"db-0": RoleNone, "db-1": RoleReplica, "db-2": RoleReplica}
	if got := Roles(v, d, errors.New("promote failed")); !maps.Equal(got, want) {
		t.Fatalf("failed promotion: roles %v, want %v", got, want)
	}
	// A suspected primary keeps its role even when the cycle's plan failed: no failover is
	// under way.
	v = lostPrimary(1)
	if got := Roles(v, Decide(v), errors.New("apply variables failed"))["db-0"]; got != RolePrimary {
		t.Fatalf("suspected primary after a failed plan: role %q, want primary", got)
	}
}

func TestRoles(t *testing.T) {
	healthy := func() ClusterView {
		return cluster("db-0",
			inst(0).writable().executed("0-1-10"),
			inst(1).executed("0-1-10").replicaOf(0, "0-1-10"),
			inst(2).executed("0-1-10").replicaOf(0, "0-1-10"))
	}
	cases := []struct {
		name string
		view func() ClusterView
		want map[string]Role
	}{
		{"healthy", healthy, map[string]Role{"db-0": RolePrimary, "db-1": RoleReplica, "db-2": RoleReplica}},
		{"an unreachable replica takes no reads", func() ClusterView {
			v := healthy()
			v.Instances[2] = inst(2).down().v
			return v
		}, map[string]Role{"db-0": RolePrimary, "db-1": RoleReplica, "db-2": RoleNone}},
		{"bootstrap publishes the promoted instance and its new replicas", func() ClusterView {
			return cluster("", inst(0).executed(""), inst(1).executed(""), inst(2).executed(""))
		}, map[string]Role{"db-0": RolePrimary, "db-1": RoleReplica, "db-2": RoleReplica}},
		{"waiting for instances publishes nothing", func() ClusterView {
			return cluster("", inst(0).executed(""), inst(1).down(), inst(2).executed(""))
		}, map[string]Role{"db-0": RoleNone, "db-1": RoleNone, "db-2": RoleNone}},
		{"switchover fence withdraws the primary", func() ClusterView {
			v := healthy()
			v.Switchover = &SwitchoverRequest{To: "db-1"}
			return v
		}, map[string]Role{"db-0": RoleNone, "db-1": RoleReplica, "db-2": RoleReplica}},
		{"a fenced primary whose switchover cannot go on is made writable again and keeps it", func() ClusterView {
			v := healthy()
			v.Instances[0].Status.ReadOnly = true
			v.Instances[1].Status.Replica.SQLRunning = false // the target is not healthy
			v.Switchover = &SwitchoverRequest{To: "db-1", Fenced: true}
			return v
		}, map[string]Role{"db-0": RolePrimary, "db-1": RoleReplica, "db-2": RoleReplica}},
		{"switchover promotion moves it", func() ClusterView {
			v := healthy()
			v.Instances[0].Status.ReadOnly = true
			v.Switchover = &SwitchoverRequest{To: "db-1", Fenced: true}
			return v
		}, map[string]Role{"db-0": RoleReplica, "db-1": RolePrimary, "db-2": RoleReplica}},
		{"an errant replica takes no reads", func() ClusterView {
			v := healthy()
			v.Instances[2] = inst(2).executed("0-3-11").replicaOf(0, "0-1-10").v
			return v
		}, map[string]Role{"db-0": RolePrimary, "db-1": RoleReplica, "db-2": RoleNone}},
		{"split brain keeps the recorded primary and fences the other", func() ClusterView {
			v := healthy()
			v.Instances[1] = inst(1).writable().executed("0-1-10").v
			return v
		}, map[string]Role{"db-0": RolePrimary, "db-1": RoleNone, "db-2": RoleReplica}},
		{"a recorded primary that restarted read-only behind a replica takes no writes", func() ClusterView {
			return cluster("db-0",
				inst(0).executed("0-1-9").serverID(1),
				inst(1).executed("0-1-10").replicaOf(0, "0-1-10"),
				inst(2).executed("0-1-9").replicaOf(0, "0-1-9"))
		}, map[string]Role{"db-0": RoleNone, "db-1": RoleReplica, "db-2": RoleReplica}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.view()
			d := Decide(v)
			if got := Roles(v, d, nil); !maps.Equal(got, tc.want) {
				t.Fatalf("roles %v, want %v (state %s, plan %v)", got, tc.want, d.State, steps(d))
			}
		})
	}
	// A switchover's promotion that fails part way leaves the fenced primary read-only with no
	// promotion done: it is withdrawn (clients refused) until the switchover goes on or it is
	// made writable again.
	v := healthy()
	v.Instances[0].Status.ReadOnly = true
	v.Switchover = &SwitchoverRequest{To: "db-1", Fenced: true}
	d := Decide(v)
	want := map[string]Role{"db-0": RoleNone, "db-1": RoleReplica, "db-2": RoleReplica}
	if got := Roles(v, d, errors.New("wait applied: timeout")); !maps.Equal(got, want) {
		t.Fatalf("switchover promotion failed: roles %v, want %v (state %s, plan %v)", got, want, d.State, steps(d))
	}
}

// TestRolesLostPrimaryKeptUntilPromotion covers keptUntilPromotion: for every kind of probe
// error a lost primary shows, whether it keeps the primary Service in each situation of a
// failover from it (docs/design/0050 and its addendum).
func TestRolesLostPrimaryKeptUntilPromotion(t *testing.T) {
	const attempts = 3
	refused := fmt.Errorf("status probe: %w", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)})
	kinds := []struct {
		name    string
		err     error
		refuses bool
	}{
		{"refused", refused, true},
		{"deadline", fmt.Errorf("status probe: %w", context.DeadlineExceeded), false},
		{"i/o timeout", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, false},
		{"no route", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}, false},
		{"refused only in words", errors.New("connection refused"), false},
	}
	// fence is the cycle that fences the replicas of a primary lost with err.
	fence := func(err error) ClusterView {
		v := cluster("db-0",
			inst(0).down(),
			inst(1).executed("0-1-10").replicaOf(0, "0-1-10").silent(2*time.Second),
			inst(2).executed("0-1-10").replicaOf(0, "0-1-10").silent(2*time.Second))
		v.Settings.DetectionAttempts = attempts
		v.PrimaryMisses = attempts
		v.Instances[0].Err = err
		return v
	}
	lag := func(v ClusterView, seconds int64) ClusterView {
		v.Instances = slices.Clone(v.Instances)
		for i := 1; i < 3; i++ {
			st := *v.Instances[i].Status
			rs := *st.Replica
			rs.SecondsBehindSource = &seconds
			st.Replica = &rs
			v.Instances[i].Status = &st
		}
		return v
	}
	type situation struct {
		name string
		// view and planErr are the cycle; keptRefused and keptSilent whether db-0 keeps the
		// role when it refuses connections or is silent.
		view                    func(err error) ClusterView
		planErr                 error
		keptRefused, keptSilent bool
		state                   State
	}
	situations := []situation{
		{name: "fence, candidates caught up", view: fence, keptRefused: true, keptSilent: true, state: StateFailover},
		{name: "fence, candidates 0 s behind", view: func(err error) ClusterView { return lag(fence(err), 0) },
			keptRefused: true, keptSilent: true, state: StateFailover},
		{name: "fence, a candidate 5 s behind", view: func(err error) ClusterView { return lag(fence(err), 5) },
			keptRefused: true, keptSilent: false, state: StateFailover},
		{name: "fence failed", view: fence, planErr: errors.New("stop io failed"), state: StateFailover},
		{name: "fence retried after it failed", view: func(err error) ClusterView {
			v := fence(err)
			v.Failover = &FailoverProgress{From: "db-0"}
			return v
		}, state: StateFailover},
		{name: "fence repeated, receivers running again", view: func(err error) ClusterView {
			v := fence(err)
			v.Failover = &FailoverProgress{From: "db-0", Fenced: true}
			return v
		}, keptRefused: true, keptSilent: true, state: StateFailover},
		{name: "waiting: no candidate", view: func(err error) ClusterView {
			v := fence(err)
			v.Failover = &FailoverProgress{From: "db-0", Fenced: true}
			v.Instances[1], v.Instances[2] = inst(1).down().v, inst(2).down().v
			return v
		}, state: StatePrimaryLost},
		{name: "waiting: a candidate fresh, the other down", view: func(err error) ClusterView {
			v := fence(err)
			v.Failover = &FailoverProgress{From: "db-0", Fenced: true}
			v.Instances[1] = inst(1).executed("0-1-10").replicaOf(0, "0-1-10").ioStopped().fresh().v
			v.Instances[2] = inst(2).down().v
			return v
		}, state: StatePrimaryLost},
	}
	for _, k := range kinds {
		for _, sit := range situations {
			v := sit.view(k.err)
			d := Decide(v)
			if d.State != sit.state {
				t.Fatalf("%s, %s: state %s (%s), want %s", k.name, sit.name, d.State, d.Message, sit.state)
			}
			want := sit.keptSilent
			if k.refuses {
				want = sit.keptRefused
			}
			if got := Roles(v, d, sit.planErr)["db-0"] == RolePrimary; got != want {
				t.Errorf("%s, %s: db-0 keeps the primary Service: %v, want %v (plan %v)", k.name, sit.name, got, want, steps(d))
			}
		}
	}
	// The promotion moves the Service, whatever kind of loss.
	for _, k := range kinds {
		v := fence(k.err)
		v.Failover = &FailoverProgress{From: "db-0", Fenced: true}
		for i := 1; i < 3; i++ {
			v.Instances[i].Status.Replica.IORunning = false
		}
		d := Decide(v)
		want := map[string]Role{"db-0": RoleNone, "db-1": RolePrimary, "db-2": RoleReplica}
		if got := Roles(v, d, nil); d.Primary != "db-1" || !maps.Equal(got, want) {
			t.Errorf("%s, promotion: primary %s roles %v, want %v", k.name, d.Primary, got, want)
		}
		want = map[string]Role{"db-0": RoleNone, "db-1": RoleReplica, "db-2": RoleReplica}
		if got := Roles(v, d, errors.New("promote failed")); !maps.Equal(got, want) {
			t.Errorf("%s, failed promotion: roles %v, want %v", k.name, got, want)
		}
	}
}
