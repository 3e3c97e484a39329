package controller

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// setFollowing describes a cluster that follows the server it was copied from
// (spec.bootstrap.external with replicate): the FollowingExternalSource condition from the
// engine's report (status.topology.externalSource), and — because no instance takes writes
// until the cutover — Available and Ready False with that reason rather than "no primary",
// and the phase Following once every instance is ready. A stopped replication is trouble
// (Degraded); following itself is the plan, not trouble.
func (w conditionWriter) setFollowing(o observation, h clusterHealth) {
	if !o.FollowsExternal {
		meta.RemoveStatusCondition(&w.st.Conditions, dolphinv1.ConditionFollowingExternalSource)
		return
	}
	var x *dolphinv1.ExternalReplication
	if t := w.st.Topology; t != nil {
		x = t.ExternalSource
	}
	following, reason, msg := false, "NotReplicating", "no instance replicates from the server yet"
	switch {
	case x == nil:
	case x.Instance == "":
		msg = fmt.Sprintf("no instance replicates from %s yet", x.Source)
	case !x.Replicating:
		reason, msg = "ReplicationStopped", fmt.Sprintf("%s does not replicate from %s", x.Instance, x.Source)
		if x.Error != "" {
			msg += ": " + x.Error
		}
	default:
		following, reason, msg = true, "Replicating", fmt.Sprintf("%s replicates from %s", x.Instance, x.Source)
		if x.LagSeconds != nil {
			msg += fmt.Sprintf(", %d s behind", *x.LagSeconds)
		}
		if x.Received != "" {
			msg += ", received up to " + x.Received
		}
	}
	w.set(dolphinv1.ConditionFollowingExternalSource, following, reason, msg)
	if o.Deleting || errors.As(o.StepErr, new(*userError)) {
		return
	}
	why := "the cluster follows the server it was copied from and takes writes after the cutover (docs/migrate.md)"
	w.set(dolphinv1.ConditionAvailable, false, "FollowingExternalSource", why)
	if o.StepErr == nil {
		w.set(dolphinv1.ConditionReady, false, "FollowingExternalSource", h.instances+"; "+why)
	}
	switch {
	case h.allReady && following && h.topologyProblem == nil && o.StepErr == nil:
		w.st.Phase = dolphinv1.PhaseFollowing
		w.set(dolphinv1.ConditionDegraded, false, "AsExpected", h.instances+"; "+msg)
		if p := meta.FindStatusCondition(w.st.Conditions, dolphinv1.ConditionProgressing); p != nil && p.Reason == "Bootstrapping" {
			// Established: following is where the bootstrap ends until the cutover.
			w.set(dolphinv1.ConditionProgressing, false, "Following", h.instances+"; "+msg)
		}
	case h.allReady && following:
		// Following, with trouble besides (an errant instance, a step that fails): the
		// Degraded condition set before says what.
		w.st.Phase = dolphinv1.PhaseDegraded
	case x != nil && x.Instance != "" && !x.Replicating:
		w.st.Phase = dolphinv1.PhaseDegraded
		w.set(dolphinv1.ConditionDegraded, true, reason, msg)
	}
}

// setFellBack describes a cluster whose writes moved back to the server it was cut over from
// (the annotation mysql.dolphin.dev/fall-back): retired, every instance read-only and no pod
// behind its Services — planned, not trouble: phase FellBack, Available and Ready False with
// that reason, saying what the cluster keeps.
func (w conditionWriter) setFellBack(o observation) {
	t := w.st.Topology
	if t == nil || t.ExternalSource == nil || t.ExternalSource.FellBack == nil || o.Deleting || errors.As(o.StepErr, new(*userError)) {
		return
	}
	fb := t.ExternalSource.FellBack
	msg := fmt.Sprintf("writes moved back to %s at %s (position %s); this cluster keeps its data up to there, read-only, and takes no clients: delete it, or keep it to look at",
		fb.Instance, fb.At.UTC().Format("2006-01-02T15:04:05Z"), fb.Position)
	w.set(dolphinv1.ConditionAvailable, false, "FellBack", msg)
	w.set(dolphinv1.ConditionReady, false, "FellBack", msg)
	if t.State == "FellBack" {
		// Retired as planned: no primary is what it should have.
		w.set(dolphinv1.ConditionDegraded, false, "FellBack", msg)
	}
	w.st.Phase = dolphinv1.PhaseFellBack
}
