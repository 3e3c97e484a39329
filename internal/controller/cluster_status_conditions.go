package controller

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// The conditions computeStatus writes, each from one assessment of the instances and the
// topology (clusterHealth): Available, Ready, Progressing, then the phase and Degraded.

// conditionWriter sets the conditions of one status, stamped with the observed generation and
// the time of the reconcile.
type conditionWriter struct {
	st         *dolphinv1.MySQLClusterStatus
	generation int64
	now        metav1.Time
}

func (w conditionWriter) set(typ string, status bool, reason, msg string) {
	s := metav1.ConditionFalse
	if status {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&w.st.Conditions, metav1.Condition{
		Type: typ, Status: s, Reason: reason, Message: msg,
		ObservedGeneration: w.generation, LastTransitionTime: w.now,
	})
}

// clusterHealth is what the conditions are written from: the instances and the topology,
// summed up once.
type clusterHealth struct {
	topo *dolphinv1.TopologyStatus
	// primaries are the pods labeled primary (not being deleted), sorted.
	primaries    []string
	primaryReady bool
	allReady     bool
	// topologyProblem is an errant instance, a semi-sync fallback or a re-clone that waits.
	topologyProblem *problem
	ready           bool
	wasAvailable    bool
	// instances is "n/m instances ready", with why the others are not.
	instances     string
	waits         []instanceWait
	switchingOver bool
	// planned: not ready only because of planned work (docs/design/0053).
	planned bool
}

// assessHealth fills st's instances, ready count and current primary from o, and sums up the
// rest for the conditions.
func assessHealth(o observation, st *dolphinv1.MySQLClusterStatus, now metav1.Time) clusterHealth {
	h := clusterHealth{topo: st.Topology}
	h.primaries = listInstances(o, st)
	h.primaryReady = setCurrentPrimary(st, h.primaries)
	h.allReady = st.ReadyInstances == o.Replicas && len(o.Pods) == int(o.Replicas)
	// Errant instances and a semi-sync fallback leave the cluster short of what Ready
	// promises (every instance a usable replica; acknowledged writes on a replica).
	h.topologyProblem = topologyProblem(h.topo, o.Durability)
	if o.RecloneWait != "" {
		// More precise than the errant instance it is about: what Dolphin waits for.
		h.topologyProblem = &problem{"RecloneWaits", o.RecloneWait}
	}
	h.ready = h.primaryReady && h.allReady && h.topologyProblem == nil && o.StepErr == nil
	h.wasAvailable = meta.IsStatusConditionTrue(o.Previous.Conditions, dolphinv1.ConditionAvailable) ||
		o.Previous.Phase == dolphinv1.PhaseRunning || o.Previous.Phase == dolphinv1.PhaseDegraded ||
		o.Previous.Phase == dolphinv1.PhaseProgressing
	h.instances = fmt.Sprintf("%d/%d instances ready", st.ReadyInstances, o.Replicas)
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
	h.waits = explainNotReady(o.StatefulSetName, o.Pods, o.Replicas, h.topo, progressingSince, wasMissing, now.Time)
	h.switchingOver = h.topo != nil && h.topo.State == "Switchover" && len(h.primaries) <= 1
	h.planned = h.onlyPlannedWork(o)
	if len(h.waits) > 0 {
		h.instances += " (" + describeWaits(h.waits) + ")"
	}
	return h
}

// listInstances fills st's instances (sorted by name) and ready count from o's pods, and
// returns the pods labeled primary that are not being deleted, sorted.
func listInstances(o observation, st *dolphinv1.MySQLClusterStatus) []string {
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
	return primaries
}

// setCurrentPrimary sets st.CurrentPrimary and reports whether that primary's pod is ready.
// The engine's record names the primary; its pod's label (derived from the same record) is
// what the primary Service follows. Without an engine record, the label alone.
func setCurrentPrimary(st *dolphinv1.MySQLClusterStatus, primaries []string) bool {
	record := ""
	if st.Topology != nil {
		record = st.Topology.Primary
	}
	ready := false
	if len(primaries) == 1 && (record == "" || record == primaries[0]) {
		st.CurrentPrimary = primaries[0]
		for _, in := range st.Instances {
			ready = ready || (in.Name == primaries[0] && in.Ready)
		}
	} else if record != "" && len(primaries) == 0 {
		st.CurrentPrimary = record
	}
	return ready
}

// onlyPlannedWork reports whether the cluster falls short of ready only because of planned
// work: nothing failed, no topology problem, stall or risk, at most one primary, and every
// instance not ready waits for planned work — or the primary role is moving in a switchover
// of a cluster that was available.
func (h clusterHealth) onlyPlannedWork(o observation) bool {
	if h.ready || o.StepErr != nil || h.topologyProblem != nil || len(h.primaries) > 1 || h.stalled() || riskProblem(h.topo) != nil {
		return false
	}
	if h.primaryReady {
		return plannedOnly(h.waits)
	}
	return h.switchingOver && h.wasAvailable && (h.allReady || plannedOnly(h.waits))
}

// writesAtRisk is, first, commits stalled for an acknowledgement no replica gives (what
// clients feel), then acknowledged writes that exist on one server only (what a failover
// could lose); nil when neither.
func (h clusterHealth) writesAtRisk(durability dolphinv1.Durability) *problem {
	if h.stalled() {
		return stallProblem(durability)
	}
	return riskProblem(h.topo)
}

// stalled reports whether the primary's commits wait for an acknowledgement no replica gives.
func (h clusterHealth) stalled() bool {
	return h.topo != nil && (h.topo.NoSemiSyncReplica || h.topo.CommitsWaiting)
}

// setAvailable: a writable primary.
func (w conditionWriter) setAvailable(h clusterHealth) {
	switch {
	case h.primaryReady:
		w.set(dolphinv1.ConditionAvailable, true, "PrimaryReady", fmt.Sprintf("primary %s accepts writes", w.st.CurrentPrimary))
	case len(h.primaries) > 1:
		w.set(dolphinv1.ConditionAvailable, false, "MultiplePrimaries", "pods "+strings.Join(h.primaries, ", ")+" are all labeled primary")
	case len(h.primaries) == 1:
		w.set(dolphinv1.ConditionAvailable, false, "PrimaryNotReady", fmt.Sprintf("primary %s is not ready", h.primaries[0]))
	default:
		w.set(dolphinv1.ConditionAvailable, false, "NoPrimary", noPrimaryMessage(h.topo))
	}
}

// setReady: everything the spec asks for runs, or the first thing that does not.
func (w conditionWriter) setReady(o observation, h clusterHealth) {
	switch {
	case h.ready:
		w.set(dolphinv1.ConditionReady, true, "AllInstancesReady", h.instances+" and the primary accepts writes")
	case o.StepErr != nil:
		w.set(dolphinv1.ConditionReady, false, "ReconcileError", "applying the spec failed: "+o.StepErr.Error())
	case !h.primaryReady:
		w.set(dolphinv1.ConditionReady, false, "PrimaryNotAvailable", h.instances+"; no writable primary"+whyNoPrimary(h.topo))
	case h.writesAtRisk(o.Durability) != nil:
		// Said before the instances that are not ready: what clients feel, then what a
		// failover could lose.
		p := h.writesAtRisk(o.Durability)
		w.set(dolphinv1.ConditionReady, false, p.reason, h.instances+"; "+p.message)
	case !h.allReady:
		w.set(dolphinv1.ConditionReady, false, "InstancesNotReady", h.instances)
	default:
		w.set(dolphinv1.ConditionReady, false, h.topologyProblem.reason, h.topologyProblem.message)
	}
}

// setProgressing: planned work under way (a rollout, volumes growing, instances starting, a
// switchover), or none.
func (w conditionWriter) setProgressing(o observation, h clusterHealth) {
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
		w.set(dolphinv1.ConditionProgressing, false, "Paused", "spec.paused is true: Dolphin applies no change until it is false (condition Paused says what still runs)")
	case errors.As(o.StepErr, new(*userError)):
		// Set once, by setPhaseAndDegraded with the user error: setting it True first would
		// move its lastTransitionTime at every reconcile.
	case o.StepErr != nil:
		w.set(dolphinv1.ConditionProgressing, true, "ReconcileError", "retrying: "+o.StepErr.Error())
	case !settled:
		w.set(dolphinv1.ConditionProgressing, true, "RollingOut", rollout)
	case !volumesDone:
		w.set(dolphinv1.ConditionProgressing, true, "VolumesExpanding", volumesMsg)
	case !h.ready && !h.wasAvailable:
		w.set(dolphinv1.ConditionProgressing, true, "Bootstrapping", h.instances+"; waiting for the topology to be established")
	case h.planned && h.switchingOver:
		w.set(dolphinv1.ConditionProgressing, true, "SwitchingOver", "moving the primary role: "+h.instances)
	case h.planned:
		w.set(dolphinv1.ConditionProgressing, true, "InstancesStarting", h.instances)
	default:
		w.set(dolphinv1.ConditionProgressing, false, "Reconciled", "the cluster's objects match the spec")
	}
}

// setPhaseAndDegraded sets the phase and Degraded (trouble, as opposed to planned work); a
// user error also overrides Ready and Progressing with what to change.
func (w conditionWriter) setPhaseAndDegraded(o observation, h clusterHealth) {
	st := w.st
	var ue *userError
	switch {
	case o.Deleting:
		st.Phase = dolphinv1.PhaseDeleting
	case errors.As(o.StepErr, &ue):
		st.Phase = dolphinv1.PhaseFailed
		if o.StepErrSideOnly && (h.primaryReady || h.wasAvailable) {
			// The cluster runs, and so do failover, backups and the archive: only the part
			// the user must fix waits. Its condition says what to change.
			st.Phase = dolphinv1.PhaseDegraded
		}
		w.set(dolphinv1.ConditionDegraded, true, ue.Reason, ue.Message)
		w.set(dolphinv1.ConditionReady, false, ue.Reason, ue.Message)
		w.set(dolphinv1.ConditionProgressing, false, ue.Reason, "blocked until the spec or the referenced objects are fixed")
	case h.ready:
		st.Phase = dolphinv1.PhaseRunning
	case h.planned:
		st.Phase = dolphinv1.PhaseProgressing
	case h.primaryReady || h.wasAvailable:
		st.Phase = dolphinv1.PhaseDegraded
	case st.ReadyInstances == 0:
		st.Phase = dolphinv1.PhasePending
	default:
		st.Phase = dolphinv1.PhaseInitializing
	}
	if ue != nil {
		return
	}
	switch {
	case o.StepErr != nil:
		w.set(dolphinv1.ConditionDegraded, true, "ReconcileError", o.StepErr.Error())
	case len(h.primaries) > 1:
		w.set(dolphinv1.ConditionDegraded, true, "MultiplePrimaries", "more than one pod is labeled primary")
	case h.planned:
		w.set(dolphinv1.ConditionDegraded, false, "PlannedChange", h.instances)
	case h.wasAvailable && !h.primaryReady:
		w.set(dolphinv1.ConditionDegraded, true, "PrimaryUnavailable", "the primary is not available; "+h.instances+whyNoPrimary(h.topo))
	case h.writesAtRisk(o.Durability) != nil:
		p := h.writesAtRisk(o.Durability)
		w.set(dolphinv1.ConditionDegraded, true, p.reason, h.instances+"; "+p.message)
	case st.Phase == dolphinv1.PhaseDegraded && !h.allReady && (h.topologyProblem == nil || !plannedOnly(h.waits)):
		// Instances not ready for planned work are not the trouble a topology problem is.
		w.set(dolphinv1.ConditionDegraded, true, "InstancesNotReady", h.instances)
	case h.topologyProblem != nil:
		w.set(dolphinv1.ConditionDegraded, true, h.topologyProblem.reason, h.topologyProblem.message)
	default:
		w.set(dolphinv1.ConditionDegraded, false, "AsExpected", h.instances)
	}
}
