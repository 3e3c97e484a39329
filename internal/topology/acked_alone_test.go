package topology

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSemiSyncTimeoutFollowsDurability: the primary's semi-sync timeout is set to what
// spec.durability asks for, whatever the server started with.
func TestSemiSyncTimeoutFollowsDurability(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ackAlone bool
		has      int64
		want     []string
	}{
		{"Required, started with my.cnf's 30 s", false, 30000, []string{"SemiSyncTimeout(db-0)"}},
		{"Required, already never", false, semiSyncNeverMS, nil},
		{"Preferred, 30 s", true, 30000, nil},
		{"Preferred after Required", true, semiSyncNeverMS, []string{"SemiSyncTimeout(db-0)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := healthy3()
			v.Settings.AckAlone = tc.ackAlone
			v.Instances[0].Status.SemiSync.TimeoutMS = tc.has
			if d := Decide(v); !slices.Equal(steps(d), tc.want) {
				t.Fatalf("plan %v, want %v (%s)", steps(d), tc.want, d.Message)
			}
		})
	}
	if got := (Settings{}).SemiSyncTimeoutMS(); got != 4294967295 {
		t.Fatalf("Required timeout %d ms", got)
	}
	if got := (Settings{AckAlone: true}).SemiSyncTimeoutMS(); got != 30000 {
		t.Fatalf("Preferred timeout %d ms", got)
	}
}

// TestAckedAloneIsRecordedAndHeldUntilAReplicaHasIt follows a fallback: recorded with the
// primary's position, moved forward while it lasts, kept after semi-sync is back until a
// replica holds it.
func TestAckedAloneIsRecordedAndHeldUntilAReplicaHasIt(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
	fallback := func(primaryAt, replicasAt string) ClusterView {
		v := cluster("db-0", inst(0).writable().executed(primaryAt),
			inst(1).executed(replicasAt).replicaOf(0, replicasAt), inst(2).executed(replicasAt).replicaOf(0, replicasAt))
		v.Instances[0].Status.SemiSync.SourceActive = false
		v.Settings.AckAlone = true
		v.Now = t0
		return v
	}
	d := Decide(fallback("0-1-20", "0-1-10"))
	a := d.AckedAlone
	if a == nil || a.Primary != "db-0" || !gtid("0-1-20").Equal(a.UpTo) || !a.Since.Equal(t0) || !d.SemiSyncFallback {
		t.Fatalf("fallback: record %+v, fallback %v", a, d.SemiSyncFallback)
	}
	if !strings.Contains(d.Message, "acknowledges writes no replica has received") {
		t.Fatalf("message %q", d.Message)
	}
	// Still falling back later: the record moves forward, keeping its start.
	later := fallback("0-1-30", "0-1-10")
	later.AckedAlone, later.Now = a, t0.Add(time.Minute)
	a = Decide(later).AckedAlone
	if a == nil || !gtid("0-1-30").Equal(a.UpTo) || !a.Since.Equal(t0) {
		t.Fatalf("later: record %+v", a)
	}
	// Semi-sync active again, the replicas still behind: kept.
	back := cluster("db-0", inst(0).writable().executed("0-1-31"),
		inst(1).executed("0-1-25").replicaOf(0, "0-1-25"), inst(2).down())
	back.AckedAlone = a
	if b := Decide(back).AckedAlone; b != a {
		t.Fatalf("replicas behind: record %+v, want it kept", b)
	}
	// A replica received everything: dropped.
	caught := cluster("db-0", inst(0).writable().executed("0-1-31"),
		inst(1).executed("0-1-25").replicaOf(0, "0-1-31"), inst(2).down())
	caught.AckedAlone = a
	if b := Decide(caught).AckedAlone; b != nil {
		t.Fatalf("a replica holds it: record %+v, want none", b)
	}
	// The primary does not answer: kept, whatever the replicas show.
	lost := cluster("db-0", inst(0).down(), inst(1).executed("0-1-10").replicaOf(0, "0-1-10"), inst(2).executed("0-1-10").replicaOf(0, "0-1-10"))
	lost.AckedAlone = a
	if b := Decide(lost).AckedAlone; b != a {
		t.Fatalf("primary lost: record %+v, want it kept", b)
	}
	// The primary restarted and rolled back a tail nobody acknowledged: UpTo follows it down.
	rolled := cluster("db-0", inst(0).writable().executed("0-1-28"),
		inst(1).executed("0-1-25").replicaOf(0, "0-1-25"), inst(2).down())
	rolled.AckedAlone = a
	if b := Decide(rolled).AckedAlone; b == nil || !gtid("0-1-28").Equal(b.UpTo) {
		t.Fatalf("rolled back: record %+v, want up to 0-1-28", b)
	}
	// Scaled to a single instance: it acknowledges alone by nature, the record goes.
	one := cluster("db-0", inst(0).writable().executed("0-1-5"))
	one.Instances[0].Status.SemiSync.SourceEnabled, one.Instances[0].Status.SemiSync.SourceActive = false, false
	one.AckedAlone = a
	if b := Decide(one).AckedAlone; b != nil {
		t.Fatalf("single instance: record %+v", b)
	}
}

// TestStallRestartRecordsAckedAlone: restarting the source side to end a stall may release a
// commit that began to wait in between, so it is recorded like a fallback.
func TestStallRestartRecordsAckedAlone(t *testing.T) {
	v := healthy3()
	v.Instances[0].Status.Executed = gtid("0-1-11")
	ss := &v.Instances[0].Status.SemiSync
	ss.Clients, ss.StalledDumps = 0, 1
	d := Decide(v)
	if !slices.Contains(steps(d), "RestartSemiSyncSource(db-0)") || d.AckedAlone == nil || !gtid("0-1-11").Equal(d.AckedAlone.UpTo) || !d.AckedAlone.Refresh {
		t.Fatalf("plan %v, record %+v", steps(d), d.AckedAlone)
	}
	// The restart released 0-1-12, which no replica has yet: the next observation takes it in
	// and keeps the record, although the replicas hold the old UpTo.
	next := healthy3()
	next.Instances[0].Status.Executed = gtid("0-1-12")
	next.Instances[1].Status.Replica.Received, next.Instances[2].Status.Replica.Received = gtid("0-1-11"), gtid("0-1-11")
	next.AckedAlone = d.AckedAlone
	b := Decide(next).AckedAlone
	if b == nil || !gtid("0-1-12").Equal(b.UpTo) || b.Refresh {
		t.Fatalf("after the restart: record %+v, want up to 0-1-12", b)
	}
	// A replica received it: dropped.
	caught := healthy3()
	caught.Instances[0].Status.Executed, caught.Instances[1].Status.Replica.Received = gtid("0-1-12"), gtid("0-1-12")
	caught.AckedAlone = b
	if c := Decide(caught).AckedAlone; c != nil {
		t.Fatalf("a replica holds it: record %+v", c)
	}
}

// TestFailoverWaitsForWritesAcknowledgedAlone: a lost primary that acknowledged writes alone
// is waited for (and restarted) while no candidate holds them; a person's consent promotes the
// best candidate, and the loss is described; a candidate that holds them is promoted at once.
func TestFailoverWaitsForWritesAcknowledgedAlone(t *testing.T) {
	since := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
	record := &AckedAlone{Primary: "db-0", UpTo: gtid("0-1-20"), Since: since}
	fenced := func(received string) ClusterView {
		v := cluster("db-0", inst(0).down(),
			inst(1).executed("0-1-10").replicaOf(0, received).ioStopped(), inst(2).executed("0-1-10").replicaOf(0, "0-1-10").ioStopped())
		v.PrimaryMisses = 5
		v.Failover = &FailoverProgress{From: "db-0", Fenced: true, Received: gtid(received), ReceivedBy: "db-1"}
		v.AckedAlone = record
		return v
	}
	d := Decide(fenced("0-1-12"))
	if d.State != StatePrimaryLost || len(d.Plan) != 0 || d.RestartLostPrimary != "db-0" || d.Primary != "db-0" {
		t.Fatalf("waits: %s plan %v restart %q primary %s (%s)", d.State, steps(d), d.RestartLostPrimary, d.Primary, d.Message)
	}
	for _, want := range []string{"acknowledged writes alone since 2026-12-05T01:00:00Z", "0-1-20", "mysql.dolphin.dev/failover-accept-loss=db-0"} {
		if !strings.Contains(d.Message, want) {
			t.Fatalf("message %q lacks %q", d.Message, want)
		}
	}
	if d.AckedAlone != record {
		t.Fatalf("record %+v, want it kept while waiting", d.AckedAlone)
	}

	consent := fenced("0-1-12")
	consent.AcceptLossFrom = "db-0"
	d = Decide(consent)
	if d.Primary != "db-1" || !slices.Contains(steps(d), "Promote(db-1 semisync=true)") {
		t.Fatalf("consent: primary %s plan %v (%s)", d.Primary, steps(d), d.Message)
	}
	if !strings.Contains(d.LossAccepted, "acknowledged alone since 2026-12-05T01:00:00Z (up to 0-1-20; db-1 has 0-1-12)") || d.AckedAlone != nil {
		t.Fatalf("consent: loss %q, record %+v", d.LossAccepted, d.AckedAlone)
	}

	holder := fenced("0-1-20")
	d = Decide(holder)
	if d.Primary != "db-1" || d.LossAccepted != "" || d.AckedAlone != nil {
		t.Fatalf("a candidate holds it: primary %s loss %q record %+v (%s)", d.Primary, d.LossAccepted, d.AckedAlone, d.Message)
	}
}

// healthy3 is a primary and two replicas that hold everything.
func healthy3() ClusterView {
	return cluster("db-0",
		inst(0).writable().executed("0-1-10"),
		inst(1).executed("0-1-10").replicaOf(0, "0-1-10"),
		inst(2).executed("0-1-10").replicaOf(0, "0-1-10"))
}

// TestReplacedPrimaryIsRememberedUntilPrimaryAgain: an unplanned failover remembers the primary
// it replaced — back errant, or back replicating (MariaDB compares sequence numbers: a diverged
// history can replicate until error 1236), it stays remembered; primary again, it is forgotten.
func TestReplacedPrimaryIsRememberedUntilPrimaryAgain(t *testing.T) {
	v := cluster("db-0", inst(0).down(),
		inst(1).executed("0-1-10").replicaOf(0, "0-1-10").ioStopped(), inst(2).executed("0-1-10").replicaOf(0, "0-1-10").ioStopped())
	v.PrimaryMisses = 5
	v.Failover = &FailoverProgress{From: "db-0", Fenced: true, Received: gtid("0-1-10"), ReceivedBy: "db-1"}
	d := Decide(v)
	if d.Primary == "db-0" || !d.Replaced["db-0"] {
		t.Fatalf("failover: primary %s, replaced %v (%s)", d.Primary, d.Replaced, d.Message)
	}
	// db-0 back with a write db-1 lacks: errant, still remembered.
	back := cluster("db-1", inst(0).executed("0-1-11"), inst(1).writable().executed("0-1-10"), inst(2).executed("0-1-10").replicaOf(1, "0-1-10"))
	back.Replaced = d.Replaced
	d = Decide(back)
	if !d.Errant["db-0"] || !d.Replaced["db-0"] {
		t.Fatalf("errant former primary: errant %v replaced %v (%s)", d.Errant, d.Replaced, d.Message)
	}
	// db-0 replicating from db-1: still remembered.
	replicating := cluster("db-1", inst(0).executed("0-1-10").replicaOf(1, "0-1-10"), inst(1).writable().executed("0-1-10"), inst(2).executed("0-1-10").replicaOf(1, "0-1-10"))
	replicating.Replaced = map[string]bool{"db-0": true}
	if d = Decide(replicating); !d.Replaced["db-0"] {
		t.Fatalf("replicating: replaced %v", d.Replaced)
	}
	// db-0 the primary again: forgotten.
	again := cluster("db-0", inst(0).writable().executed("0-1-10"), inst(1).executed("0-1-10").replicaOf(0, "0-1-10"), inst(2).executed("0-1-10").replicaOf(0, "0-1-10"))
	again.Replaced = map[string]bool{"db-0": true}
	if d = Decide(again); d.Replaced["db-0"] {
		t.Fatalf("primary again: replaced %v", d.Replaced)
	}
}

// TestCommitsWaitingAreReported: commits waiting for an acknowledgement are a problem of their
// own, seen even while the primary still counts its replicas as connected.
func TestCommitsWaitingAreReported(t *testing.T) {
	v := healthy3()
	v.Instances[0].Status.SemiSync.WaitingCommits = 2
	d := Decide(v)
	if !d.CommitsWaiting || d.NoSemiSyncReplica || d.State != StateDegraded || !strings.Contains(d.Message, "2 commit(s) on db-0 have waited") {
		t.Fatalf("waiting %v, no replica %v, %s (%s)", d.CommitsWaiting, d.NoSemiSyncReplica, d.State, d.Message)
	}
	if d := Decide(healthy3()); d.CommitsWaiting {
		t.Fatal("a healthy cluster reports waiting commits")
	}
}
