package topology

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// TestDecideSwitchoverWaitsForAHealthyReplica: a switchover that cannot proceed in one
// observation (no replica seen healthy: a missed probe, a replica catching up) stays pending,
// unfenced, for SwitchoverPatience, and is refused — with a reason to report — only after
// that. An unknown target is refused at once.
func TestDecideSwitchoverWaitsForAHealthyReplica(t *testing.T) {
	replicasDown := func(to string, fenced bool, waited time.Duration) ClusterView {
		p := inst(0).writable().executed("0-1-10")
		if fenced {
			p.v.Status.ReadOnly = true
		}
		v := cluster("db-0", p, inst(1).down(), inst(2).down())
		v.Switchover = &SwitchoverRequest{To: to}
		if fenced {
			v.Switchover.Fenced, v.Switchover.From = true, "db-0"
		}
		v.SwitchoverWaited = waited
		return v
	}
	cases := []struct {
		name        string
		view        ClusterView
		pending     *SwitchoverRequest // nil: dropped
		refused     bool
		plan        []string
		messageHave string
	}{
		{"auto, no healthy replica yet: kept pending", replicasDown("", false, 5*time.Second),
			&SwitchoverRequest{}, false, nil, "waiting"},
		{"auto, no healthy replica for longer than the patience: refused", replicasDown("", false, SwitchoverPatience+time.Second),
			nil, true, nil, "refused"},
		{"target down: kept pending", replicasDown("db-1", false, 5*time.Second),
			&SwitchoverRequest{To: "db-1"}, false, nil, "db-1 is not a healthy replica"},
		{"target down for longer than the patience: refused", replicasDown("db-1", false, SwitchoverPatience),
			nil, true, nil, "refused"},
		{"fenced, then the target went down: the primary is writable again and the request waits unfenced",
			replicasDown("db-1", true, 5*time.Second),
			&SwitchoverRequest{To: "db-1"}, false, []string{"Promote(db-0 semisync=true)"}, "waiting"},
		{"fenced, target down, patience spent: writable again and refused",
			replicasDown("db-1", true, 2*SwitchoverPatience),
			nil, true, []string{"Promote(db-0 semisync=true)"}, "refused"},
		{"unknown target: refused at once", replicasDown("db-7", false, 0),
			nil, true, nil, "no such instance"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.view)
			if d.Primary != "db-0" || d.State == StateSwitchover {
				t.Errorf("state %s primary %s, want db-0 still primary and no switchover step (%s)", d.State, d.Primary, d.Message)
			}
			switch {
			case tc.pending == nil && d.Switchover != nil:
				t.Errorf("still pending: %+v, want dropped (%s)", *d.Switchover, d.Message)
			case tc.pending != nil && (d.Switchover == nil || *d.Switchover != *tc.pending):
				t.Errorf("pending %+v, want %+v (%s)", d.Switchover, *tc.pending, d.Message)
			}
			if got := d.SwitchoverRefused != ""; got != tc.refused {
				t.Errorf("refused=%v (%q), want %v", got, d.SwitchoverRefused, tc.refused)
			}
			if got := steps(d); !slices.Equal(got, tc.plan) && !(len(got) == 0 && len(tc.plan) == 0) {
				t.Errorf("plan %v, want %v", got, tc.plan)
			}
			if !strings.Contains(d.Message, tc.messageHave) {
				t.Errorf("message %q does not say %q", d.Message, tc.messageHave)
			}
		})
	}

	// The control: the moment a replica is seen healthy, a waiting request proceeds.
	v := replicasDown("db-1", false, 30*time.Second)
	v.Instances[1] = inst(1).executed("0-1-10").replicaOf(0, "0-1-10").v
	v.Instances[2] = inst(2).executed("0-1-10").replicaOf(0, "0-1-10").v
	if d := Decide(v); d.State != StateSwitchover || !slices.Equal(steps(d), []string{"Fence(db-0)"}) {
		t.Errorf("target healthy again: %s %v (%s), want the fence of db-0", d.State, steps(d), d.Message)
	}
}

// sourceOn marks the instance's semi-sync source side as on (as an interrupted promotion
// leaves it).
func (b *ib) sourceOn() *ib { b.v.Status.SemiSync.SourceEnabled = true; return b }

// An instance that is not the primary never keeps its semi-sync source side on: its applier
// would wait the whole semi-sync timeout for acknowledgements nobody sends (the 30 s outage of
// an operator restarted in the middle of a switchover's promotion). It is turned off before
// anything waits for that instance to apply.
func TestDecideTurnsSemiSyncSourceOffOffThePrimary(t *testing.T) {
	healthy := cluster("db-0", inst(0).writable().executed("0-1-10"),
		inst(1).executed("0-1-10").replicaOf(0, "0-1-10"),
		inst(2).executed("0-1-10").replicaOf(0, "0-1-10").sourceOn())
	// The promotion of db-2 stopped after its replication was reset and semi-sync turned on.
	interrupted := cluster("db-0", inst(0).writable().executed("0-1-10"),
		inst(1).executed("0-1-10").replicaOf(0, "0-1-10"),
		inst(2).executed("0-1-10").sourceOn())
	switchover := cluster("db-0", inst(0).executed("0-1-12"),
		inst(1).executed("0-1-12").replicaOf(0, "0-1-12"),
		inst(2).executed("0-1-11").replicaOf(0, "0-1-12").sourceOn())
	switchover.Switchover = &SwitchoverRequest{To: "db-2", Fenced: true, From: "db-0"}
	failover := cluster("db-0", inst(0).down(),
		inst(1).executed("0-1-9").replicaOf(0, "0-1-10").ioStopped(),
		inst(2).executed("0-1-10").replicaOf(0, "0-1-12").ioStopped().sourceOn())
	failover.PrimaryMisses, failover.Failover = 5, &FailoverProgress{From: "db-0", Fenced: true}
	for _, tc := range []struct {
		name string
		v    ClusterView
		want []string
	}{
		{"healthy cluster", healthy, []string{"SemiSyncSource(db-2 semisync=false)"}},
		{"replica left with it on by an interrupted promotion", interrupted,
			[]string{"SemiSyncSource(db-2 semisync=false)", "Replicate(db-2 from db-0 rejoin)"}},
		{"switchover target", switchover, []string{"SemiSyncSource(db-2 semisync=false)", "WaitApplied(db-2 gtid 0-1-12)",
			"RefuseClients(db-0)", "Promote(db-2 semisync=true)", "Replicate(db-0 from db-2 rejoin)", "Replicate(db-1 from db-2)"}},
		{"failover candidate", failover, []string{"SemiSyncSource(db-2 semisync=false)", "WaitApplied(db-2 gtid 0-1-12)",
			"Promote(db-2 semisync=true)", "Replicate(db-1 from db-2)"}},
	} {
		if got := steps(Decide(tc.v)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: plan %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A switchover request by annotation is accepted once: delivered again with the same id — by
// an operator restarted before it removed the annotation, possibly after the switchover
// finished — it changes nothing, also for an engine started from the persisted state.
func TestRequestSwitchoverOnce(t *testing.T) {
	e := New(Config{Members: func() []Member { return nil }, Log: logr.Discard()}, Persisted{Primary: "db-0"})
	if !e.RequestSwitchoverOnce("", "req-1") || e.PendingSwitchover() == nil {
		t.Fatal("a new request is not pending")
	}
	if e.State().LastSwitchoverRequest != "req-1" {
		t.Errorf("persisted state %+v does not record the request", e.State())
	}
	restarted := New(Config{Members: func() []Member { return nil }, Log: logr.Discard()}, Persisted{Primary: "db-2", LastSwitchoverRequest: "req-1"})
	if restarted.RequestSwitchoverOnce("", "req-1") || restarted.PendingSwitchover() != nil {
		t.Error("the same request delivered again after a restart started a second switchover")
	}
	if !restarted.RequestSwitchoverOnce("db-1", "req-2") || restarted.PendingSwitchover() == nil {
		t.Error("a new request after it was refused")
	}
	// An anonymous request (a rollout's, a deleted primary pod's) keeps the annotation's id:
	// the annotation delivered again afterwards is still known as done.
	anon := New(Config{Members: func() []Member { return nil }, Log: logr.Discard()}, Persisted{Primary: "db-0", LastSwitchoverRequest: "req-1"})
	anon.RequestSwitchoverOnce("", "")
	if got := anon.State().LastSwitchoverRequest; got != "req-1" {
		t.Errorf("an anonymous request changed the recorded id to %q", got)
	}
}
