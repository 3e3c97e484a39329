package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MySQLBackup is one physical backup of a MySQLCluster, taken on demand when it is created
// (or by the cluster's backup schedule). The backup streams the data directory of one
// instance, compressed and checksummed, into the cluster's backup store; a manifest written
// last records what it contains. Deleting the MySQLBackup deletes its objects.
//
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mybk,categories=dolphin
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=".spec.cluster",description="Cluster backed up"
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=".status.phase",description="Pending, Running, Succeeded or Failed"
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=".status.sourceInstance",description="Instance the backup was taken on"
// +kubebuilder:printcolumn:name="Size",type=string,JSONPath=".status.storedSize",description="Bytes stored (compressed)"
// +kubebuilder:printcolumn:name="Verified",type=string,JSONPath=".status.verification.phase",description="Restore check: Unverified, Running, Verified or Failed"
// +kubebuilder:printcolumn:name="GTID",type=string,JSONPath=".status.gtidPosition",priority=1,description="GTID position the backup contains"
// +kubebuilder:printcolumn:name="Duration",type=string,JSONPath=".status.duration",priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type MySQLBackup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec says which cluster to back up.
	// +required
	Spec MySQLBackupSpec `json:"spec"`

	// Status is what Dolphin observed; written by the operator only.
	// +optional
	Status MySQLBackupStatus `json:"status,omitempty"`
}

// MySQLBackupList is a list of MySQLBackup.
//
// +kubebuilder:object:root=true
type MySQLBackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MySQLBackup `json:"items"`
}

// MySQLBackupSpec says which cluster to back up. Only deletionPolicy can be changed after
// creation: create another MySQLBackup instead.
// +kubebuilder:validation:XValidation:rule="self.cluster == oldSelf.cluster && has(self.target) == has(oldSelf.target) && (!has(self.target) || self.target == oldSelf.target)",message="a MySQLBackup's cluster and target are immutable: create a new MySQLBackup instead (only deletionPolicy can change)"
type MySQLBackupSpec struct {
	// Cluster is the name of the MySQLCluster, in the same namespace, to back up. The cluster
	// must have spec.backup.store set.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +required
	Cluster string `json:"cluster"`

	// Target overrides the cluster's spec.backup.target for this backup: PreferReplica or
	// Primary.
	// +optional
	Target BackupTarget `json:"target,omitempty"`

	// DeletionPolicy says what deleting this MySQLBackup does to its data in the store:
	// Retain (the default) keeps it — a namespace deletion or a GitOps prune never empties a
	// bucket — and Delete removes it. The retention rules of spec.backup.retention delete
	// the data of the backups they expire whatever this says (an event names them).
	// +kubebuilder:default=Retain
	// +optional
	DeletionPolicy BackupDeletionPolicy `json:"deletionPolicy,omitempty"`
}

// BackupDeletionPolicy is what deleting a MySQLBackup does to its data: Retain or Delete.
// +kubebuilder:validation:Enum=Retain;Delete
type BackupDeletionPolicy string

const (
	// BackupRetain keeps a deleted MySQLBackup's data in the store.
	BackupRetain BackupDeletionPolicy = "Retain"
	// BackupDelete removes a deleted MySQLBackup's data from the store.
	BackupDelete BackupDeletionPolicy = "Delete"
)

// BackupPhase is where a backup is in its life.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed
type BackupPhase string

const (
	// BackupPending means accepted, not started (waiting for the cluster or its store).
	BackupPending BackupPhase = "Pending"
	// BackupRunning means the backup tool is streaming to the store.
	BackupRunning BackupPhase = "Running"
	// BackupSucceeded means every object and the manifest are stored.
	BackupSucceeded BackupPhase = "Succeeded"
	// BackupFailed means no manifest was written; status.error says why. Older backups are untouched.
	BackupFailed BackupPhase = "Failed"
)

// MySQLBackupStatus is the observed state of a MySQLBackup.
type MySQLBackupStatus struct {
	// Phase is Pending, Running, Succeeded or Failed.
	// +optional
	Phase BackupPhase `json:"phase,omitempty"`
	// Conditions: Complete (True once Succeeded or Failed, the reason says which).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// SourceInstance is the pod the backup is taken on, and SourceRole its role then.
	// +optional
	SourceInstance string `json:"sourceInstance,omitempty"`
	// +optional
	SourceRole InstanceRole `json:"sourceRole,omitempty"`
	// JobID identifies the backup run on the instance agent (to resume after an operator
	// restart).
	// +optional
	JobID string `json:"jobID,omitempty"`
	// Store is the backup store the backup was written to (credentials by Secret name only),
	// copied from the cluster when the backup started, so that a restore finds it even when
	// the cluster was changed or deleted.
	// +optional
	Store *BackupStore `json:"store,omitempty"`
	// Path is the backup's key prefix in the store.
	// +optional
	Path string `json:"path,omitempty"`
	// Manifest is the location of the manifest, e.g. s3://bucket/prod/ns/db/nightly/manifest.json.
	// +optional
	Manifest string `json:"manifest,omitempty"`
	// GTIDPosition is the GTID set the backup contains.
	// +optional
	GTIDPosition string `json:"gtidPosition,omitempty"`
	// StoredBytes is the size stored (compressed), and StoredSize the same in a readable unit.
	// +optional
	StoredBytes int64 `json:"storedBytes,omitempty"`
	// +optional
	StoredSize string `json:"storedSize,omitempty"`
	// Objects is the number of stored objects besides the manifest.
	// +optional
	Objects int32 `json:"objects,omitempty"`
	// StartTime and CompletionTime of the backup run; Duration between them.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// +optional
	Duration string `json:"duration,omitempty"`
	// Error says why the backup failed and what to change.
	// +optional
	Error string `json:"error,omitempty"`
	// Verification is the last restore check of this backup; Unverified until one ran.
	// +optional
	Verification *BackupVerificationStatus `json:"verification,omitempty"`
}

// VerificationPhase is the state of a backup's restore check.
// +kubebuilder:validation:Enum=Unverified;Running;Verified;Failed
type VerificationPhase string

const (
	// VerificationUnverified means the backup has never been restored.
	VerificationUnverified VerificationPhase = "Unverified"
	// VerificationRunning means a throwaway pod is restoring and checking it.
	VerificationRunning VerificationPhase = "Running"
	// VerificationVerified means it restored, its GTID position matched and every table checked OK.
	VerificationVerified VerificationPhase = "Verified"
	// VerificationFailed means the check failed; message says why.
	VerificationFailed VerificationPhase = "Failed"
)

// BackupVerificationStatus is the result of a backup's last restore check.
type BackupVerificationStatus struct {
	// Phase: Unverified, Running, Verified or Failed.
	Phase VerificationPhase `json:"phase"`
	// Request is the value of the mysql.dolphin.dev/verify annotation the check answered.
	// +optional
	Request string `json:"request,omitempty"`
	// Pod runs the check.
	// +optional
	Pod string `json:"pod,omitempty"`
	// StartTime and CompletionTime of the check.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// Message is the check's result line: the GTID position, tables and rows checked, or why
	// it failed.
	// +optional
	Message string `json:"message,omitempty"`
}

// VerifyAnnotation on a MySQLBackup asks for a restore check; any value not yet answered
// (status.verification.request) starts one.
const VerifyAnnotation = "mysql.dolphin.dev/verify"

// ConditionBackupComplete is the MySQLBackup condition that turns True when the backup ended
// (reason Succeeded or Failed).
const ConditionBackupComplete = "Complete"

// ConditionBackupSucceeded is the MySQLBackup condition that says how it ended: True when it
// succeeded, False when it failed (reason and message say why), Unknown until it ends.
const ConditionBackupSucceeded = "Succeeded"
