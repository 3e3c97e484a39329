// Package controller holds the reconcilers. They touch Kubernetes objects only: the
// database topology is the topology engine's job (internal/clustermanager,
// internal/topology), and the two meet through the MySQLCluster status and the pods' role
// labels.
//
// A file's name says which reconciler owns it:
//
//   - cluster_*.go: MySQLClusterReconciler. cluster_controller.go is Reconcile, runSteps and
//     the watches; cluster_steps.go the ordered list of steps (each returns an error or an
//     outcome: done, or look again after a time, for a reason), each in its own file:
//     cluster_pod_stop.go (a deleted primary switched over first), cluster_credentials.go and
//     cluster_credentials_user_secret.go, cluster_agent_secret.go, cluster_tls.go (the TLS
//     step), cluster_bootstrap.go (+ _status), cluster_seed.go (+ _decide), cluster_reclone.go
//     (+ _decide, _keep), cluster_engine_upgrade.go, cluster_rollout.go, cluster_storage.go,
//     cluster_backup_store.go, cluster_store_server.go, cluster_binlog_archive.go (+ _decide),
//     cluster_metrics_secret.go, and last, run even after a failed step,
//     cluster_backup_schedule.go (the backup schedule) with cluster_backup_policy.go
//     (retention, the backup summary) and cluster_archive_retention.go. cluster_status.go
//     computes the status (a pure function of an observation), one condition after another
//     in cluster_status_conditions.go, and cluster_status_write.go writes it (every field
//     but those other writers own), cluster_status_planned.go tells planned work from
//     trouble, cluster_requests.go hands switchover and accept-loss requests to the engine,
//     cluster_point_in_time.go resolves restore targets.
//   - backup_*.go: MySQLBackupReconciler (backup_controller.go), choosing the source
//     (backup_source.go) and verifying a backup (backup_verify.go).
//   - user_controller.go (the user reconciler), database_controller.go: MySQLUser and
//     MySQLDatabase, adapters of one SQL-object reconcile loop (shared_sqlobjects_reconcile.go).
//   - shared_*.go: what several use: applying objects (shared_apply.go), the cache's
//     restriction to Dolphin's own objects (shared_cache.go), reaching an instance's agent
//     (shared_agent_connect.go), the primary's SQL for users and databases (shared_sqlobjects.go),
//     live reads, credentials and backup stores (shared_readers.go).
//
// Tests follow the file they test; *_envtest_test.go run against a real API server
// (suite_envtest_test.go).
package controller
