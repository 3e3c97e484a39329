// Package metrics defines Dolphin's Prometheus metrics. They are registered with
// controller-runtime's registry, so the operator's secure metrics endpoint serves them next
// to the controller-runtime and client-go metrics.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Reconcile results counted by ReconcileTotal.
const (
	ResultSuccess = "success"
	ResultError   = "error"
	ResultRequeue = "requeue"
)

var (
	// ReconcileTotal counts MySQLCluster reconciles by result (success, error, requeue).
	ReconcileTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mysql_operator_reconcile_total",
		Help: "MySQLCluster reconciles by result (success, error, requeue).",
	}, []string{"result"})

	// ClusterHealth is 1 when a MySQLCluster is Ready, 0 otherwise.
	ClusterHealth = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mysql_cluster_health_status",
		Help: "1 when the MySQLCluster is Ready (primary writable, every instance ready), 0 otherwise.",
	}, []string{"namespace", "name"})
)

func init() {
	crmetrics.Registry.MustRegister(ReconcileTotal, ClusterHealth)
	for _, r := range []string{ResultSuccess, ResultError, ResultRequeue} {
		ReconcileTotal.WithLabelValues(r) // export zeroes so rate() works from the start
	}
}

// ForgetCluster removes the per-cluster series of a deleted cluster.
func ForgetCluster(namespace, name string) {
	ClusterHealth.DeleteLabelValues(namespace, name)
}
