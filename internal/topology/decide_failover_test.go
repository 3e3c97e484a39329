package topology

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
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
			got := recordReceived(tc.prev, nil, "db-0", cands)
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

// TestFailoverTailGuardsWhatThePromotedOneReceived follows the double fault a chaos round
// found (docs/design/0039): the hung primary's last transaction reached one replica only; it
// was promoted and lost before the other replica fetched that transaction from it. The next
// failover must not promote the replica without it: it waits for the new primary, restarted,
// as the first failover would have waited for the old one.
func TestFailoverTailGuardsWhatThePromotedOneReceived(t *testing.T) {
	// db-2 (the primary) is lost; fenced, db-0 received 0-1-12, db-1 0-1-11.
	fenced := cluster("db-2",
		inst(0).executed("0-1-10").replicaOf(2, "0-1-12").ioStopped(),
		inst(1).executed("0-1-10").replicaOf(2, "0-1-11").ioStopped(),
		inst(2).down())
	fenced.PrimaryMisses = 5
	fenced.Failover = &FailoverProgress{From: "db-2", Fenced: true, Received: gtid("0-1-12"), ReceivedBy: "db-0"}
	promote := Decide(fenced)
	if promote.Primary != "db-0" || !slices.Contains(steps(promote), "Replicate(db-1 from db-0)") {
		t.Fatalf("promotion: %s primary %s %v (%s)", promote.State, promote.Primary, steps(promote), promote.Message)
	}
	wantTail := func(what string, tl *FailoverTail) {
		t.Helper()
		if tl == nil || tl.From != "db-2" || tl.HeldBy != "db-0" || !gtid("0-1-12").Equal(tl.Received) {
			t.Fatalf("%s: tail %+v, want 0-1-12 held by db-0, from db-2", what, tl)
		}
	}
	wantTail("promotion", promote.Tail)

	// db-0 is the primary; db-1 has not fetched 0-1-12 yet; db-2 is being restarted.
	behind := cluster("db-0", inst(0).executed("0-1-12").writable(),
		inst(1).executed("0-1-11").replicaOf(0, "0-1-11"), inst(2).down())
	behind.Tail = promote.Tail
	wantTail("db-1 behind", Decide(behind).Tail)

	// db-0 is lost now. db-1's receiver is silent: it is fenced, and the record starts from
	// the tail.
	lost := cluster("db-0", inst(0).down(),
		inst(1).executed("0-1-11").replicaOf(0, "0-1-11").silent(2*ReceiverSilence), inst(2).down())
	lost.PrimaryMisses, lost.Tail = 3, behind.Tail
	fence := Decide(lost)
	if fence.State != StateFailover || !slices.Equal(steps(fence), []string{"StopIO(db-1)"}) {
		t.Fatalf("fence: %s %v (%s)", fence.State, steps(fence), fence.Message)
	}
	if f := fence.Failover; f == nil || f.From != "db-0" || f.ReceivedBy != "db-0" || !gtid("0-1-12").Equal(f.Received) {
		t.Fatalf("fence: failover record %+v, want from db-0 with 0-1-12 held by db-0", f)
	}

	// Fenced: db-1 lacks 0-1-12. Not promoted; db-0 (which holds it) is restarted.
	waiting := cluster("db-0", inst(0).down(),
		inst(1).executed("0-1-11").replicaOf(0, "0-1-11").ioStopped(), inst(2).down())
	waiting.PrimaryMisses, waiting.Tail, waiting.Failover = 5, fence.Tail, fence.Failover
	waits := Decide(waiting)
	if waits.State != StatePrimaryLost || waits.Primary != "db-0" || len(waits.Plan) != 0 || waits.RestartLostPrimary != "db-0" {
		t.Fatalf("db-1 without the tail: %s primary %s plan %v restart %q (%s); want PrimaryLost, db-0 restarted",
			waits.State, waits.Primary, steps(waits), waits.RestartLostPrimary, waits.Message)
	}
	for _, says := range []string{"db-0 was promoted with", "0-1-12", "db-1", "restarts db-0", "failover-accept-loss=db-0"} {
		if !strings.Contains(waits.Message, says) {
			t.Errorf("the waiting failover's message %q does not say %q", waits.Message, says)
		}
	}
	// A user who gives the writes up gets db-1.
	accepted := waiting
	accepted.AcceptLossFrom = "db-0"
	if d := Decide(accepted); d.Primary != "db-1" || !strings.Contains(d.Message, "giving up") {
		t.Fatalf("loss accepted: %s primary %s (%s)", d.State, d.Primary, d.Message)
	}

	// Had db-1 fetched 0-1-12 before db-0 was lost, it is promoted.
	caughtUp := cluster("db-0", inst(0).down(),
		inst(1).executed("0-1-12").replicaOf(0, "0-1-12").ioStopped(), inst(2).down())
	caughtUp.PrimaryMisses, caughtUp.Tail = 5, behind.Tail
	caughtUp.Failover = &FailoverProgress{From: "db-0", Fenced: true, Received: gtid("0-1-12"), ReceivedBy: "db-0"}
	if d := Decide(caughtUp); d.Primary != "db-1" || d.State != StateFailover {
		t.Fatalf("db-1 caught up: %s primary %s (%s)", d.State, d.Primary, d.Message)
	}

	// The tail ends once every other instance holds it — not while one does not answer.
	oneHolds := cluster("db-0", inst(0).executed("0-1-12").writable(),
		inst(1).executed("0-1-12").replicaOf(0, "0-1-12"), inst(2).down())
	oneHolds.Tail = behind.Tail
	wantTail("db-2 not answering", Decide(oneHolds).Tail)
	allHold := cluster("db-0", inst(0).executed("0-1-13").writable(),
		inst(1).executed("0-1-12").replicaOf(0, "0-1-13"), inst(2).executed("0-1-12").replicaOf(0, "0-1-12"))
	allHold.Tail = behind.Tail
	if d := Decide(allHold); d.Tail != nil {
		t.Errorf("every replica holds the tail, yet it is carried: %+v", d.Tail)
	}
	// An errant holder ends it too (the primary chose other writes).
	errant := cluster("db-0", inst(0).executed("0-1-12").writable(),
		inst(1).executed("0-1-12").replicaOf(0, "0-1-12").sqlError(errnoGTIDStrictOutOfOrder), inst(2).down())
	errant.Tail = &FailoverTail{From: "db-2", Received: gtid("0-1-12"), HeldBy: "db-1"}
	if d := Decide(errant); d.Tail != nil {
		t.Errorf("the tail's holder is errant, yet it is carried: %+v", d.Tail)
	}

	// A promotion adopted without its record (operator stopped right after it) keeps the
	// failover's record as the tail.
	adopted := cluster("db-2", inst(0).executed("0-1-12").writable(),
		inst(1).executed("0-1-11").replicaOf(2, "0-1-11").ioStopped(), inst(2).down())
	adopted.Failover = fenced.Failover
	if d := Decide(adopted); d.Primary != "db-0" {
		t.Fatalf("adopt: %s primary %s (%s)", d.State, d.Primary, d.Message)
	} else {
		wantTail("adopted", d.Tail)
	}
}

// TestRecordStartsFromTheTail: a failover that begins while the last one's tail is guarded
// starts its record there; a record already running keeps its own.
func TestRecordStartsFromTheTail(t *testing.T) {
	tail := &FailoverTail{From: "db-2", Received: gtid("0-1-12"), HeldBy: "db-0"}
	got := recordReceived(nil, tail, "db-0", []InstanceView{inst(1).replicaOf(0, "0-1-11").v})
	if got.ReceivedBy != "db-0" || !gtid("0-1-12").Equal(got.Received) {
		t.Errorf("new failover: %+v, want 0-1-12 by db-0", got)
	}
	got = recordReceived(nil, tail, "db-0", []InstanceView{inst(1).replicaOf(0, "0-1-14").v})
	if got.ReceivedBy != "db-1" || !gtid("0-1-14").Equal(got.Received) {
		t.Errorf("a candidate with more: %+v, want 0-1-14 by db-1", got)
	}
	prev := &FailoverProgress{From: "db-0", Fenced: true, Received: gtid("0-1-13"), ReceivedBy: "db-1"}
	got = recordReceived(prev, tail, "db-0", nil)
	if got.ReceivedBy != "db-1" || !gtid("0-1-13").Equal(got.Received) {
		t.Errorf("running failover: %+v, want its own record 0-1-13 by db-1", got)
	}
}

// TestFailoverCountsReplicasLostWithThePrimary: the chaos run that lost 1075 acknowledged
// writes (docs/design/0045). A node restart took down every server while the operator
// restarted; its first failover promoted the one replica that answered, which lacked what
// the primary's other replica had acknowledged. A replica the last status showed answering
// and this engine has not observed is unknown: the failover waits for it (or the lost
// primary, which it restarts) unless a person accepts the loss; one this engine saw holding
// more than every candidate before it stopped answering counts as having received that.
func TestFailoverCountsReplicasLostWithThePrimary(t *testing.T) {
	// db-2 was the primary; db-0 had acknowledged up to 0-2-97 (it answered before the
	// restart), db-1 rejoined late with 0-2-95. Only db-1 answers.
	v := cluster("db-2", inst(0).down(), inst(1).executed("0-2-95").replicaOf(2, "0-2-95").ioStopped(), inst(2).down())
	v.PrimaryMisses = 5
	v.Failover = &FailoverProgress{From: "db-2", Fenced: true}
	v.Unseen = map[string]bool{"db-0": true, "db-1": true, "db-2": true}
	d := Decide(v)
	if d.State != StatePrimaryLost || d.Primary != "db-2" || d.RestartLostPrimary != "db-2" || len(d.Plan) != 0 {
		t.Fatalf("an unseen replica: %s primary %s restart %q plan %v (%s); want PrimaryLost, db-2 restarted, nothing promoted",
			d.State, d.Primary, d.RestartLostPrimary, steps(d), d.Message)
	}
	for _, says := range []string{"db-0 answered before the operator restarted", "failover-accept-loss=db-2"} {
		if !strings.Contains(d.Message, says) {
			t.Errorf("message %q does not say %q", d.Message, says)
		}
	}
	accepted := v
	accepted.AcceptLossFrom = "db-2"
	if d := Decide(accepted); d.State != StateFailover || d.Primary != "db-1" {
		t.Fatalf("loss accepted: %s primary %s (%s); want db-1 promoted", d.State, d.Primary, d.Message)
	}
	// db-0 answers again (it applied what it received before it went down): it is promoted.
	back := v
	back.Instances = cluster("db-2", inst(0).executed("0-2-97").replicaOf(2, "0-2-97").ioStopped(),
		inst(1).executed("0-2-95").replicaOf(2, "0-2-95").ioStopped(), inst(2).down()).Instances
	back.Unseen = map[string]bool{"db-2": true}
	if d := Decide(back); d.State != StateFailover || d.Primary != "db-0" {
		t.Fatalf("db-0 back: %s primary %s (%s); want db-0 promoted", d.State, d.Primary, d.Message)
	}

	// Seen by this engine: db-0 received 0-2-97, then went down with the primary.
	seen := v
	seen.Unseen = nil
	seen.Seen = map[string]dbsql.GTIDSet{"db-0": gtid("0-2-97"), "db-1": gtid("0-2-95")}
	d = Decide(seen)
	if d.State != StatePrimaryLost || d.RestartLostPrimary != "db-2" || d.Failover == nil || d.Failover.ReceivedBy != "db-0" ||
		!gtid("0-2-97").Equal(d.Failover.Received) {
		t.Fatalf("a replica seen with more: %s restart %q record %+v (%s); want waiting, received 0-2-97 by db-0", d.State, d.RestartLostPrimary, d.Failover, d.Message)
	}
	// Seen with less than the candidate (it was behind when it went down): no effect.
	behind := seen
	behind.Seen = map[string]dbsql.GTIDSet{"db-0": gtid("0-2-90")}
	if d := Decide(behind); d.State != StateFailover || d.Primary != "db-1" {
		t.Fatalf("a replica seen behind: %s primary %s (%s); want db-1 promoted", d.State, d.Primary, d.Message)
	}
}

// TestFailoverWaitsForTheLostPrimaryWhenCandidatesRestarted: the second chaos shape — the
// node restarted, every server with it, and the operator too. The replicas came back first
// without what they had received and not applied (MariaDB re-fetches it on a restart), which
// included writes they had acknowledged; only the lost primary, starting, holds them. A
// candidate whose server started after the primary was last seen answering (after this
// engine started, when it never saw it) makes the failover wait for the lost primary.
func TestFailoverWaitsForTheLostPrimaryWhenCandidatesRestarted(t *testing.T) {
	now := time.Date(2026, 12, 5, 3, 6, 34, 0, time.UTC)
	up := func(b *ib, d time.Duration) *ib { b.v.Status.Uptime = d; return b }
	v := cluster("db-0", inst(0).down(),
		up(inst(1).executed("0-1-160810").replicaOf(0, "0-1-160810").ioStopped(), 7*time.Second),
		up(inst(2).executed("0-1-160816").replicaOf(0, "0-1-160816").ioStopped(), 7*time.Second))
	v.PrimaryMisses, v.Failover = 5, &FailoverProgress{From: "db-0", Fenced: true}
	v.Now, v.Started = now, now.Add(-8*time.Second) // the operator restarted 8 s ago
	d := Decide(v)
	if d.State != StatePrimaryLost || d.RestartLostPrimary != "db-0" || len(d.Plan) != 0 ||
		!strings.Contains(d.Message, "db-1, db-2 restarted since db-0 was last seen") {
		t.Fatalf("restarted candidates: %s restart %q plan %v (%s); want waiting for db-0", d.State, d.RestartLostPrimary, steps(d), d.Message)
	}
	accepted := v
	accepted.AcceptLossFrom = "db-0"
	if d := Decide(accepted); d.State != StateFailover || d.Primary != "db-2" {
		t.Fatalf("loss accepted: %s primary %s (%s); want db-2 promoted", d.State, d.Primary, d.Message)
	}
	// Replicas that ran all along (the primary alone was lost a second after it was seen):
	// the failover goes on.
	steady := v
	steady.Instances = cluster("db-0", inst(0).down(),
		up(inst(1).executed("0-1-160810").replicaOf(0, "0-1-160810").ioStopped(), 72*time.Hour),
		up(inst(2).executed("0-1-160816").replicaOf(0, "0-1-160816").ioStopped(), 72*time.Hour)).Instances
	steady.PrimarySeenAt = now.Add(-time.Second)
	if d := Decide(steady); d.State != StateFailover || d.Primary != "db-2" {
		t.Fatalf("replicas that did not restart: %s primary %s (%s); want db-2 promoted", d.State, d.Primary, d.Message)
	}
	// A replica restarted about half a second after the primary was last seen: its uptime reads
	// 1 s (whole seconds, rounded down) for a true uptime of 1.0–1.99 s, whatever the cycle's
	// alignment it may have started after the primary's last answer, so the failover waits.
	for _, seen := range []time.Duration{1100 * time.Millisecond, 1500 * time.Millisecond, 1900 * time.Millisecond} {
		justAfter := steady
		justAfter.Instances = slices.Clone(steady.Instances)
		justAfter.Instances[1] = up(inst(1).executed("0-1-160810").replicaOf(0, "0-1-160810").ioStopped(), time.Second).v
		justAfter.PrimarySeenAt = now.Add(-seen)
		if d := Decide(justAfter); d.State != StatePrimaryLost || d.RestartLostPrimary != "db-0" {
			t.Fatalf("uptime 1 s, primary last seen %s ago: %s primary %s (%s); want waiting for db-0", seen, d.State, d.Primary, d.Message)
		}
	}
	// A replica restarted an hour ago, the primary seen a second ago: not since.
	earlier := steady
	earlier.Instances[1] = up(inst(1).executed("0-1-160810").replicaOf(0, "0-1-160810").ioStopped(), time.Hour).v
	if d := Decide(earlier); d.State != StateFailover || d.Primary != "db-2" {
		t.Fatalf("a restart before the primary was last seen: %s primary %s (%s)", d.State, d.Primary, d.Message)
	}
}
