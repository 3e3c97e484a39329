package clustermanager

import (
	"testing"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/dbsql"
	"github.com/dolphin-operator/dolphin/internal/topology"
)

// TestSwitchoverSurvivesStatus: the engine's pending switchover goes into status.topology and
// comes back from it into the state a new engine starts from (an operator restarted in the
// middle of a switchover resumes it), and a finished one leaves nothing behind.
func TestSwitchoverSurvivesStatus(t *testing.T) {
	for _, sw := range []*topology.SwitchoverRequest{nil, {To: ""}, {To: "db-2"}, {To: "db-2", Fenced: true, From: "db-0"}} {
		st := topologyStatus(nil, topology.Report{Persisted: topology.Persisted{Primary: "db-0", Switchover: sw}})
		got := persisted(&dolphinv1.MySQLCluster{Status: dolphinv1.MySQLClusterStatus{Topology: st}}).Switchover
		switch {
		case sw == nil && (got != nil || st.SwitchoverInProgress != nil):
			t.Errorf("no switchover pending: status %+v, restored %+v", st.SwitchoverInProgress, got)
		case sw != nil && (got == nil || *got != *sw):
			t.Errorf("pending %+v: status %+v, restored %+v", *sw, st.SwitchoverInProgress, got)
		}
	}
}

// TestFailoverRecordSurvivesStatus: what the candidates of a running failover received goes
// into status.topology and comes back into the state a restarted operator's engine starts
// from — the record that keeps a candidate holding less from being promoted must not be lost
// with the operator.
func TestFailoverRecordSurvivesStatus(t *testing.T) {
	received, err := dbsql.ParseMariaDBGTID("0-1-12,1-2-7")
	if err != nil {
		t.Fatal(err)
	}
	f := &topology.FailoverProgress{From: "db-0", Fenced: true, Received: received, ReceivedBy: "db-1"}
	st := topologyStatus(nil, topology.Report{Persisted: topology.Persisted{Primary: "db-0", Failover: f}})
	c := &dolphinv1.MySQLCluster{Status: dolphinv1.MySQLClusterStatus{Topology: st}}
	c.Spec.Engine.Flavor = dolphinv1.FlavorMariaDB
	got := persisted(c).Failover
	if got == nil || got.From != "db-0" || !got.Fenced || got.ReceivedBy != "db-1" || got.Received == nil || !got.Received.Equal(received) {
		t.Fatalf("failover %+v: status %+v, restored %+v", *f, st.FailoverInProgress, got)
	}
	if st.FailoverInProgress.Received != "0-1-12,1-2-7" {
		t.Errorf("status.topology.failoverInProgress.received = %q, want the GTID set", st.FailoverInProgress.Received)
	}
}

// TestFailoverTailSurvivesStatus: what the last failover promoted that not every replica
// holds yet is in status and comes back to a restarted operator, which still refuses to
// promote an instance without it (docs/design/0039).
func TestFailoverTailSurvivesStatus(t *testing.T) {
	received, err := dbsql.ParseMariaDBGTID("0-1002-144988")
	if err != nil {
		t.Fatal(err)
	}
	tail := &topology.FailoverTail{From: "db-2", Received: received, HeldBy: "db-0"}
	st := topologyStatus(nil, topology.Report{Persisted: topology.Persisted{Primary: "db-0", Tail: tail}})
	if st.FailoverTail == nil || st.FailoverTail.Received != "0-1002-144988" || st.FailoverTail.HeldBy != "db-0" || st.FailoverTail.From != "db-2" {
		t.Fatalf("status.topology.failoverTail = %+v", st.FailoverTail)
	}
	c := &dolphinv1.MySQLCluster{Status: dolphinv1.MySQLClusterStatus{Topology: st}}
	c.Spec.Engine.Flavor = dolphinv1.FlavorMariaDB
	got := persisted(c).Tail
	if got == nil || got.From != "db-2" || got.HeldBy != "db-0" || !got.Received.Equal(received) {
		t.Fatalf("restored tail %+v, want %+v", got, *tail)
	}
	if st := topologyStatus(nil, topology.Report{Persisted: topology.Persisted{Primary: "db-0"}}); st.FailoverTail != nil {
		t.Errorf("no tail, yet status has %+v", st.FailoverTail)
	}
}

// TestSwitchoverRequestIDSurvivesStatus: the id of the last switchover request accepted by
// annotation is in every status the engine writes and comes back to a restarted operator.
func TestSwitchoverRequestIDSurvivesStatus(t *testing.T) {
	st := topologyStatus(nil, topology.Report{Persisted: topology.Persisted{Primary: "db-2", LastSwitchoverRequest: "req-1"}})
	if st.LastSwitchoverRequest != "req-1" {
		t.Fatalf("status.topology.lastSwitchoverRequest = %q", st.LastSwitchoverRequest)
	}
	if got := persisted(&dolphinv1.MySQLCluster{Status: dolphinv1.MySQLClusterStatus{Topology: st}}); got.LastSwitchoverRequest != "req-1" {
		t.Errorf("restored %q", got.LastSwitchoverRequest)
	}
}
