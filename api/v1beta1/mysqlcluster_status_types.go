package v1beta1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Phase is a one-word summary of the cluster's lifecycle for humans.
// +kubebuilder:validation:Enum=Pending;Initializing;Running;Progressing;Following;FellBack;Degraded;Failed;Deleting
type Phase string

const (
	// PhasePending means the cluster's objects exist but no instance runs yet.
	PhasePending Phase = "Pending"
	// PhaseInitializing means instances are starting and the topology is not established yet.
	PhaseInitializing Phase = "Initializing"
	// PhaseRunning means a primary accepts writes and every instance is ready.
	PhaseRunning Phase = "Running"
	// PhaseProgressing means a primary accepts writes (or a switchover is moving it) and the
	// instances that are not ready are planned work: a rollout, a deleted pod being replaced,
	// a new or re-cloned instance starting. Nothing needs a person.
	PhaseProgressing Phase = "Progressing"
	// PhaseFollowing means the cluster follows the server it was copied from
	// (spec.bootstrap.external with replicate): every instance is ready and replicates, and
	// none takes writes until the cutover. The FollowingExternalSource condition says how far
	// behind it is.
	PhaseFollowing Phase = "Following"
	// PhaseFellBack means writes moved back to the server the cluster was copied from
	// (the annotation mysql.dolphin.dev/fall-back): every instance is read-only and keeps the
	// data up to the fall back's position (status.topology.externalSource.fellBack). Delete
	// the cluster, or keep it to look at; copying the server again needs a new cluster.
	PhaseFellBack Phase = "FellBack"
	// PhaseDegraded means a primary accepts writes but redundancy or protection is lost: an
	// instance is not ready for a reason that is not planned work, or the conditions say
	// what else.
	PhaseDegraded Phase = "Degraded"
	// PhaseFailed means Dolphin cannot make progress without a change by the user; the
	// conditions say what to change.
	PhaseFailed Phase = "Failed"
	// PhaseDeleting means the cluster is being deleted.
	PhaseDeleting Phase = "Deleting"
)

// Condition types reported in status.conditions.
const (
	// ConditionReady is True when a primary accepts writes and every instance is ready.
	ConditionReady = "Ready"
	// ConditionAvailable is True when a primary accepts writes through the primary Service.
	ConditionAvailable = "Available"
	// ConditionProgressing is True while Dolphin is changing the cluster towards its spec.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True when something needs attention; the message says what.
	ConditionDegraded = "Degraded"
)

// InstanceRole is the replication role of an instance.
type InstanceRole string

const (
	// RolePrimary is the writable instance.
	RolePrimary InstanceRole = "primary"
	// RoleReplica is a read-only instance replicating from the primary.
	RoleReplica InstanceRole = "replica"
	// RoleUnknown is an instance whose role has not been established.
	RoleUnknown InstanceRole = ""
)

// MySQLClusterStatus is the observed state of a MySQLCluster.
type MySQLClusterStatus struct {
	// Phase is a one-word summary: Pending, Initializing, Running, Degraded, Failed or Deleting.
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// Conditions are the standard Ready, Available, Progressing and Degraded conditions.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the spec generation this status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// CurrentPrimary is the name of the pod that accepts writes.
	// +optional
	CurrentPrimary string `json:"currentPrimary,omitempty"`

	// ReadyInstances is the number of instances whose pods are ready.
	// +optional
	ReadyInstances int32 `json:"readyInstances,omitempty"`

	// Instances lists every instance with its role and readiness.
	// +listType=map
	// +listMapKey=name
	// +optional
	Instances []InstanceStatus `json:"instances,omitempty"`

	// Topology is what the topology engine last observed in the databases and did about it.
	// +optional
	Topology *TopologyStatus `json:"topology,omitempty"`

	// Backup is what Dolphin observed about the cluster's backups.
	// +optional
	Backup *BackupStatus `json:"backup,omitempty"`

	// TLS is the server certificate in use when spec.tls.enabled.
	// +optional
	TLS *TLSStatus `json:"tls,omitempty"`

	// RestoredFrom is the backup a cluster with spec.bootstrap was restored from.
	// +optional
	RestoredFrom *RestoreStatus `json:"restoredFrom,omitempty"`

	// LastReclone records the last instance Dolphin discarded and re-cloned from a healthy
	// peer (an errant replica, or one whose primary no longer has the binlogs it needs), with
	// what was discarded.
	// +optional
	LastReclone *RecloneRecord `json:"lastReclone,omitempty"`

	// KeptTransactions are the copies Dolphin kept of transactions an instance held and the
	// primary lacked before it discarded that instance's data (a re-clone), newest last (the
	// last 10). Review one and put it back on the primary with `dolphin kept`; see
	// docs/mysqlcluster.md, "Kept transactions".
	// +listType=atomic
	// +optional
	KeptTransactions []KeptTransactions `json:"keptTransactions,omitempty"`
}

// KeptTransactions describes one kept copy of transactions.
type KeptTransactions struct {
	// Name of the copy.
	Name string `json:"name"`
	// Instance the transactions were taken from, before its data was discarded.
	Instance string `json:"instance"`
	// Primary is the primary the instance had diverged from.
	Primary string `json:"primary"`
	// GTIDs are the kept transactions' original GTIDs, as runs ("0-1-91..100").
	GTIDs string `json:"gtids"`
	// Transactions is how many the copy holds.
	Transactions int64 `json:"transactions"`
	// FirstCommit and LastCommit are when the first and the last were committed.
	// +optional
	FirstCommit *metav1.Time `json:"firstCommit,omitempty"`
	// +optional
	LastCommit *metav1.Time `json:"lastCommit,omitempty"`
	// Location is where the copy is: a file in the root of the instance's data volume.
	Location string `json:"location"`
	// StoreLocation is where the copy was uploaded in the cluster's backup store (under
	// <namespace>/<cluster>/kept/), when the cluster has one.
	// +optional
	StoreLocation string `json:"storeLocation,omitempty"`
	// Time the copy was made.
	Time metav1.Time `json:"time"`
}

// RecloneRecord describes one re-clone of an instance.
type RecloneRecord struct {
	// Instance re-cloned.
	Instance string `json:"instance"`
	// Reason it was re-cloned.
	Reason string `json:"reason"`
	// Discarded is what was thrown away (its GTID position beyond the primary's).
	Discarded string `json:"discarded"`
	// Kept names the copy of the transactions the primary lacked (status.keptTransactions),
	// when there were any.
	// +optional
	Kept string `json:"kept,omitempty"`
	// Time the re-clone was decided.
	Time metav1.Time `json:"time"`
}

// TopologyStatus is the database-side state of the cluster, written by the topology engine.
type TopologyStatus struct {
	// State is the engine's view: WaitingForInstances, Bootstrapping, Healthy, Healing,
	// Degraded, PrimarySuspect, PrimaryLost, Failover, Switchover or SplitBrain.
	// +optional
	State string `json:"state,omitempty"`
	// Message explains the state.
	// +optional
	Message string `json:"message,omitempty"`
	// Primary is the instance the engine keeps writable. It survives operator restarts.
	// +optional
	Primary string `json:"primary,omitempty"`
	// ErrantInstances hold transactions the primary lacks; they are never promoted and are
	// kept out of the topology until re-cloned.
	// +listType=set
	// +optional
	ErrantInstances []string `json:"errantInstances,omitempty"`
	// ReplacedPrimaries are primaries an unplanned failover replaced that have not been the
	// primary again since. One of them found errant, or unable to replicate (error 1236), may
	// hold the only copy of writes it acknowledged: Dolphin never re-clones it by itself,
	// only once the cluster is annotated mysql.dolphin.dev/reclone-approved=<instance>.
	// +listType=set
	// +optional
	ReplacedPrimaries []string `json:"replacedPrimaries,omitempty"`
	// FailoverInProgress is set while a failover runs, so that a restarted operator resumes it.
	// +optional
	FailoverInProgress *FailoverProgress `json:"failoverInProgress,omitempty"`
	// FailoverTail is what the last failover promoted that not every replica holds yet: a
	// write the lost primary acknowledged may exist only on the new primary until the
	// replicas fetch it, so a failover of the new primary in that window promotes only an
	// instance holding it. Cleared once every other instance holds it.
	// +optional
	FailoverTail *FailoverTail `json:"failoverTail,omitempty"`
	// SwitchoverInProgress is set from the moment a switchover is accepted until the new
	// primary is writable or the switchover is refused, so that a restarted operator resumes it.
	// +optional
	SwitchoverInProgress *SwitchoverProgress `json:"switchoverInProgress,omitempty"`
	// LastSwitchoverRequest identifies the last switchover requested by annotation that the
	// engine accepted (the ID in the mysql.dolphin.dev/switchover-accepted annotation): an
	// operator restarted before it removed that annotation never carries the request out twice.
	// +optional
	LastSwitchoverRequest string `json:"lastSwitchoverRequest,omitempty"`
	// SemiSyncFallback is true when the primary stopped waiting for replica acknowledgements
	// (spec.durability Preferred): acknowledged writes are then not guaranteed to survive a
	// failover, and acknowledgedAlone records them.
	// +optional
	SemiSyncFallback bool `json:"semiSyncFallback,omitempty"`
	// NoSemiSyncReplica is true when no replica is connected to acknowledge the primary's
	// writes: commits wait until one is back (spec.durability Required), or for 30 s and
	// then the primary acknowledges them alone (Preferred; SemiSyncFallback).
	// +optional
	NoSemiSyncReplica bool `json:"noSemiSyncReplica,omitempty"`
	// CommitsWaiting is true when commits on the primary have waited 2 s or more for a
	// replica's acknowledgement (also while the primary still counts replicas that no
	// longer answer): clients feel a write stall.
	// +optional
	CommitsWaiting bool `json:"commitsWaiting,omitempty"`
	// ExternalSource is the replication from the server outside the cluster that the cluster
	// follows until a cutover (spec.bootstrap.external with replicate); unset otherwise.
	// +optional
	ExternalSource *ExternalReplication `json:"externalSource,omitempty"`
	// AcknowledgedAlone is set while writes the primary acknowledged without any replica
	// holding them may exist on that primary only (semi-sync fell back, or its source side
	// was restarted to end a stall). A failover from it promotes only a replica that holds
	// them, or waits for it, unless a person accepts the loss with the annotation
	// mysql.dolphin.dev/failover-accept-loss=<primary>. Cleared once a replica holds them.
	// +optional
	AcknowledgedAlone *AcknowledgedAlone `json:"acknowledgedAlone,omitempty"`
	// LastPromotion records the last failover or switchover.
	// +optional
	LastPromotion *PromotionRecord `json:"lastPromotion,omitempty"`
	// CredentialsGeneration identifies the passwords now in the credentials Secret (a hash,
	// never the passwords). Each instance records the generation its accounts have; they
	// differ while a rotation is being applied.
	// +optional
	CredentialsGeneration string `json:"credentialsGeneration,omitempty"`
	// Instances are the per-instance database observations.
	// +listType=map
	// +listMapKey=name
	// +optional
	Instances []InstanceTopology `json:"instances,omitempty"`
}

// SwitchoverProgress is the persisted progress of a requested switchover.
type SwitchoverProgress struct {
	// To is the replica being promoted ("" while Dolphin has not chosen the most advanced one).
	// +optional
	To string `json:"to,omitempty"`
	// Fenced is true once the old primary is read-only and its clients are disconnected.
	// +optional
	Fenced bool `json:"fenced,omitempty"`
	// From is the primary that was fenced (set with fenced).
	// +optional
	From string `json:"from,omitempty"`
}

// FailoverProgress is the persisted progress of a running failover.
type FailoverProgress struct {
	// From is the lost primary.
	From string `json:"from"`
	// Fenced is true once every candidate stopped receiving from it.
	Fenced bool `json:"fenced"`
	// Received is the GTID set of the most any candidate was seen to have received from the
	// lost primary during this failover. No candidate holding less is promoted: a write the
	// lost primary acknowledged may exist only on the replica that received it.
	// +optional
	Received string `json:"received,omitempty"`
	// ReceivedBy is the candidate that had received it.
	// +optional
	ReceivedBy string `json:"receivedBy,omitempty"`
}

// FailoverTail is the GTID set a failover promoted with that not every replica holds yet.
type FailoverTail struct {
	// From is the primary the failover replaced.
	From string `json:"from"`
	// Received is the GTID set the promoted instance had received from it.
	Received string `json:"received"`
	// HeldBy is the instance promoted with it.
	HeldBy string `json:"heldBy"`
}

// AcknowledgedAlone describes writes a primary acknowledged that no replica may hold.
type AcknowledgedAlone struct {
	// Primary is the instance that acknowledged them.
	Primary string `json:"primary"`
	// UpTo is the primary's executed GTID set when it was last seen acknowledging alone:
	// the writes at risk are in it and not in the replicas'.
	UpTo string `json:"upTo"`
	// Since is when the primary was first seen acknowledging alone.
	Since metav1.Time `json:"since"`
}

// PromotionRecord describes one change of primary.
type PromotionRecord struct {
	// From is the previous primary.
	From string `json:"from"`
	// To is the new primary.
	To string `json:"to"`
	// Planned is true for a switchover, false for a failover.
	Planned bool `json:"planned"`
	// Reason says why it happened.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Duration runs from the first missed observation of the old primary (failover) or the
	// request (switchover) until the new primary was writable.
	// +optional
	Duration metav1.Duration `json:"duration,omitempty"`
	// Time is when the new primary became writable.
	Time metav1.Time `json:"time"`
	// LossAccepted describes the acknowledged writes this failover gave up because a person
	// asked for it (mysql.dolphin.dev/failover-accept-loss): the GTID range and since when.
	// +optional
	LossAccepted string `json:"lossAccepted,omitempty"`
}

// InstanceTopology is the engine's observation of one instance.
type InstanceTopology struct {
	// Name of the instance (pod).
	Name string `json:"name"`
	// Reachable is true when the engine could query the server.
	Reachable bool `json:"reachable"`
	// ReadOnly is the server's read_only.
	// +optional
	ReadOnly bool `json:"readOnly,omitempty"`
	// GTIDExecuted is the server's executed GTID position.
	// +optional
	GTIDExecuted string `json:"gtidExecuted,omitempty"`
	// Version is the server's full version as it reports it (@@version, for example
	// 10.11.19-MariaDB-0+deb12u1): what runs, whatever the image tag says.
	// +optional
	Version string `json:"version,omitempty"`
	// ReplicationLagSeconds is Seconds_Behind_Master of a replica, when known.
	// +optional
	ReplicationLagSeconds *int64 `json:"replicationLagSeconds,omitempty"`
	// Replicating is true when both replication threads of a replica run.
	// +optional
	Replicating bool `json:"replicating,omitempty"`
	// Error is the last observation or replication error.
	// +optional
	Error string `json:"error,omitempty"`
	// Unpublished says why a replica takes no reads through the replicas Service (too far
	// behind, its applier stopped); empty when it takes them or is no replica.
	// +optional
	Unpublished string `json:"unpublished,omitempty"`
	// CredentialsGeneration is the credentials generation this instance's accounts have.
	// It is remembered while the instance is down, so that it catches up when it answers.
	// +optional
	CredentialsGeneration string `json:"credentialsGeneration,omitempty"`
	// ReplicationCredentialsGeneration is the generation of the replication password this
	// instance connects to its source with.
	// +optional
	ReplicationCredentialsGeneration string `json:"replicationCredentialsGeneration,omitempty"`
}

// InstanceStatus is the observed state of one database instance.
type InstanceStatus struct {
	// Name of the instance's pod.
	Name string `json:"name"`
	// Role of the instance: primary, replica, or empty while unknown.
	// +optional
	Role InstanceRole `json:"role,omitempty"`
	// Ready is true when the instance's pod is ready.
	Ready bool `json:"ready"`
	// VolumeCapacity is the capacity of the instance's data volume as its claim reports it
	// (status.capacity of the PersistentVolumeClaim), for example 2Gi.
	// +optional
	VolumeCapacity *resource.Quantity `json:"volumeCapacity,omitempty"`
}

// ExternalReplication is how the cluster follows a server outside it.
type ExternalReplication struct {
	// Source is the server, host:port.
	Source string `json:"source"`
	// Instance is the instance that replicates from it (the primary), unset before one does.
	// +optional
	Instance string `json:"instance,omitempty"`
	// Replicating is true while that instance's receiver and applier both run.
	Replicating bool `json:"replicating"`
	// LagSeconds is how far behind the source it is (Seconds_Behind_Master), when known.
	// +optional
	LagSeconds *int64 `json:"lagSeconds,omitempty"`
	// Received is the GTID position it received from the source.
	// +optional
	Received string `json:"received,omitempty"`
	// Error is the last error of its replication from the source, what the server said.
	// +optional
	Error string `json:"error,omitempty"`
	// LastVerification is the last comparison of the cluster with the server (annotation
	// mysql.dolphin.dev/verify-external): every user table's checksum on both sides at one
	// GTID position of the server.
	// +optional
	LastVerification *CopyVerification `json:"lastVerification,omitempty"`
	// LastCutoverFailure is the last cutover that failed before the cluster opened: what
	// failed and what was undone. It is not tried again for the same request: set a new value
	// of mysql.dolphin.dev/cutover to try again.
	// +optional
	LastCutoverFailure *CutoverFailure `json:"lastCutoverFailure,omitempty"`
	// CutOver is the cutover, once done: the cluster no longer follows the server and takes
	// writes itself.
	// +optional
	CutOver *CutoverRecord `json:"cutOver,omitempty"`
	// Fallback is the server's replication from the cluster after the cutover
	// (spec.bootstrap.external.fallback), as the server reports it.
	// +optional
	Fallback *FallbackReplication `json:"fallback,omitempty"`
	// LastFallBackFailure is the last fall back that failed before the server opened: what
	// failed and what was undone. It is not tried again for the same request: set a new value
	// of mysql.dolphin.dev/fall-back to try again.
	// +optional
	LastFallBackFailure *CutoverFailure `json:"lastFallBackFailure,omitempty"`
	// FellBack is the fall back, once done: writes moved back to the server (Instance is the
	// server), and the cluster keeps its data up to Position, read-only.
	// +optional
	FellBack *CutoverRecord `json:"fellBack,omitempty"`
}

// FallbackReplication is how the server follows the cluster after the cutover.
type FallbackReplication struct {
	// Since is when the server was pointed at the cluster's primary.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// CredentialsGeneration is the generation of the cluster's credentials whose replication
	// password the server was given (a hash, never a password): it is pointed again when
	// they change.
	// +optional
	CredentialsGeneration string `json:"credentialsGeneration,omitempty"`
	// Replicating is true while the server's receiver and applier both run.
	Replicating bool `json:"replicating"`
	// LagSeconds is how far behind the cluster the server is, when known.
	// +optional
	LagSeconds *int64 `json:"lagSeconds,omitempty"`
	// Error is why the server does not follow the cluster: what pointing it failed with, or
	// the last error of its replication.
	// +optional
	Error string `json:"error,omitempty"`
}

// CutoverFailure is a cutover that failed before the cluster opened for writes.
type CutoverFailure struct {
	// Request is the value of the annotation that asked for it.
	Request string `json:"request"`
	// At is when it failed.
	At metav1.Time `json:"at"`
	// Error is what failed, and what was undone.
	Error string `json:"error"`
}

// CopyVerification is the outcome of a comparison of a following cluster with its server.
type CopyVerification struct {
	// Request is the value of the annotation that asked for it.
	Request string `json:"request"`
	// At is when it ended.
	At metav1.Time `json:"at"`
	// Position is the server's GTID position both sides were compared at.
	// +optional
	Position string `json:"position,omitempty"`
	// Tables is how many tables were compared.
	// +optional
	Tables int32 `json:"tables,omitempty"`
	// Mismatched are the tables whose checksums differ (schema.table): the cluster does not
	// hold what the server holds there.
	// +optional
	Mismatched []string `json:"mismatched,omitempty"`
	// Error is why the comparison could not be made; ask again with a new value.
	// +optional
	Error string `json:"error,omitempty"`
}

// CutoverRecord is the cutover of a cluster that followed the server it was copied from.
type CutoverRecord struct {
	// Instance is the instance opened for writes.
	Instance string `json:"instance"`
	// At is when it was opened.
	At metav1.Time `json:"at"`
	// Position is the server's final GTID position, which the instance held when it opened
	// (unset when the cutover was found done after an operator restart).
	// +optional
	Position string `json:"position,omitempty"`
	// WritePauseMilliseconds is how long neither the server nor the cluster took writes, as
	// the servers saw it (a client adds its reconnection).
	// +optional
	WritePauseMilliseconds int64 `json:"writePauseMilliseconds,omitempty"`
	// Warning is what a person should look at, such as a write that reached the server after
	// its fence (an account with READ_ONLY ADMIN): reconcile it by hand.
	// +optional
	Warning string `json:"warning,omitempty"`
	// IgnoredFallBackRequest is the value of mysql.dolphin.dev/fall-back already set when the
	// cluster was cut over: it never moves writes back (a manifest that carries it would
	// otherwise undo the cutover at once); set a new value to fall back.
	// +optional
	IgnoredFallBackRequest string `json:"ignoredFallBackRequest,omitempty"`
}
