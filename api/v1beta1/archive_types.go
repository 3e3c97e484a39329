package v1beta1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// ContinuousArchiving copies the cluster's binary log into the backup store as it is written,
// for point-in-time recovery: one `dolphin binlog-archive` pod per cluster
// (`<cluster>-binlog-archive`) reads it over the replication protocol from a replica, never
// from the primary of a cluster with replicas (its binary log may end in a transaction no
// replica acknowledged, which a failover discards; with every replica down the archive waits
// and the condition turns False), and stores GTID-keyed segments under
// `<prefix><namespace>/<cluster>/binlog/`. It starts at the newest successful backup's GTID
// position, and after a failover continues from the last archived GTID on whichever server
// answers. Restore to a point in time with spec.bootstrap.pointInTime; segments that no
// kept backup needs are deleted with the backups retention expires.
type ContinuousArchiving struct {
	// Enabled runs the archiver; false stops it (segments already stored are kept).
	// +kubebuilder:default=true
	// +optional
	Enabled bool `json:"enabled"`

	// SegmentMaxAge closes a segment this long after its first transaction, also when no more
	// writes come: committed writes are in the store within about this long (the recovery
	// point objective: `make bench-pitr` measures the lag). Between 1s and 10m; default 3s.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('10m')",message="continuousArchiving.segmentMaxAge must be between 1s and 10m, for example 3s"
	// +optional
	SegmentMaxAge *metav1.Duration `json:"segmentMaxAge,omitempty"`

	// StallAfter turns the ContinuousArchiving condition False when the primary has
	// transactions that have not reached the store for this long (the archive lag). Between 10s
	// and 1h; default 1m.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s') && duration(self) <= duration('1h')",message="continuousArchiving.stallAfter must be between 10s and 1h, for example 1m"
	// +optional
	StallAfter *metav1.Duration `json:"stallAfter,omitempty"`
}

// ArchiveStatus is what Dolphin observed of a cluster's binlog archive.
type ArchiveStatus struct {
	// Location of the archive in the store, e.g. s3://bucket/prod/shop/db/binlog/.
	// +optional
	Location string `json:"location,omitempty"`
	// LastArchivedGTID is the GTID position up to which the binary log is in the store.
	// +optional
	LastArchivedGTID string `json:"lastArchivedGTID,omitempty"`
	// LastRecoverableTime is the commit time of the last archived transaction (whole
	// seconds): the latest moment a restore could reach with the archive.
	// +optional
	LastRecoverableTime *metav1.Time `json:"lastRecoverableTime,omitempty"`
	// FirstRecoverableTime is the end of the oldest successful backup the archive continues
	// (the archive starts at the newest backup when archiving is turned on, and stays
	// contiguous after it).
	// +optional
	FirstRecoverableTime *metav1.Time `json:"firstRecoverableTime,omitempty"`
	// LagSeconds is how long the primary has had transactions not in the store (0 when the
	// archive has everything the primary committed).
	// +optional
	LagSeconds int64 `json:"lagSeconds,omitempty"`
	// LastUploadTime is when the last segment was stored.
	// +optional
	LastUploadTime *metav1.Time `json:"lastUploadTime,omitempty"`
	// Source is the server (address) the archiver reads from.
	// +optional
	Source string `json:"source,omitempty"`
	// LastError is the archiver's last failure, while it is newer than its last upload.
	// +optional
	LastError string `json:"lastError,omitempty"`
}

// ConditionContinuousArchiving is a MySQLCluster condition: True while the binlog archive
// keeps up with the primary, False (with the reason and what to do) when it waits for a base
// backup, its pod does not run, or it has fallen behind by more than stallAfter.
const ConditionContinuousArchiving = "ContinuousArchiving"
