package clustermanager

import (
	"testing"
	"time"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/dbsql"
	"github.com/dolphin-operator/dolphin/internal/topology"
)

// status.topology.externalSource says how the primary replicates from the source while the
// cluster follows it, and keeps the cutover's record for good once it is cut over (every later
// engine reads it back and never follows the source again).
func TestExternalReplicationStatus(t *testing.T) {
	lag := int64(4)
	following := topology.Report{External: "old-db:3306", Persisted: topology.Persisted{Primary: "db-0"},
		Instances: []topology.InstanceView{{Name: "db-0", Status: &dbsql.Status{ReadOnly: true, Replica: &dbsql.ReplicaStatus{
			SourceHost: "old-db", SourcePort: 3306, IORunning: true, SQLRunning: true, SecondsBehindSource: &lag}}}}}
	x := externalReplication(following)
	if x == nil || x.Instance != "db-0" || !x.Replicating || x.LagSeconds == nil || *x.LagSeconds != 4 || x.CutOver != nil {
		t.Fatalf("following: %+v", x)
	}
	elsewhere := following
	elsewhere.Instances = []topology.InstanceView{{Name: "db-0", Status: &dbsql.Status{ReadOnly: true, Replica: &dbsql.ReplicaStatus{SourceHost: "db-1", SourcePort: 3306}}}}
	if x := externalReplication(elsewhere); x == nil || x.Instance != "" || x.Replicating {
		t.Errorf("a primary replicating from elsewhere reported as following: %+v", x)
	}
	at := time.Unix(1000, 0)
	cut := topology.Report{Persisted: topology.Persisted{Primary: "db-0", Cutover: &topology.CutoverRecord{Source: "old-db:3306", Instance: "db-0",
		At: at, Position: "0-9-100", Pause: 40 * time.Millisecond}}}
	x = externalReplication(cut)
	if x == nil || x.CutOver == nil || x.CutOver.Position != "0-9-100" || x.CutOver.WritePauseMilliseconds != 40 || x.Source != "old-db:3306" {
		t.Fatalf("cut over: %+v", x)
	}
	if p := persistedFromTopology(t, x); p.Cutover == nil || p.Cutover.Position != "0-9-100" || p.Cutover.Pause != 40*time.Millisecond {
		t.Errorf("the record read back: %+v", p.Cutover)
	}
}

// persistedFromTopology is what an engine started on a cluster whose status holds x reads back.
func persistedFromTopology(t *testing.T, x *dolphinv1.ExternalReplication) topology.Persisted {
	t.Helper()
	c := &dolphinv1.MySQLCluster{}
	c.Status.Topology = &dolphinv1.TopologyStatus{Primary: "db-0", ExternalSource: x}
	return persisted(c)
}
