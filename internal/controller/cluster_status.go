package controller

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// userError is a problem only a change by the user can fix (a missing Secret, a key the
// schema should have rejected). It sets phase Failed and says what to change.
type userError struct {
	Reason  string // CamelCase condition reason
	Message string // what is wrong and what to change
}

func (e *userError) Error() string { return e.Message }

// observation is everything computeStatus looks at. It is gathered by the reconciler; the
// computation itself is a pure function so that it can be table-tested.
type observation struct {
	Generation int64
	Replicas   int32
	Deleting   bool
	Paused     bool
	// FailoverEnabled is spec.failover.enabled, defaulted.
	FailoverEnabled bool
	StatefulSet     *appsv1.StatefulSet // nil when it does not exist yet
	Pods            []corev1.Pod        // the cluster's pods
	StepErr         error               // the first failed reconcile step, if any
	// StepErrSideOnly: StepErr comes from independent steps only (step.independent): every
	// other step ran. A user error there is Degraded with its reason, not Failed.
	StepErrSideOnly bool
	Previous        dolphinv1.MySQLClusterStatus

	// Claims are the data claims of the instances that run (instanceClaims in cluster_storage.go).
	Claims []corev1.PersistentVolumeClaim
	// VolumeSize is the data volume size the spec asks for (zero: not checked).
	VolumeSize resource.Quantity
	// ForceRollout is true when the user forces a rolling restart (ForceRolloutAnnotation).
	ForceRollout bool
	// EngineUpgrades is true when restarted instances get their system tables upgraded
	// (MariaDB) before a rollout goes on (rolloutInput.EngineUpgrades).
	EngineUpgrades bool
	// Backups are the cluster's MySQLBackups; BackupConfigured is true when spec.backup is set.
	Backups          []dolphinv1.MySQLBackup
	BackupConfigured bool
	// BackupOverdue says why the scheduled slot that is due has no backup (backupOverdue), or "".
	BackupOverdue string
	// Bootstrap is true when spec.bootstrap is set.
	Bootstrap bool
	// Archiving is true when continuous archiving is on; ArchiveResult is the archive step's
	// last result, when ArchiveObserved (cluster_binlog_archive.go).
	Archiving       bool
	ArchiveObserved bool
	ArchiveResult   archiveResult
	// TLS is the certificate the TLS step found or issued (nil when TLS is off).
	TLS *dolphinv1.TLSStatus
	// StatefulSetName names the instances' pods (<name>-<ordinal>) that do not exist yet.
	StatefulSetName string
	// Durability is spec.durability, defaulted.
	Durability dolphinv1.Durability
	// RecloneWait says why an instance to re-clone waits (no copy of what it holds beyond
	// the primary could be kept), or "".
	RecloneWait string
}

// computeStatus derives the status from an observation. now stamps condition transitions.
func computeStatus(o observation, now metav1.Time) dolphinv1.MySQLClusterStatus {
	// A generation whose every step applied is observed; a failed step leaves the last one.
	generation := o.Generation
	if o.StepErr != nil {
		generation = o.Previous.ObservedGeneration
	}
	st := dolphinv1.MySQLClusterStatus{
		ObservedGeneration: generation,
		Conditions:         append([]metav1.Condition(nil), o.Previous.Conditions...),
		// The topology engine owns this part; the reconciler carries it over untouched.
		Topology: o.Previous.Topology.DeepCopy(),
		// The bootstrap step owns this part (cluster_bootstrap.go).
		RestoredFrom: o.Previous.RestoredFrom.DeepCopy(),
		// The re-clone step owns these parts (cluster_reclone.go, cluster_reclone_keep.go).
		LastReclone:      o.Previous.LastReclone.DeepCopy(),
		KeptTransactions: append([]dolphinv1.KeptTransactions(nil), o.Previous.KeptTransactions...),
		// The TLS step's (cluster_tls.go).
		TLS: o.TLS.DeepCopy(),
	}
	set := func(typ string, status bool, reason, msg string) {
		s := metav1.ConditionFalse
		if status {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: typ, Status: s, Reason: reason, Message: msg,
			ObservedGeneration: o.Generation, LastTransitionTime: now,
		})
	}

	var primaries []string
	for _, p := range o.Pods {
		ready := podReady(&p)
		role := dolphinv1.InstanceRole(p.Labels[resources.RoleLabel])
		st.Instances = append(st.Instances, dolphinv1.InstanceStatus{Name: p.Name, Role: role, Ready: ready,
			VolumeCapacity: volumeCapacityOf(o.Claims, p.Name)})
		if ready {
			st.ReadyInstances++
		}
		if role == dolphinv1.RolePrimary && p.DeletionTimestamp == nil {
			primaries = append(primaries, p.Name)
		}
	}
	sort.Slice(st.Instances, func(i, j int) bool { return st.Instances[i].Name < st.Instances[j].Name })
	sort.Strings(primaries)

	// The engine's record names the primary; its pod's label (derived from the same record)
	// is what the primary Service follows. Without an engine record, the label alone.
	topo := st.Topology
	record := ""
	if topo != nil {
		record = topo.Primary
	}
	primaryReady := false
	if len(primaries) == 1 && (record == "" || record == primaries[0]) {
		st.CurrentPrimary = primaries[0]
		for _, in := range st.Instances {
			primaryReady = primaryReady || (in.Name == primaries[0] && in.Ready)
		}
	} else if record != "" && len(primaries) == 0 {
		st.CurrentPrimary = record
	}
	allReady := st.ReadyInstances == o.Replicas && len(o.Pods) == int(o.Replicas)
	// Errant instances and a semi-sync fallback leave the cluster short of what Ready
	// promises (every instance a usable replica; acknowledged writes on a replica).
	topologyProblem := topologyProblem(topo, o.Durability)
	if o.RecloneWait != "" {
		// More precise than the errant instance it is about: what Dolphin waits for.
		topologyProblem = &problem{"RecloneWaits", o.RecloneWait}
	}
	ready := primaryReady && allReady && topologyProblem == nil && o.StepErr == nil
	wasAvailable := meta.IsStatusConditionTrue(o.Previous.Conditions, dolphinv1.ConditionAvailable) ||
		o.Previous.Phase == dolphinv1.PhaseRunning || o.Previous.Phase == dolphinv1.PhaseDegraded ||
		o.Previous.Phase == dolphinv1.PhaseProgressing
	instances := fmt.Sprintf("%d/%d instances ready", st.ReadyInstances, o.Replicas)
	// Instances not ready because of planned work (a rollout, a deleted pod, a new or
	// re-cloned instance starting, a switchover) are not trouble (docs/design/0053): when
	// nothing else is wrong, the phase is Progressing and Degraded stays False.
	var progressingSince time.Time
	if pc := meta.FindStatusCondition(o.Previous.Conditions, dolphinv1.ConditionProgressing); pc != nil && pc.Status == metav1.ConditionTrue {
		progressingSince = pc.LastTransitionTime.Time
	}
	wasMissing := func(name string) bool {
		return len(o.Previous.Instances) > 0 && !slices.ContainsFunc(o.Previous.Instances, func(in dolphinv1.InstanceStatus) bool { return in.Name == name })
	}
	waits := explainNotReady(o.StatefulSetName, o.Pods, o.Replicas, topo, progressingSince, wasMissing, now.Time)
	switchingOver := topo != nil && topo.State == "Switchover" && len(primaries) <= 1
	planned := !ready && o.StepErr == nil && topologyProblem == nil && len(primaries) <= 1 &&
		(topo == nil || !(topo.NoSemiSyncReplica || topo.CommitsWaiting)) && riskProblem(topo) == nil &&
		(primaryReady && plannedOnly(waits) || !primaryReady && switchingOver && wasAvailable && (allReady || plannedOnly(waits)))
	if len(waits) > 0 {
		instances += " (" + describeWaits(waits) + ")"
	}

	// Available.
	switch {
	case primaryReady:
		set(dolphinv1.ConditionAvailable, true, "PrimaryReady", fmt.Sprintf("primary %s accepts writes", st.CurrentPrimary))
	case len(primaries) > 1:
		set(dolphinv1.ConditionAvailable, false, "MultiplePrimaries", "pods "+strings.Join(primaries, ", ")+" are all labeled primary")
	case len(primaries) == 1:
		set(dolphinv1.ConditionAvailable, false, "PrimaryNotReady", fmt.Sprintf("primary %s is not ready", primaries[0]))
	default:
		set(dolphinv1.ConditionAvailable, false, "NoPrimary", noPrimaryMessage(topo))
	}

	// Ready.
	switch {
	case ready:
		set(dolphinv1.ConditionReady, true, "AllInstancesReady", instances+" and the primary accepts writes")
	case o.StepErr != nil:
		set(dolphinv1.ConditionReady, false, "ReconcileError", "applying the spec failed: "+o.StepErr.Error())
	case !primaryReady:
		set(dolphinv1.ConditionReady, false, "PrimaryNotAvailable", instances+"; no writable primary"+whyNoPrimary(topo))
	case topo != nil && (topo.NoSemiSyncReplica || topo.CommitsWaiting):
		// Said before the instances that are not ready: what clients feel is the stall.
		stall := stallProblem(o.Durability)
		set(dolphinv1.ConditionReady, false, stall.reason, instances+"; "+stall.message)
	case riskProblem(topo) != nil:
		// Then acknowledged writes that exist on one server only: what a failover could lose.
		risk := riskProblem(topo)
		set(dolphinv1.ConditionReady, false, risk.reason, instances+"; "+risk.message)
	case !allReady:
		set(dolphinv1.ConditionReady, false, "InstancesNotReady", instances)
	default:
		set(dolphinv1.ConditionReady, false, topologyProblem.reason, topologyProblem.message)
	}

	// Progressing.
	settled, rollout := statefulSetSettled(o.StatefulSet, o.Replicas)
	if msg := rolloutProgress(o.StatefulSet, o.Pods, o.Previous.Topology, o.ForceRollout, o.EngineUpgrades); msg != "" {
		settled, rollout = false, msg // names the instance the rollout restarts or waits for
	}
	volumesDone, volumesMsg := true, ""
	if !o.VolumeSize.IsZero() {
		volumesDone, volumesMsg = volumeProgress(o.Claims, o.VolumeSize)
	}
	switch {
	case o.Paused:
		set(dolphinv1.ConditionProgressing, false, "Paused", "spec.paused is true: Dolphin applies no change until it is false (condition Paused says what still runs)")
	case errors.As(o.StepErr, new(*userError)):
		// Set once, below, with the user error: setting it True first would move its
		// lastTransitionTime at every reconcile.
	case o.StepErr != nil:
		set(dolphinv1.ConditionProgressing, true, "ReconcileError", "retrying: "+o.StepErr.Error())
	case !settled:
		set(dolphinv1.ConditionProgressing, true, "RollingOut", rollout)
	case !volumesDone:
		set(dolphinv1.ConditionProgressing, true, "VolumesExpanding", volumesMsg)
	case !ready && !wasAvailable:
		set(dolphinv1.ConditionProgressing, true, "Bootstrapping", instances+"; waiting for the topology to be established")
	case planned && switchingOver:
		set(dolphinv1.ConditionProgressing, true, "SwitchingOver", "moving the primary role: "+instances)
	case planned:
		set(dolphinv1.ConditionProgressing, true, "InstancesStarting", instances)
	default:
		set(dolphinv1.ConditionProgressing, false, "Reconciled", "the cluster's objects match the spec")
	}

	// Paused says what a paused cluster still does and what it does not.
	if o.Paused {
		set(ConditionPaused, true, "PausedBySpec", pausedMessage(o.FailoverEnabled))
	} else {
		meta.RemoveStatusCondition(&st.Conditions, ConditionPaused)
	}

	// CredentialsApplied, from the engine's record of each instance's credentials.
	if cp := credentialsCondition(st.Topology); cp != nil {
		set(ConditionCredentialsApplied, cp.reason == "Applied", cp.reason, cp.message)
	}

	// Degraded, and the phase.
	var ue *userError
	switch {
	case o.Deleting:
		st.Phase = dolphinv1.PhaseDeleting
	case errors.As(o.StepErr, &ue):
		st.Phase = dolphinv1.PhaseFailed
		if o.StepErrSideOnly && (primaryReady || wasAvailable) {
			// The cluster runs, and so do failover, backups and the archive: only the part
			// the user must fix waits. Its condition says what to change.
			st.Phase = dolphinv1.PhaseDegraded
		}
		set(dolphinv1.ConditionDegraded, true, ue.Reason, ue.Message)
		set(dolphinv1.ConditionReady, false, ue.Reason, ue.Message)
		set(dolphinv1.ConditionProgressing, false, ue.Reason, "blocked until the spec or the referenced objects are fixed")
	case ready:
		st.Phase = dolphinv1.PhaseRunning
	case planned:
		st.Phase = dolphinv1.PhaseProgressing
	case primaryReady || wasAvailable:
		st.Phase = dolphinv1.PhaseDegraded
	case st.ReadyInstances == 0:
		st.Phase = dolphinv1.PhasePending
	default:
		st.Phase = dolphinv1.PhaseInitializing
	}
	if ue == nil {
		switch {
		case o.StepErr != nil:
			set(dolphinv1.ConditionDegraded, true, "ReconcileError", o.StepErr.Error())
		case len(primaries) > 1:
			set(dolphinv1.ConditionDegraded, true, "MultiplePrimaries", "more than one pod is labeled primary")
		case planned:
			set(dolphinv1.ConditionDegraded, false, "PlannedChange", instances)
		case wasAvailable && !primaryReady:
			set(dolphinv1.ConditionDegraded, true, "PrimaryUnavailable", "the primary is not available; "+instances+whyNoPrimary(topo))
		case topo != nil && (topo.NoSemiSyncReplica || topo.CommitsWaiting):
			stall := stallProblem(o.Durability)
			set(dolphinv1.ConditionDegraded, true, stall.reason, instances+"; "+stall.message)
		case riskProblem(topo) != nil:
			risk := riskProblem(topo)
			set(dolphinv1.ConditionDegraded, true, risk.reason, instances+"; "+risk.message)
		case st.Phase == dolphinv1.PhaseDegraded && !allReady && (topologyProblem == nil || !plannedOnly(waits)):
			// Instances not ready for planned work are not the trouble a topology problem is.
			set(dolphinv1.ConditionDegraded, true, "InstancesNotReady", instances)
		case topologyProblem != nil:
			set(dolphinv1.ConditionDegraded, true, topologyProblem.reason, topologyProblem.message)
		default:
			set(dolphinv1.ConditionDegraded, false, "AsExpected", instances)
		}
	}
	applyBackupSummary(&st, o.Backups, o.BackupConfigured, o.BackupOverdue, now)
	applyArchive(&st, o, now)
	if c := certificateCondition(o.TLS, now); c != nil {
		set(c.Type, c.Status == metav1.ConditionTrue, c.Reason, c.Message)
	} else {
		meta.RemoveStatusCondition(&st.Conditions, ConditionCertificateExpiring)
	}
	if rc := restoredCondition(o); rc != nil {
		set(rc.Type, rc.Status == metav1.ConditionTrue, rc.Reason, rc.Message)
	} else {
		meta.RemoveStatusCondition(&st.Conditions, dolphinv1.ConditionRestored)
	}
	return st
}

// noPrimaryMessage says why no pod is labeled primary: a switchover or failover moving the
// role (planned work must not read as a cluster that never had a primary), or none elected yet.
func noPrimaryMessage(t *dolphinv1.TopologyStatus) string {
	switch {
	case t != nil && t.SwitchoverInProgress != nil && t.SwitchoverInProgress.To != "":
		s := t.SwitchoverInProgress
		return fmt.Sprintf("a planned switchover moves the primary role from %s to %s: no pod is labeled primary until %s is promoted", s.From, s.To, s.To)
	case t != nil && t.FailoverInProgress != nil:
		return fmt.Sprintf("failing over from %s: no pod is labeled primary until a replica is promoted", t.FailoverInProgress.From)
	}
	return "no pod is labeled primary yet; the topology engine elects one once instances run"
}

// whyNoPrimary is the engine's explanation, after "; ", when it says the primary is lost and
// cannot be replaced (automatic failover off, no healthy candidate, a failover waiting for
// writes only the lost primary holds); "" otherwise.
func whyNoPrimary(t *dolphinv1.TopologyStatus) string {
	if t == nil || t.State != "PrimaryLost" || t.Message == "" {
		return ""
	}
	return "; " + t.Message
}

// problem is a condition reason and the message that explains it.
type problem struct{ reason, message string }

// topologyProblem is what the engine's record shows wrong in a cluster whose pods are all
// fine, or nil.
func topologyProblem(t *dolphinv1.TopologyStatus, durability dolphinv1.Durability) *problem {
	switch {
	case t == nil:
		return nil
	case t.AcknowledgedAlone != nil && !t.SemiSyncFallback:
		// Semi-sync is back, but no replica holds yet what was acknowledged alone.
		a := t.AcknowledgedAlone
		return &problem{"AcknowledgedAlone", fmt.Sprintf("%s acknowledged writes alone since %s (up to %s) that no replica holds yet: "+
			"a failover from it waits for it or for your consent until one does; check that the replicas run and catch up",
			a.Primary, a.Since.UTC().Format(time.RFC3339), a.UpTo)}
	case len(t.ErrantInstances) > 0 || len(diverged1236(t)) > 0:
		var held, others []string
		for _, n := range t.ErrantInstances {
			if slices.Contains(t.ReplacedPrimaries, n) {
				held = append(held, n)
			} else {
				others = append(others, n)
			}
		}
		for _, n := range diverged1236(t) {
			if !slices.Contains(held, n) {
				held = append(held, n)
			}
		}
		var msgs []string
		for _, n := range held {
			pos := ""
			if i := slices.IndexFunc(t.Instances, func(in dolphinv1.InstanceTopology) bool { return in.Name == n }); i >= 0 && t.Instances[i].GTIDExecuted != "" {
				pos = " (its position " + t.Instances[i].GTIDExecuted + ")"
			}
			msgs = append(msgs, n+" was the primary before an unplanned failover and holds transactions the primary lacks"+pos+
				": they may be writes it acknowledged, so Dolphin keeps it out of the topology and re-clones it only after keeping a copy "+
				"of those transactions (status.keptTransactions, to review and put back with `dolphin kept`), and only once you annotate the cluster "+
				RecloneApprovedAnnotation+"="+n+" (or by itself with spec.failover.errantFormerPrimary RecloneAfterCopy)")
		}
		if len(others) > 0 {
			msgs = append(msgs, strings.Join(others, ", ")+
				" hold transactions the primary lacks and are kept out of the topology; Dolphin keeps a copy of those transactions (status.keptTransactions), then re-clones them from a healthy peer (status.lastReclone says what), unless the cluster has "+RecloneAnnotation+"=manual")
		}
		reason := "ErrantInstances"
		if len(held) > 0 {
			reason = "ErrantFormerPrimary"
		}
		return &problem{reason, strings.Join(msgs, "; ")}
	case t.SemiSyncFallback:
		return &problem{"SemiSyncFallback",
			"the primary acknowledges writes no replica has received (semi-sync fell back, spec.durability Preferred): " +
				"a failover now waits for it or for your consent; check that the replicas run and catch up"}
	case t.NoSemiSyncReplica || t.CommitsWaiting:
		return stallProblem(durability)
	}
	return nil
}

// diverged1236 are the former primaries (status.topology.replacedPrimaries) that cannot
// replicate because the primary lacks the binary logs they ask for (error 1236): with
// MariaDB's sequence-number comparison, a history that diverged can show so rather than as
// errant. They are held like errant ones.
func diverged1236(t *dolphinv1.TopologyStatus) []string {
	var out []string
	for _, in := range t.Instances {
		if slices.Contains(t.ReplacedPrimaries, in.Name) && !slices.Contains(t.ErrantInstances, in.Name) && strings.Contains(in.Error, "1236") {
			out = append(out, in.Name)
		}
	}
	return out
}

// riskProblem is the problem of acknowledged writes that may exist on one server only (a
// semi-sync fallback, or writes acknowledged alone that no replica holds yet), or nil. The
// Ready and Degraded conditions say it before instances that are not ready.
func riskProblem(t *dolphinv1.TopologyStatus) *problem {
	if t == nil || (!t.SemiSyncFallback && t.AcknowledgedAlone == nil) {
		return nil
	}
	return topologyProblem(&dolphinv1.TopologyStatus{SemiSyncFallback: t.SemiSyncFallback, AcknowledgedAlone: t.AcknowledgedAlone}, "")
}

// stallProblem says that commits wait for a replica's acknowledgement, and what follows under
// spec.durability. The Ready and Degraded conditions put it before any other problem: it is
// what clients feel.
func stallProblem(durability dolphinv1.Durability) *problem {
	if durability == dolphinv1.DurabilityPreferred {
		return &problem{"NoSemiSyncReplica",
			"no replica acknowledges writes: commits on the primary wait for one for 30 s, then it acknowledges them alone (spec.durability Preferred); check why the replicas are down (status.topology.instances)"}
	}
	return &problem{"WritesWaitForReplica",
		"no replica acknowledges writes: commits on the primary wait until one does, and none is acknowledged before (spec.durability Required); check why the replicas are down or behind (status.topology.instances)"}
}

// statefulSetSettled reports whether the StatefulSet controller has rolled out the current
// spec to every replica, and if not, a message saying what is pending.
func statefulSetSettled(sts *appsv1.StatefulSet, replicas int32) (bool, string) {
	switch {
	case sts == nil:
		return false, "creating the StatefulSet"
	case sts.Status.ObservedGeneration < sts.Generation:
		return false, "the StatefulSet controller has not observed the latest spec yet"
	case sts.Status.Replicas != replicas:
		return false, fmt.Sprintf("scaling from %d to %d instances", sts.Status.Replicas, replicas)
	case sts.Status.UpdatedReplicas != replicas || sts.Status.CurrentRevision != sts.Status.UpdateRevision:
		return false, fmt.Sprintf("rolling out: %d/%d instances updated", sts.Status.UpdatedReplicas, replicas)
	}
	return true, ""
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// applyArchive puts the archive step's result into a status being computed: removed when
// archiving is off, the previous one kept until the step has run.
func applyArchive(st *dolphinv1.MySQLClusterStatus, o observation, now metav1.Time) {
	if !o.Archiving {
		meta.RemoveStatusCondition(&st.Conditions, dolphinv1.ConditionContinuousArchiving)
		return
	}
	var archive *dolphinv1.ArchiveStatus
	if o.Previous.Backup != nil {
		archive = o.Previous.Backup.Archive.DeepCopy()
	}
	if o.ArchiveObserved {
		archive = o.ArchiveResult.status.DeepCopy()
		if c := o.ArchiveResult.cond; c != nil {
			cond := *c
			cond.ObservedGeneration, cond.LastTransitionTime = o.Generation, now
			meta.SetStatusCondition(&st.Conditions, cond)
		}
	}
	if archive == nil {
		return
	}
	if st.Backup == nil {
		st.Backup = &dolphinv1.BackupStatus{}
	}
	st.Backup.Archive = archive
}

// ConditionCertificateExpiring is True while the instances' TLS certificate expires within
// CertificateWarning (Dolphin renews its own well before; yours must be renewed by you).
const ConditionCertificateExpiring = "CertificateExpiring"

// CertificateWarning is how long before its end a certificate is reported as expiring.
const CertificateWarning = 14 * 24 * time.Hour

// certificateCondition is the CertificateExpiring condition of the certificate in use, or nil
// when TLS is off.
func certificateCondition(t *dolphinv1.TLSStatus, now metav1.Time) *metav1.Condition {
	if t == nil || t.NotAfter == nil {
		return nil
	}
	left := t.NotAfter.Sub(now.Time)
	c := &metav1.Condition{Type: ConditionCertificateExpiring, Status: metav1.ConditionFalse, Reason: "Valid",
		Message: fmt.Sprintf("the certificate in Secret %s is valid until %s", t.Secret, t.NotAfter.UTC().Format(time.RFC3339))}
	switch {
	case left <= 0:
		c.Status, c.Reason = metav1.ConditionTrue, "Expired"
		c.Message = fmt.Sprintf("the certificate in Secret %s expired at %s: clients verifying the server are refused; replace it", t.Secret, t.NotAfter.UTC().Format(time.RFC3339))
	case left < CertificateWarning:
		c.Status, c.Reason = metav1.ConditionTrue, "ExpiresSoon"
		c.Message = fmt.Sprintf("the certificate in Secret %s expires at %s (in %s): renew it (Dolphin renews the certificates it issues itself; yours are yours to renew)",
			t.Secret, t.NotAfter.UTC().Format(time.RFC3339), left.Round(time.Hour))
	}
	return c
}

// ConditionPaused is True while spec.paused is: its message says what Dolphin stops and
// what it keeps doing.
const ConditionPaused = "Paused"

// pausedMessage says what spec.paused stops and what still runs.
func pausedMessage(failover bool) string {
	still := "it still fails over a lost primary (spec.failover.enabled: false turns that off), fences a second writable server and reports status"
	if !failover {
		still = "failover is off too (spec.failover.enabled: false); it still fences a second writable server and reports status"
	}
	return "spec.paused is true: Dolphin changes no Kubernetes object (no rollout, scaling or volume growth), takes no scheduled backup, " +
		"and repairs, tunes or switches over nothing in the databases until it is false; a deleted pod's server stops without a switchover; " + still
}
