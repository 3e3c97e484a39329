// Package metrics defines Dolphin's Prometheus metrics. They are registered with
// controller-runtime's registry, so the operator's secure metrics endpoint serves them next
// to the controller-runtime and client-go metrics.
package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

	// ClusterState is 1 for the health state the MySQLCluster is in and 0 for the others
	// (ClusterStates; see SetClusterState): an alert on state="degraded" or "failed" fires on
	// trouble, never on planned work.
	ClusterState = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mysql_cluster_state",
		Help: "1 for the MySQLCluster's state, 0 for the others: healthy (phase Running), progressing (planned work: starting, a rollout, a switchover), degraded (lost redundancy or protection), failed (needs a change by the user).",
	}, []string{"namespace", "name", "state"})

	// PromotionsTotal counts changes of primary by kind (failover, switchover).
	PromotionsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mysql_cluster_promotions_total",
		Help: "Changes of primary by kind (failover, switchover).",
	}, []string{"namespace", "name", "kind"})

	// FailoverDuration observes the time from the first missed observation of a lost primary
	// to a writable new primary.
	FailoverDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "mysql_cluster_failover_duration_seconds",
		Help:    "Time from the first missed observation of the lost primary to a writable new primary.",
		Buckets: []float64{0.25, 0.5, 1, 2, 3, 5, 8, 13, 21, 34, 60},
	}, []string{"namespace", "name"})

	// ReplicationLag is a replica's Seconds_Behind_Master.
	ReplicationLag = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mysql_cluster_replication_lag_seconds",
		Help: "Seconds_Behind_Master of each replica, as last observed.",
	}, []string{"namespace", "name", "instance"})

	// EngineErrors counts failures of the topology engine by stage: "plan" (a step of a
	// decided plan failed), "status", "service" (the primary Service's selector), "labels"
	// and "restart" (the reporter could not write to Kubernetes what the engine decided).
	EngineErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mysql_cluster_engine_errors_total",
		Help: "Topology engine failures by stage (plan, status, service, labels, restart).",
	}, []string{"namespace", "name", "stage"})
	// SemiSyncFallback is 1 while the primary's semi-sync replication fell back to async.
	SemiSyncFallback = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mysql_cluster_semisync_fallback",
		Help: "1 while the primary no longer waits for replica acknowledgements (semi-sync fell back to async).",
	}, []string{"namespace", "name"})
	// WritesAtRisk is 1 while writes the primary acknowledged may exist on one server only
	// (status.topology.acknowledgedAlone).
	WritesAtRisk = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mysql_cluster_acknowledged_writes_on_one_server",
		Help: "1 while writes the primary acknowledged may exist on that server only (no replica holds them yet).",
	}, []string{"namespace", "name"})
	// WritesWaiting is 1 while the primary's commits wait for a replica's acknowledgement.
	WritesWaiting = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mysql_cluster_writes_waiting_for_replica",
		Help: "1 while no replica is connected to acknowledge the primary's writes, so commits wait (or, with durability Preferred, are acknowledged alone after 30 s).",
	}, []string{"namespace", "name"})

	// BackupLastSuccess is the completion time of the cluster's newest successful backup.
	BackupLastSuccess = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mysql_cluster_backup_last_success_timestamp_seconds",
		Help: "Unix time the newest successful backup of the cluster completed.",
	}, []string{"namespace", "name"})
	// BackupLastDuration is how long the newest successful backup took.
	BackupLastDuration = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mysql_cluster_backup_last_duration_seconds",
		Help: "Duration of the newest successful backup of the cluster.",
	}, []string{"namespace", "name"})
	// BackupLastSize is what the newest successful backup stored (compressed).
	BackupLastSize = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mysql_cluster_backup_last_size_bytes",
		Help: "Bytes stored (compressed) by the newest successful backup of the cluster.",
	}, []string{"namespace", "name"})
	// ArchiveLag is how long the primary has had transactions not in the binlog archive.
	ArchiveLag = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mysql_cluster_binlog_archive_lag_seconds",
		Help: "How long the primary has had transactions not in the binlog archive (0 when it has everything).",
	}, []string{"namespace", "name"})
	// ArchiveLastUpload is when the binlog archiver last stored a segment.
	ArchiveLastUpload = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mysql_cluster_binlog_archive_last_upload_timestamp_seconds",
		Help: "Unix time the binlog archiver last stored a segment.",
	}, []string{"namespace", "name"})
	// ArchiveUp is 1 while continuous archiving works.
	ArchiveUp = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mysql_cluster_binlog_archive_up",
		Help: "1 while the ContinuousArchiving condition is True, 0 while it is False.",
	}, []string{"namespace", "name"})
	// CertificateExpiry is when the instances' TLS certificate expires.
	CertificateExpiry = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mysql_cluster_tls_certificate_expiry_timestamp_seconds",
		Help: "Unix time the instances' TLS certificate expires (no series while TLS is off).",
	}, []string{"namespace", "name"})
	// Condition is 1 for each condition of a MySQLCluster, with its status and reason (as
	// kube-state-metrics exports pod conditions): alerts match a reason, such as
	// LastBackupSucceeded False BackupOverdue, without a metric of their own.
	Condition = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mysql_cluster_condition",
		Help: "1 for each condition of the MySQLCluster, labelled with its type, status (True, False, Unknown) and reason.",
	}, []string{"namespace", "name", "type", "status", "reason"})
	// InstanceUp is 1 while the topology engine reaches an instance's server.
	InstanceUp = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mysql_cluster_instance_up",
		Help: "1 while the topology engine reaches the instance's server, 0 while it does not.",
	}, []string{"namespace", "name", "instance"})
	// InstanceReplicating is 1 while a non-primary instance's replication threads both run.
	InstanceReplicating = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mysql_cluster_instance_replicating",
		Help: "For each instance but the primary: 1 while its replication IO and SQL threads both run, 0 otherwise (also when unreachable).",
	}, []string{"namespace", "name", "instance"})

	// BackupFailures counts backups that ended Failed.
	BackupFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mysql_cluster_backup_failures_total",
		Help: "Backups of the cluster that failed (no manifest written).",
	}, []string{"namespace", "name"})
)

// Collectors are every metric of this package, as registered.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{ReconcileTotal, ClusterHealth, ClusterState, PromotionsTotal, FailoverDuration, ReplicationLag, SemiSyncFallback, WritesAtRisk, WritesWaiting, EngineErrors,
		BackupLastSuccess, BackupLastDuration, BackupLastSize, BackupFailures, ArchiveLag, ArchiveLastUpload, ArchiveUp, CertificateExpiry,
		Condition, InstanceUp, InstanceReplicating}
}

func init() {
	crmetrics.Registry.MustRegister(Collectors()...)
	for _, r := range []string{ResultSuccess, ResultError, ResultRequeue} {
		ReconcileTotal.WithLabelValues(r) // export zeroes so rate() works from the start
	}
}

// ForgetCluster removes the per-cluster series of a deleted cluster.
func ForgetCluster(namespace, name string) {
	ClusterHealth.DeleteLabelValues(namespace, name)
	ClusterState.DeletePartialMatch(map[string]string{"namespace": namespace, "name": name})
	SemiSyncFallback.DeleteLabelValues(namespace, name)
	WritesAtRisk.DeleteLabelValues(namespace, name)
	WritesWaiting.DeleteLabelValues(namespace, name)
	FailoverDuration.DeleteLabelValues(namespace, name)
	match := map[string]string{"namespace": namespace, "name": name}
	PromotionsTotal.DeletePartialMatch(match)
	EngineErrors.DeletePartialMatch(match)
	ReplicationLag.DeletePartialMatch(match)
	conditionsMu.Lock()
	Condition.DeletePartialMatch(match)
	delete(conditionSeries, namespace+"/"+name)
	conditionsMu.Unlock()
	InstanceUp.DeletePartialMatch(match)
	InstanceReplicating.DeletePartialMatch(match)
	BackupLastSuccess.DeleteLabelValues(namespace, name)
	BackupLastDuration.DeleteLabelValues(namespace, name)
	BackupLastSize.DeleteLabelValues(namespace, name)
	BackupFailures.DeleteLabelValues(namespace, name)
	CertificateExpiry.DeleteLabelValues(namespace, name)
	ForgetArchive(namespace, name)
}

// ExportPromotionCounters exports both kinds of promotion at 0 for a cluster, so that its first
// failover is an increase a rule sees (a counter born at 1 has not increased).
func ExportPromotionCounters(namespace, name string) {
	for _, kind := range []string{"failover", "switchover"} {
		PromotionsTotal.WithLabelValues(namespace, name, kind)
	}
}

// ForgetInstance removes the series of an instance no longer in the cluster (scaled down).
func ForgetInstance(namespace, name, instance string) {
	labels := map[string]string{"namespace": namespace, "name": name, "instance": instance}
	ReplicationLag.DeletePartialMatch(labels)
	InstanceUp.DeletePartialMatch(labels)
	InstanceReplicating.DeletePartialMatch(labels)
}

// SetConditions makes mysql_cluster_condition hold exactly the cluster's conditions: each
// (type, status, reason) 1, and the series of earlier statuses or reasons removed — only
// those, so that a scrape never finds a current condition missing.
func SetConditions(namespace, name string, conds []metav1.Condition) {
	conditionsMu.Lock()
	defer conditionsMu.Unlock()
	key := namespace + "/" + name
	want := map[[3]string]bool{}
	for _, c := range conds {
		want[[3]string{c.Type, string(c.Status), c.Reason}] = true
	}
	for old := range conditionSeries[key] {
		if !want[old] {
			Condition.DeleteLabelValues(namespace, name, old[0], old[1], old[2])
		}
	}
	for w := range want {
		Condition.WithLabelValues(namespace, name, w[0], w[1], w[2]).Set(1)
	}
	conditionSeries[key] = want
}

// conditionSeries are the (type, status, reason) series SetConditions last set, by cluster.
var (
	conditionsMu    sync.Mutex
	conditionSeries = map[string]map[[3]string]bool{}
)

// ForgetArchive removes the binlog archive series of a cluster (archiving turned off).
func ForgetArchive(namespace, name string) {
	ArchiveLag.DeleteLabelValues(namespace, name)
	ArchiveLastUpload.DeleteLabelValues(namespace, name)
	ArchiveUp.DeleteLabelValues(namespace, name)
}

// The values of mysql_cluster_state's state label.
const (
	StateHealthy     = "healthy"
	StateProgressing = "progressing"
	StateDegraded    = "degraded"
	StateFailed      = "failed"
)

// ClusterStates lists every state in the order documented.
var ClusterStates = []string{StateHealthy, StateProgressing, StateDegraded, StateFailed}

// SetClusterState sets mysql_cluster_state to 1 for state and 0 for every other state.
func SetClusterState(namespace, name, state string) {
	for _, s := range ClusterStates {
		v := 0.0
		if s == state {
			v = 1
		}
		ClusterState.WithLabelValues(namespace, name, s).Set(v)
	}
}
