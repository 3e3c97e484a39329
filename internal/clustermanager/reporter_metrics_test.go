package clustermanager

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
	"github.com/dolphin-operator/dolphin/internal/metrics"
	"github.com/dolphin-operator/dolphin/internal/topology"
)

// The per-instance series follow what the engine observed: replicating and lag for replicas
// only (none for the primary or an errant instance stopped on purpose), no frozen lag once the
// server stops knowing it, and none for an instance gone — also across an engine restart (a
// scale-down restarts the engine with a new reporter).
func TestReporterInstanceMetrics(t *testing.T) {
	ns, name := "metrics-test", "db"
	defer metrics.ForgetCluster(ns, name)
	replica := func(lag *int64, running bool) *dbsql.Status {
		return &dbsql.Status{Replica: &dbsql.ReplicaStatus{IORunning: running, SQLRunning: running, SecondsBehindSource: lag}}
	}
	r := &reporter{key: types.NamespacedName{Namespace: ns, Name: name}}
	r.metrics(topology.Report{Decision: topology.Decision{Primary: "db-0", Errant: map[string]bool{"db-3": true}}, Instances: []topology.InstanceView{
		{Name: "db-0", Status: &dbsql.Status{}},
		{Name: "db-1", Status: replica(ptr.To[int64](4), true)},
		{Name: "db-2", Status: replica(ptr.To[int64](9), true)},
		{Name: "db-3", Status: replica(nil, false)},
	}})
	if n := testutil.CollectAndCount(metrics.InstanceReplicating); n < 2 {
		t.Fatalf("%d replicating series", n)
	}
	check := func(what string, got, want float64) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	check("db-1 replicating", testutil.ToFloat64(metrics.InstanceReplicating.WithLabelValues(ns, name, "db-1")), 1)
	check("db-2 lag", testutil.ToFloat64(metrics.ReplicationLag.WithLabelValues(ns, name, "db-2")), 9)
	check("db-0 up", testutil.ToFloat64(metrics.InstanceUp.WithLabelValues(ns, name, "db-0")), 1)
	if metrics.InstanceReplicating.DeleteLabelValues(ns, name, "db-0") || metrics.InstanceReplicating.DeleteLabelValues(ns, name, "db-3") {
		t.Error("a replicating series for the primary or the errant instance")
	}

	// db-2 stops (lag unknown), db-1 is unreachable.
	r.metrics(topology.Report{Decision: topology.Decision{Primary: "db-0"}, Instances: []topology.InstanceView{
		{Name: "db-0", Status: &dbsql.Status{}},
		{Name: "db-1"},
		{Name: "db-2", Status: replica(nil, false)},
	}})
	check("db-1 up", testutil.ToFloat64(metrics.InstanceUp.WithLabelValues(ns, name, "db-1")), 0)
	check("db-1 replicating", testutil.ToFloat64(metrics.InstanceReplicating.WithLabelValues(ns, name, "db-1")), 0)
	check("db-2 replicating", testutil.ToFloat64(metrics.InstanceReplicating.WithLabelValues(ns, name, "db-2")), 0)
	if metrics.ReplicationLag.DeleteLabelValues(ns, name, "db-2") {
		t.Error("db-2's lag froze at its last value after replication stopped")
	}

	// A scale-down: the engine restarts with a new reporter that knows what the old published.
	r2 := &reporter{key: r.key, metricInstances: r.metricInstances}
	r2.metrics(topology.Report{Decision: topology.Decision{Primary: "db-0"}, Instances: []topology.InstanceView{
		{Name: "db-0", Status: &dbsql.Status{}},
		{Name: "db-1", Status: replica(ptr.To[int64](0), true)},
	}})
	if metrics.InstanceUp.DeleteLabelValues(ns, name, "db-2") || metrics.InstanceReplicating.DeleteLabelValues(ns, name, "db-2") {
		t.Error("the removed db-2 still has series")
	}
}
