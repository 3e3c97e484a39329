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
