package v1beta1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BackupSpec says where backups of a cluster go, which instance takes them, when they are
// taken and how long they are kept.
// +kubebuilder:validation:XValidation:rule="has(self.store) != has(self.storeRef)",message="spec.backup: set exactly one of store (an S3 bucket or a PersistentVolumeClaim, described here) or storeRef (the name of a MySQLBackupStore in this namespace)"
type BackupSpec struct {
	// Store is the object storage the backups are written to, described here. Set store or
	// storeRef, not both.
	// +optional
	Store *BackupStore `json:"store,omitempty"`

	// StoreRef names a MySQLBackupStore in the cluster's namespace that describes where the
	// backups go, so that several clusters share one description of a bucket and its
	// credentials. It is read at each use: a backup records the store it was written to in its
	// status.store, so changing or deleting the MySQLBackupStore later does not lose track of
	// backups already taken. Set store or storeRef, not both.
	// +optional
	StoreRef *BackupStoreReference `json:"storeRef,omitempty"`

	// Target chooses the instance a backup is taken on: `PreferReplica` (default) takes it on a
	// healthy replica and on the primary only when there is none; `Primary` always uses the
	// primary. A MySQLBackup may override it.
	// +kubebuilder:default=PreferReplica
	// +optional
	Target BackupTarget `json:"target,omitempty"`

	// Schedule takes backups periodically. Without it, backups are taken only when a
	// MySQLBackup is created.
	// +optional
	Schedule *BackupSchedule `json:"schedule,omitempty"`

	// Retention deletes old backups, objects included. Without it, every backup is kept.
	// +optional
	Retention *BackupRetention `json:"retention,omitempty"`

	// DeletionPolicy is the deletionPolicy of the backups the schedule creates: Retain (the
	// default) keeps a deleted backup's data, Delete removes it. Retention deletes the data
	// of the backups it expires either way.
	// +kubebuilder:default=Retain
	// +optional
	DeletionPolicy BackupDeletionPolicy `json:"deletionPolicy,omitempty"`

	// Verification restores the newest successful backup into a throwaway server on a
	// schedule, checks its checksums, GTID position and tables (CHECK TABLE), and records the
	// result in the backup's status.verification. Any backup can also be verified on demand
	// by annotating it mysql.dolphin.dev/verify=<any new value>.
	// +optional
	Verification *BackupVerification `json:"verification,omitempty"`

	// ContinuousArchiving copies the binary log into the store as it is written (see
	// ContinuousArchiving).
	// +optional
	ContinuousArchiving *ContinuousArchiving `json:"continuousArchiving,omitempty"`
}

// BackupVerification schedules restore checks.
type BackupVerification struct {
	// Schedule of the checks (cron and time zone, as for backups); each check verifies the
	// newest successful backup not verified yet.
	// +required
	Schedule BackupSchedule `json:"schedule"`
}

// BackupTarget chooses the instance a backup is taken on.
// +kubebuilder:validation:Enum=PreferReplica;Primary
type BackupTarget string

const (
	// BackupTargetPreferReplica takes backups on a healthy replica, on the primary when none is.
	BackupTargetPreferReplica BackupTarget = "PreferReplica"
	// BackupTargetPrimary takes backups on the primary.
	BackupTargetPrimary BackupTarget = "Primary"
)

// BackupStoreReference names a MySQLBackupStore in the same namespace.
type BackupStoreReference struct {
	// Name of the MySQLBackupStore.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="storeRef.name must be the name of a MySQLBackupStore: lower-case letters, digits, '-' and '.'"
	// +required
	Name string `json:"name"`
}

// BackupStore is an object storage location. Exactly one kind is set.
// +kubebuilder:validation:XValidation:rule="has(self.s3) != has(self.pvc)",message="backup store: set exactly one of s3 (an S3-compatible bucket) or pvc (a PersistentVolumeClaim)"
type BackupStore struct {
	// S3 is a bucket of Amazon S3 or an S3-compatible server (MinIO, Ceph RGW, versitygw …).
	// +optional
	S3 *S3Store `json:"s3,omitempty"`

	// PVC is a PersistentVolumeClaim in the cluster's namespace that backups are written to.
	// Dolphin runs a small store server (`dolphin-store-<claim>`, one pod) that mounts the
	// claim and serves it over HTTPS to the instances that take and restore backups, so a
	// ReadWriteOnce claim is enough. The claim must exist; it is never deleted by Dolphin.
	// +optional
	PVC *PVCStore `json:"pvc,omitempty"`
}

// PVCStore is a PersistentVolumeClaim used as a backup store.
type PVCStore struct {
	// ClaimName is the PersistentVolumeClaim's name, in the cluster's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="pvc.claimName must be a PersistentVolumeClaim name: lower-case letters, digits, '-' and '.'"
	// +required
	ClaimName string `json:"claimName"`
}

// S3Store is a bucket of an S3-compatible object storage.
type S3Store struct {
	// Endpoint is the URL of the S3 API, for example https://s3.eu-west-1.amazonaws.com or
	// http://minio.storage.svc:9000.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('^https?://[^/?#]+(/.*)?$')",message="s3.endpoint must be an http:// or https:// URL, for example https://s3.eu-west-1.amazonaws.com"
	// +required
	Endpoint string `json:"endpoint"`

	// Bucket is the bucket name; it must exist.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9][a-z0-9.-]*[a-z0-9]$')",message="s3.bucket must be a bucket name: lower-case letters, digits, dots and hyphens, 3 to 63 characters"
	// +required
	Bucket string `json:"bucket"`

	// Prefix is prepended to every object key, for example `prod/`. Backups of a cluster go
	// under `<prefix><namespace>/<cluster>/<backup>/`.
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.contains('//') && !self.contains('..')",message="s3.prefix must be a relative key prefix such as prod/ (no leading '/', no '//' or '..')"
	// +optional
	Prefix string `json:"prefix,omitempty"`

	// Region of the bucket; most S3-compatible servers accept the default us-east-1.
	// +kubebuilder:default=us-east-1
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Region string `json:"region,omitempty"`

	// ForcePathStyle addresses the bucket as <endpoint>/<bucket> instead of
	// <bucket>.<endpoint>; most S3-compatible servers need it.
	// +optional
	ForcePathStyle bool `json:"forcePathStyle,omitempty"`

	// CredentialsSecret names a Secret in the cluster's namespace with the keys
	// `access-key-id` and `secret-access-key`. Leave it out to use the AWS SDK's default
	// credential chain in the pods that reach the store: IAM roles for service accounts (a
	// web identity token), the environment, or the node's instance role.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	CredentialsSecret string `json:"credentialsSecret,omitempty"`

	// CASecret names a Secret in the cluster's namespace whose key `ca.crt` holds the PEM
	// certificate authorities that sign the endpoint's certificate, for a private CA.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	CASecret string `json:"caSecret,omitempty"`

	// PartSize is the size of one multipart upload part (at least 5Mi, at most 1Gi; default
	// 16Mi). Memory used by an upload is about three parts; parts grow as an object gets large,
	// so no object hits S3's 10,000-part limit.
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('5Mi')) >= 0 && quantity(string(self)).compareTo(quantity('1Gi')) <= 0",message="s3.partSize must be between 5Mi and 1Gi, for example 16Mi"
	// +optional
	PartSize *resource.Quantity `json:"partSize,omitempty"`
}

// BackupSchedule takes backups periodically.
type BackupSchedule struct {
	// Cron is a five-field cron expression (minute hour day-of-month month day-of-week),
	// for example `30 2 * * *` for 02:30 every day, or a descriptor such as `@daily` or
	// `@every 6h`.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.startsWith('@') ? self.matches('^@(yearly|annually|monthly|weekly|daily|midnight|hourly|every [0-9]+(ns|us|ms|s|m|h)([0-9]+(ns|us|ms|s|m|h))*)$') : self.matches('^\\\\S+\\\\s+\\\\S+\\\\s+\\\\S+\\\\s+\\\\S+\\\\s+\\\\S+$')",message="schedule.cron must have five fields (minute hour day-of-month month day-of-week), for example '30 2 * * *', or be @hourly, @daily, @weekly, @monthly, @yearly or '@every 6h'"
	// +required
	Cron string `json:"cron"`

	// TimeZone the cron expression is read in, an IANA name such as Europe/Berlin; default UTC.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*$')",message="schedule.timeZone must be an IANA time zone name such as UTC or Europe/Berlin"
	// +optional
	TimeZone string `json:"timeZone,omitempty"`

	// Suspend stops creating scheduled backups; backups already running finish.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// ConcurrencyPolicy says what happens when a scheduled backup is due while the previous
	// one still runs: `Forbid` (default) skips the new one and records it in an event.
	// +kubebuilder:validation:Enum=Forbid
	// +kubebuilder:default=Forbid
	// +optional
	ConcurrencyPolicy string `json:"concurrencyPolicy,omitempty"`
}

// BackupRetention deletes old backups. A backup is deleted only when both limits that are
// set allow it, and the newest successful backup is never deleted.
// +kubebuilder:validation:XValidation:rule="has(self.keep) || has(self.window)",message="retention: set keep (how many successful backups to keep) and/or window (how far back backups must reach, e.g. 168h)"
type BackupRetention struct {
	// Keep is how many successful backups are kept at least (1 to 1000).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Keep *int32 `json:"keep,omitempty"`

	// Window keeps every backup needed to restore to any moment of the last Window, for
	// example 168h for a week (at least 1h).
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1h')",message="retention.window must be at least 1h, for example 168h for a week"
	// +optional
	Window *metav1.Duration `json:"window,omitempty"`
}

// BackupStatus is what Dolphin observed about a cluster's backups.
type BackupStatus struct {
	// LastScheduleTime is when the schedule last created a backup.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
	// LastSuccessfulBackup names the newest MySQLBackup that succeeded.
	// +optional
	LastSuccessfulBackup string `json:"lastSuccessfulBackup,omitempty"`
	// LastSuccessTime is when that backup completed.
	// +optional
	LastSuccessTime *metav1.Time `json:"lastSuccessTime,omitempty"`
	// LastFailedBackup names the newest MySQLBackup that failed, when it is newer than the
	// last success.
	// +optional
	LastFailedBackup string `json:"lastFailedBackup,omitempty"`
	// LastVerifiedBackup names the newest MySQLBackup whose restore check passed, and
	// LastVerifiedTime when it passed. A backup never restored is unverified.
	// +optional
	LastVerifiedBackup string `json:"lastVerifiedBackup,omitempty"`
	// +optional
	LastVerifiedTime *metav1.Time `json:"lastVerifiedTime,omitempty"`
	// Archive is the binlog archive's state, when spec.backup.continuousArchiving is set.
	// +optional
	Archive *ArchiveStatus `json:"archive,omitempty"`
}

// ConditionLastBackupSucceeded is a MySQLCluster condition: False when the newest backup
// failed, with the reason and what to change.
const ConditionLastBackupSucceeded = "LastBackupSucceeded"

// BootstrapSpec creates a cluster's data from a backup, or from a MariaDB server outside the
// cluster, instead of empty servers. From a backup, every instance is restored from it (its
// checksums verified before use), continues from the backup's GTID position, and then
// replicates from the instance chosen as primary. From an external server, the first
// instance takes a consistent logical copy of it and the others are cloned from that one.
// +kubebuilder:validation:XValidation:rule="(has(self.backup) ? 1 : 0) + (has(self.from) ? 1 : 0) + ((has(self.pointInTime) && has(self.pointInTime.cluster)) ? 1 : 0) + (has(self.external) ? 1 : 0) == 1",message="bootstrap: set exactly one of backup (a MySQLBackup of this namespace, by name), from (a backup store and the backup's path in it), pointInTime.cluster (the archived cluster whose newest backup before the target Dolphin restores) or external (a MariaDB server outside the cluster to copy)"
// +kubebuilder:validation:XValidation:rule="!has(self.pointInTime) || !has(self.from)",message="bootstrap.pointInTime needs bootstrap.backup or pointInTime.cluster: the binlog archive of the backup's cluster is replayed after it"
// +kubebuilder:validation:XValidation:rule="!has(self.pointInTime) || !has(self.external)",message="bootstrap.pointInTime replays a Dolphin binlog archive after a backup: it does not go with bootstrap.external"
type BootstrapSpec struct {
	// Backup restores a MySQLBackup of this namespace, by name. It must have Succeeded.
	// +optional
	Backup *BackupReference `json:"backup,omitempty"`
	// From restores a backup found in a backup store, for example one whose MySQLBackup (or
	// whole source cluster) was deleted.
	// +optional
	From *BackupLocation `json:"from,omitempty"`
	// PointInTime takes the restore past the backup: the binlog archive of the backup's
	// cluster (spec.backup.continuousArchiving) is replayed up to a time, a GTID position or
	// its end. The target is resolved to a GTID position once, before anything starts, and a
	// target outside the archive is refused with the archived window in the message.
	// +optional
	PointInTime *PointInTimeTarget `json:"pointInTime,omitempty"`
	// External copies a running MariaDB server outside the cluster (a VM, another operator,
	// a managed service): Dolphin first checks the server through the account given (binary
	// log, GTIDs, server_id, privileges, tables; the ExternalSourceReady condition says what to
	// change on the server, and nothing is created until every blocking check passes), then
	// the first instance takes a consistent logical copy of every user schema at one GTID
	// position (mariadb-dump --single-transaction | mariadb, streamed, nothing staged) and the
	// server's accounts as they are when it ends, and the others are cloned from it. Nothing
	// is written on the server; a copy that fails is tried 3 times (physicalCopy: every instance
	// restores a backup taken on the server's host instead). Writes made on the server
	// after the copy's snapshot are not in the cluster: stop them first, or use it as a copy
	// (docs/migrate.md).
	// +optional
	External *ExternalSource `json:"external,omitempty"`
}

// ExternalSource is a MariaDB server outside the cluster and the account Dolphin reads it with.
// +kubebuilder:validation:XValidation:rule="!has(self.fallback) || (has(self.replicate) && self.replicate)",message="bootstrap.external.fallback needs replicate: true (the cluster follows the server until the cutover, the server follows the cluster after it)"
type ExternalSource struct {
	// Host is the server's DNS name or IP address, reachable from the operator and from the
	// cluster's pods.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Host string `json:"host"`
	// Port is the server's port.
	// +kubebuilder:default=3306
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`
	// AccountSecretName names a Secret of this namespace with the keys `username` and
	// `password` of the account Dolphin reads the server with. It needs SELECT, SHOW VIEW,
	// TRIGGER, EVENT, REPLICATION SLAVE and BINLOG MONITOR ON *.* (docs/migrate.md).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	AccountSecretName string `json:"accountSecretName"`
	// CASecretName, when set, names a Secret of this namespace whose `ca.crt` verifies the
	// server's certificate: Dolphin then connects over TLS, and the certificate must carry
	// the host's name. Unset: no TLS.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	CASecretName string `json:"caSecretName,omitempty"`
	// Replicate keeps the cluster following the server after the copy: the primary replicates
	// from it with GTIDs (read-only; what it applies is acknowledged by a replica before it
	// moves on), the replicas replicate from the primary, the primary Service selects no pod,
	// and status.topology.externalSource shows the lag and the position received. The cluster
	// takes writes after the cutover, asked with the annotation mysql.dolphin.dev/cutover:
	// "true" (docs/migrate.md). The server must keep its binary logs until the cluster caught
	// up. Unset: a one-time copy; the cluster opens for writes once it is made.
	// +optional
	Replicate bool `json:"replicate,omitempty"`
	// PhysicalCopy starts the cluster from a backup of this server taken on its host with
	// `dolphin backup` (a mariadb-backup stream, checksummed, at an exact GTID position;
	// docs/migrate.md) instead of a logical copy through the account: every instance restores
	// it, its checksums verified, and continues from its position. Before anything is created
	// Dolphin checks the server as for a logical copy (without the privileges only the copy
	// needs) and that the server reached the backup's position, so a backup of another server
	// is refused. With replicate, the cluster then follows the server from that position: it
	// must still be in the server's binary logs.
	// +optional
	PhysicalCopy *BackupLocation `json:"physicalCopy,omitempty"`
	// Fallback keeps a way back after the cutover (with replicate): the server then
	// replicates from the cluster's primary, read-only, from the cutover's final position,
	// so that the annotation mysql.dolphin.dev/fall-back can move writes back to it with a
	// second cutover the other way round (docs/migrate.md). The account also needs REPLICATION
	// SLAVE ADMIN on the server; the server logs in to the cluster with Dolphin's replication
	// account, whose password its administrators can then read.
	// +optional
	Fallback *ExternalFallback `json:"fallback,omitempty"`
}

// ExternalFallback is how the server reaches the cluster's primary once it follows it.
type ExternalFallback struct {
	// PrimaryHost is the address the server reaches the cluster's primary at: the primary
	// Service's DNS name (<cluster>-primary.<namespace>.svc) or ClusterIP when the server can
	// reach those, else the address of a LoadBalancer or NodePort Service you create that
	// selects the cluster's primary.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	PrimaryHost string `json:"primaryHost"`
	// PrimaryPort is that address's port.
	// +kubebuilder:default=3306
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	PrimaryPort int32 `json:"primaryPort,omitempty"`
}

// ConditionExternalSourceReady is a MySQLCluster condition of a cluster bootstrapped from an
// external server: False while a blocking check of the server fails (the message lists what
// to change on the server; Dolphin checks again every 30 s), True once none does (warnings
// stay in the message).
const ConditionExternalSourceReady = "ExternalSourceReady"

// ConditionFollowingExternalSource is a MySQLCluster condition of a cluster that follows the
// server it was copied from (spec.bootstrap.external with replicate): True while its primary
// replicates from the server (the message says how far behind), False with the server's
// error when it does not.
const ConditionFollowingExternalSource = "FollowingExternalSource"

// PointInTimeTarget is where a point-in-time restore stops. Set exactly one field.
// +kubebuilder:validation:XValidation:rule="(has(self.time) ? 1 : 0) + (has(self.gtid) ? 1 : 0) + ((has(self.latest) && self.latest) ? 1 : 0) == 1",message="pointInTime: set exactly one of time (RFC 3339, e.g. 2026-12-01T14:03:27Z), gtid (e.g. 0-1-4711) or latest: true"
type PointInTimeTarget struct {
	// Time restores every transaction committed at or before it (MariaDB records commit
	// times in whole seconds: transactions of that second are included). RFC 3339.
	// +optional
	Time *metav1.Time `json:"time,omitempty"`
	// GTID restores up to and including this GTID position (MariaDB domain-server-sequence,
	// comma-separated per domain).
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+-[0-9]+-[0-9]+(,[0-9]+-[0-9]+-[0-9]+)*$')",message="pointInTime.gtid must be a MariaDB GTID position such as 0-1-4711 (domain-server-sequence, comma-separated per domain)"
	// +optional
	GTID string `json:"gtid,omitempty"`
	// Latest restores everything archived when the cluster is created.
	// +optional
	Latest bool `json:"latest,omitempty"`
	// Cluster, instead of bootstrap.backup, names the archived cluster (in this namespace)
	// whose backups to choose from: Dolphin restores its newest successful backup that ended
	// at or before the target time (for a GTID target: whose position the target covers; for
	// latest: the newest).
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Cluster string `json:"cluster,omitempty"`
}

// BackupReference names a MySQLBackup.
type BackupReference struct {
	// Name of the MySQLBackup.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// BackupLocation is a backup in a store: the store and the backup's path (the prefix that
// holds its manifest.json, as in a MySQLBackup's status.path).
// +kubebuilder:validation:XValidation:rule="has(self.store) != has(self.storeRef)",message="bootstrap.from: set exactly one of store (the store, described here) or storeRef (the name of a MySQLBackupStore in this namespace)"
type BackupLocation struct {
	// Store holds the backup, described here. Set store or storeRef, not both.
	// +optional
	Store *BackupStore `json:"store,omitempty"`
	// StoreRef names the MySQLBackupStore, in this namespace, that holds the backup. It is
	// read once, when the cluster is created (status.restoredFrom records the store). Set
	// store or storeRef, not both.
	// +optional
	StoreRef *BackupStoreReference `json:"storeRef,omitempty"`
	// Path of the backup inside the store's prefix, for example prod/db/nightly-20261201T023000Z/.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.contains('..')",message="bootstrap.from.path must be relative to the store's prefix (no leading '/', no '..')"
	// +required
	Path string `json:"path"`
}

// RestoreStatus records where a cluster's data came from: the location is resolved once,
// when the cluster is created, and used for every instance after, even when the MySQLBackup
// named by spec.bootstrap is deleted later.
type RestoreStatus struct {
	// Backup names the MySQLBackup, when the bootstrap named one.
	// +optional
	Backup string `json:"backup,omitempty"`
	// Store and Path locate the backup.
	Store BackupStore `json:"store"`
	Path  string      `json:"path"`
	// StoreURL is the address of the store server of a pvc store (its Service's ClusterIP),
	// resolved with the location; the instances restore through it.
	// +optional
	StoreURL string `json:"storeURL,omitempty"`
	// GTIDPosition is the backup's GTID position, where the restored cluster continues (or,
	// with a point-in-time target, where the replay starts).
	// +optional
	GTIDPosition string `json:"gtidPosition,omitempty"`
	// ArchivePrefix is where the binlog archive replayed after the backup is, in the same
	// store; TargetGTID is the position the replay stops at (the point-in-time target,
	// resolved once). Both empty without spec.bootstrap.pointInTime.
	// +optional
	ArchivePrefix string `json:"archivePrefix,omitempty"`
	// +optional
	TargetGTID string `json:"targetGTID,omitempty"`
}

// ConditionRestored is a MySQLCluster condition of a cluster bootstrapped from a backup:
// False while the backup is being restored or when the restore failed (the message says why
// and what to change), True once every instance holds the restored data.
const ConditionRestored = "Restored"
