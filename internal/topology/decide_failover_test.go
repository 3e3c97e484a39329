package topology

import (
	"slices"
	"strings"
	"testing"
)

// TestFailoverNeverPromotesLessThanWasReceived follows one failover through the observations
// of the double fault the chaos suite found (primary hung, then the replica that received the
// most deleted): what the candidates received is recorded at the fence, and no candidate
// holding less is promoted — the failover waits and restarts the lost primary, which holds
// every write it acknowledged, until the record is held again.
func TestFailoverNeverPromotesLessThanWasReceived(t *testing.T) {
	// The primary is hung; db-1 received 0-1-12, db-2 only 0-1-10 (writes up to 12 may have
	// been acknowledged by db-1 alone). Both receivers silent.
	v := cluster("db-0", inst(0).down(),
		inst(1).executed("0-1-9").replicaOf(0, "0-1-12").silent(2*ReceiverSilence),
		inst(2).executed("0-1-10").replicaOf(0, "0-1-10").silent(2*ReceiverSilence))
	v.PrimaryMisses = 3
	fence := Decide(v)
	if fence.State != StateFailover || !slices.Equal(steps(fence), []string{"StopIO(db-1)", "StopIO(db-2)"}) {
		t.Fatalf("fence: %s %v (%s)", fence.State, steps(fence), fence.Message)
	}
	wantRecord := func(what string, f *FailoverProgress, fenced bool) {
		t.Helper()
		if f == nil || f.From != "db-0" || f.Fenced != fenced || f.ReceivedBy != "db-1" || !gtid("0-1-12").Equal(f.Received) {
			t.Fatalf("%s: failover progress %+v, want from db-0, fenced %v, received 0-1-12 by db-1", what, f, fenced)
		}
	}
	wantRecord("fence decision", fence.Failover, true)
	// The fence's StopIO fails (db-1's pod is being deleted): the record stays, unfenced.
	wantRecord("fence decision, a step failing", fence.FailoverOnStepError, false)

	// db-1 is gone before the promotion; db-2 holds less than was received.
	gone := cluster("db-0", inst(0).down(), inst(1).down(), inst(2).executed("0-1-10").replicaOf(0, "0-1-10").ioStopped())
	gone.PrimaryMisses, gone.Failover = 5, fence.Failover
	waits := Decide(gone)
	if waits.State != StatePrimaryLost || len(waits.Plan) != 0 || waits.Primary != "db-0" || waits.RestartLostPrimary != "db-0" {
		t.Fatalf("db-1 gone: %s primary %s plan %v restart %q (%s); want PrimaryLost, no plan, db-0 restarted",
			waits.State, waits.Primary, steps(waits), waits.RestartLostPrimary, waits.Message)
	}
	for _, says := range []string{"db-1", "0-1-12", "db-2", "restarts db-0"} {
		if !strings.Contains(waits.Message, says) {
			t.Errorf("the waiting failover's message %q does not say %q", waits.Message, says)
		}
	}
	wantRecord("waiting", waits.Failover, true)

	// db-1 back after a restart: MariaDB discarded the relay log it had not applied.
	purged := cluster("db-0", inst(0).down(),
		inst(1).executed("0-1-9").replicaOf(0, "0-1-9").ioStopped(),
		inst(2).executed("0-1-10").replicaOf(0, "0-1-10").ioStopped())
	purged.PrimaryMisses, purged.Failover = 9, waits.Failover
	if d := Decide(purged); d.State != StatePrimaryLost || d.Primary != "db-0" || d.RestartLostPrimary != "db-0" {
		t.Fatalf("db-1 back without what it received: %s primary %s (%s); want still waiting", d.State, d.Primary, d.Message)
	} else {
		wantRecord("db-1 back without it", d.Failover, true)
	}

	// The message says how to give the writes up; a user who does (for another primary's
	// failover) changes nothing, and for this one the best candidate left is promoted.
	if !strings.Contains(waits.Message, "mysql.dolphin.dev/failover-accept-loss=db-0") {
		t.Errorf("the waiting failover's message %q does not say how to accept the loss", waits.Message)
	}
	other := gone
	other.AcceptLossFrom = "db-1"
	if d := Decide(other); d.State != StatePrimaryLost || d.Primary != "db-0" {
		t.Fatalf("loss accepted for another primary's failover: %s primary %s (%s)", d.State, d.Primary, d.Message)
	}
	accepted := gone
	accepted.AcceptLossFrom = "db-0"
	if d := Decide(accepted); d.State != StateFailover || d.Primary != "db-2" ||
		!slices.Equal(steps(d), []string{"WaitApplied(db-2 gtid 0-1-10)", "Promote(db-2 semisync=true)"}) ||
		!strings.Contains(d.Message, "giving up what only db-1 had received (up to 0-1-12") {
		t.Fatalf("loss accepted: %s primary %s plan %v (%s); want db-2 promoted, saying what is given up", d.State, d.Primary, steps(d), d.Message)
	}

	// db-1 back having applied everything before it died: it is promoted.
	applied := cluster("db-0", inst(0).down(),
		inst(1).executed("0-1-12").replicaOf(0, "0-1-12").ioStopped(),
		inst(2).executed("0-1-10").replicaOf(0, "0-1-10").ioStopped())
	applied.PrimaryMisses, applied.Failover = 9, waits.Failover
	promote := Decide(applied)
	if promote.State != StateFailover || promote.Primary != "db-1" ||
		!slices.Equal(steps(promote), []string{"WaitApplied(db-1 gtid 0-1-12)", "Promote(db-1 semisync=true)", "Replicate(db-2 from db-1)"}) {
		t.Fatalf("db-1 back with it: %s %s %v (%s)", promote.State, promote.Primary, steps(promote), promote.Message)
	}
	if promote.Failover != nil {
		t.Errorf("a promotion ends the failover, yet it carries %+v", promote.Failover)
	}
	// The promotion's steps fail (db-1 lost again): the record is kept for the next try.
	wantRecord("promotion, a step failing", promote.FailoverOnStepError, true)

	// Or the lost primary comes back restarted (read-only) with every write it acknowledged:
	// it is the primary again, and the failover is over.
	back := cluster("db-0", inst(0).serverID(1).executed("0-1-12"),
		inst(1).executed("0-1-9").replicaOf(0, "0-1-9").ioStopped(),
		inst(2).executed("0-1-10").replicaOf(0, "0-1-10").ioStopped())
	back.Failover = waits.Failover
	if d := Decide(back); d.Primary != "db-0" || d.Failover != nil || d.RestartLostPrimary != "" || d.State == StateFailover || d.State == StatePrimaryLost {
		t.Fatalf("old primary back: %s primary %s failover %+v restart %q (%s)", d.State, d.Primary, d.Failover, d.RestartLostPrimary, d.Message)
	}
}

// The record only grows: a candidate that received more replaces it, one that received less
// or diverged does not, and a failover of another primary starts a new record.
func TestRecordReceived(t *testing.T) {
	prev := &FailoverProgress{From: "db-0", Fenced: true, Received: gtid("0-1-12"), ReceivedBy: "db-1"}
	for _, tc := range []struct {
		name       string
		prev       *FailoverProgress
		candidates []*ib
		want, by   string
		fenced     bool
	}{
		{"no record yet: the most received", nil,
			[]*ib{inst(1).replicaOf(0, "0-1-7"), inst(2).replicaOf(0, "0-1-9")}, "0-1-9", "db-2", false},
		{"less than the record: kept", prev,
			[]*ib{inst(2).replicaOf(0, "0-1-10")}, "0-1-12", "db-1", true},
		{"more than the record: replaced", prev,
			[]*ib{inst(2).replicaOf(0, "0-1-14")}, "0-1-14", "db-2", true},
		{"diverged from the record: kept", prev,
			[]*ib{inst(2).replicaOf(0, "0-1-10,1-3-4")}, "0-1-12", "db-1", true},
		{"a record of another primary's failover: started over", &FailoverProgress{From: "db-2", Fenced: true, Received: gtid("0-3-40"), ReceivedBy: "db-1"},
			[]*ib{inst(1).replicaOf(0, "0-1-7")}, "0-1-7", "db-1", false},
		{"nothing received anywhere: no record", nil,
			[]*ib{inst(1).replicaOf(0, "")}, "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cands []InstanceView
			for _, b := range tc.candidates {
				cands = append(cands, b.v)
			}
			got := recordReceived(tc.prev, "db-0", cands)
			if got == tc.prev {
				t.Fatal("the previous progress was returned itself, not a new value")
			}
			if got.From != "db-0" || got.Fenced != tc.fenced || got.ReceivedBy != tc.by ||
				(tc.want == "") != (got.Received == nil) || (tc.want != "" && !gtid(tc.want).Equal(got.Received)) {
				t.Errorf("got %+v, want received %q by %q, fenced %v", got, tc.want, tc.by, tc.fenced)
			}
		})
	}
}
