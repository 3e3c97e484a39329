package topology

import (
	"testing"
)

func (b *ib) stopping() *ib { b.v.Stopping = true; return b }

// TestFailoverPrefersACandidateNotStopping checks which candidate a fenced failover promotes
// when a candidate's pod is being deleted: another one that holds as much, else the stopping
// one (it alone holds those writes, and promoting it keeps them in its binary log).
func TestFailoverPrefersACandidateNotStopping(t *testing.T) {
	for _, tc := range []struct {
		name       string
		db1, db2   *ib
		wantWinner string
	}{
		{"same received, db-1 stopping: db-2",
			inst(1).executed("0-1-10").replicaOf(0, "0-1-10").ioStopped().stopping(),
			inst(2).executed("0-1-10").replicaOf(0, "0-1-10").ioStopped(), "db-2"},
		{"db-1 stopping received more: db-1 still",
			inst(1).executed("0-1-10").replicaOf(0, "0-1-12").ioStopped().stopping(),
			inst(2).executed("0-1-10").replicaOf(0, "0-1-10").ioStopped(), "db-1"},
		{"both stopping: the most advanced",
			inst(1).executed("0-1-10").replicaOf(0, "0-1-12").ioStopped().stopping(),
			inst(2).executed("0-1-10").replicaOf(0, "0-1-10").ioStopped().stopping(), "db-1"},
		{"nobody stopping: the most advanced",
			inst(1).executed("0-1-10").replicaOf(0, "0-1-10").ioStopped(),
			inst(2).executed("0-1-10").replicaOf(0, "0-1-12").ioStopped(), "db-2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := cluster("db-0", inst(0).down(), tc.db1, tc.db2)
			v.PrimaryMisses = 5
			v.Failover = &FailoverProgress{From: "db-0", Fenced: true}
			d := Decide(v)
			if d.State != StateFailover || d.Primary != tc.wantWinner {
				t.Fatalf("%s promoted %q (%s: %s), want %s", tc.name, d.Primary, d.State, d.Message, tc.wantWinner)
			}
		})
	}
}

// TestSwitchoverNeverChoosesAStoppingReplica: a replica whose pod is being deleted is no
// healthy replica for a switchover — not as the most advanced, not when named.
func TestSwitchoverNeverChoosesAStoppingReplica(t *testing.T) {
	view := func(to string) ClusterView {
		v := cluster("db-0", inst(0).writable().executed("0-1-12"),
			inst(1).executed("0-1-12").replicaOf(0, "0-1-12").stopping(),
			inst(2).executed("0-1-11").replicaOf(0, "0-1-11"))
		v.Switchover = &SwitchoverRequest{To: to}
		return v
	}
	if d := Decide(view("")); d.Switchover == nil || d.Switchover.To != "db-2" {
		t.Fatalf("auto switchover chose %+v (%s), want db-2", d.Switchover, d.Message)
	}
	if d := Decide(view("db-1")); d.State == StateSwitchover || d.Switchover == nil || d.Switchover.Fenced {
		t.Fatalf("switchover to the stopping db-1: %s %+v (%s), want it kept waiting, unfenced", d.State, d.Switchover, d.Message)
	}
}
