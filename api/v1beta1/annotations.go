package v1beta1

// Requests a person makes by annotating a MySQLCluster (`kubectl dolphin` writes them too).
// They are part of the API: their names and meanings are kept as fields are.
const (
	// SwitchoverAnnotation requests a planned switchover: its value names the instance to
	// promote (a pod name), or is "auto" to let Dolphin choose the most advanced replica.
	// Dolphin removes it once the topology engine accepted the request; the outcome is
	// reported in status.topology and by a Switchover event.
	SwitchoverAnnotation = "mysql.dolphin.dev/switchover"

	// FailoverAcceptLossAnnotation, set to the name of a lost primary, lets a failover from it
	// that waits for writes no replica left holds (status.topology.message says which) promote
	// the best replica anyway: those writes are given up. It acts only while such a failover is
	// in progress, and Dolphin removes it once that failover has ended (or at once, with an
	// event, when none is in progress from that instance).
	FailoverAcceptLossAnnotation = "mysql.dolphin.dev/failover-accept-loss"

	// RecloneAnnotation set to "manual" stops Dolphin from re-cloning errant or unrecoverable
	// replicas by itself: they are reported (Degraded) and left alone. Any other value, or
	// none, is the automatic default.
	RecloneAnnotation = "mysql.dolphin.dev/reclone"

	// RecloneApprovedAnnotation names an errant instance that Dolphin may re-clone although an
	// unplanned failover replaced it as the primary (status.topology.replacedPrimaries): such
	// an instance may hold the only copy of writes it acknowledged, so it is held out until a
	// person, having looked, says so. Removed once the re-clone began.
	RecloneApprovedAnnotation = "mysql.dolphin.dev/reclone-approved"

	// CutoverAnnotation, set to any value on a cluster that follows the server it was copied
	// from (spec.bootstrap.external with replicate), moves writes to the cluster: once the
	// primary is less than 5 s behind and a replica acknowledges, Dolphin fences the server
	// (read_only, its clients' sessions ended), waits until the cluster's primary holds the
	// server's final position, stops following and opens the primary for writes;
	// status.topology.externalSource.cutOver records the position and the write pause. The
	// account needs READ_ONLY ADMIN, CONNECTION ADMIN and PROCESS on the server. A cutover
	// that fails before the primary opens is undone (the server open again, the cluster
	// following), recorded in status.topology.externalSource.lastCutoverFailure and not tried
	// again for the same value: set a new one to try again. It may stay once cut over.
	CutoverAnnotation = "mysql.dolphin.dev/cutover"

	// VerifyExternalAnnotation asks Dolphin to compare a cluster that follows the server it
	// was copied from with that server: every user table's checksum on both sides at one GTID
	// position of the server, while the server keeps taking writes (the cluster's primary
	// stops replicating meanwhile). Each new value is one request; the outcome is in
	// status.topology.externalSource.lastVerification with that value.
	VerifyExternalAnnotation = "mysql.dolphin.dev/verify-external"

	// FallBackAnnotation, set to any value on a cluster that was cut over with
	// spec.bootstrap.external.fallback, moves writes back to the server: once the server
	// replicates from the cluster less than 5 s behind, Dolphin fences the cluster's primary
	// (read_only, its clients' sessions ended), waits until the server holds the primary's
	// final position, detaches the server and opens it; the cluster then stays read-only
	// (phase FellBack). A fall back that fails before the server opens is undone, recorded in
	// status.topology.externalSource.lastFallBackFailure and not tried again for the same
	// value.
	FallBackAnnotation = "mysql.dolphin.dev/fall-back"

	// ForceRolloutAnnotation set to "true" lets a rolling restart start and continue while the
	// cluster is degraded (errant instances, a failover in progress, a topology that is not
	// Healthy, replicas not caught up, instances not ready). Pods are still restarted one at a
	// time. Dolphin never removes it: remove it once the rollout is done, or every later
	// rollout is forced too.
	ForceRolloutAnnotation = "mysql.dolphin.dev/force-rollout"
)
