package controller

import (
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
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
	// Bootstrap is true when spec.bootstrap names a backup to restore.
	Bootstrap bool
	// ExternalCheck is the outcome of the checks of spec.bootstrap.external this reconcile
	// ran (nil when none ran: the condition stays as it was).
	ExternalCheck *externalCheck
	// FollowsExternal is true when the cluster follows the server it was copied from until a
	// cutover (resources.FollowsExternalSource).
	FollowsExternal bool
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
// It first sums up the instances and the topology (assessHealth), then writes one condition
// after another from that assessment.
func computeStatus(o observation, now metav1.Time) dolphinv1.MySQLClusterStatus {
	st := carriedStatus(o)
	w := conditionWriter{st: &st, generation: o.Generation, now: now}
	h := assessHealth(o, &st, now)
	w.setAvailable(h)
	w.setReady(o, h)
	w.setProgressing(o, h)
	// Paused says what a paused cluster still does and what it does not.
	if o.Paused {
		w.set(ConditionPaused, true, "PausedBySpec", pausedMessage(o.FailoverEnabled))
	} else {
		meta.RemoveStatusCondition(&st.Conditions, ConditionPaused)
	}
	// CredentialsApplied, from the engine's record of each instance's credentials.
	if cp := credentialsCondition(st.Topology); cp != nil {
		w.set(ConditionCredentialsApplied, cp.reason == "Applied", cp.reason, cp.message)
	}
	w.setPhaseAndDegraded(o, h)
	applyBackupSummary(&st, o.Backups, o.BackupConfigured, o.BackupOverdue, now)
	applyArchive(&st, o, now)
	if c := certificateCondition(o.TLS, now); c != nil {
		w.set(c.Type, c.Status == metav1.ConditionTrue, c.Reason, c.Message)
	} else {
		meta.RemoveStatusCondition(&st.Conditions, ConditionCertificateExpiring)
	}
	if e := o.ExternalCheck; e != nil {
		w.set(dolphinv1.ConditionExternalSourceReady, e.ready, e.reason, e.message)
	}
	w.setFollowing(o, h)
	w.setFellBack(o)
	if rc := restoredCondition(o); rc != nil {
		w.set(rc.Type, rc.Status == metav1.ConditionTrue, rc.Reason, rc.Message)
	} else {
		meta.RemoveStatusCondition(&st.Conditions, dolphinv1.ConditionRestored)
	}
	return st
}

// carriedStatus is the status computeStatus starts from: the observed generation, the previous
// conditions, and the parts other writers own, carried over.
func carriedStatus(o observation) dolphinv1.MySQLClusterStatus {
	// A generation whose every step applied is observed; a failed step leaves the last one.
	generation := o.Generation
	if o.StepErr != nil {
		generation = o.Previous.ObservedGeneration
	}
	return dolphinv1.MySQLClusterStatus{
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
