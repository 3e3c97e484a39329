package clustermanager

import (
	"testing"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
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
