package controller

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// ForceRolloutAnnotation is the API's (dolphinv1).
const ForceRolloutAnnotation = dolphinv1.ForceRolloutAnnotation

// topologyHealthy is the engine's state when every replica replicates from the primary.
const topologyHealthy = "Healthy"

// rolloutInput is what a rollout decision looks at; every part of it is observed state, so
// a restarted operator decides the same.
type rolloutInput struct {
	StatefulSet *appsv1.StatefulSet
	Pods        []corev1.Pod              // the cluster's pods
	Topology    *dolphinv1.TopologyStatus // the engine's record (status.topology)
	Forced      bool                      // ForceRolloutAnnotation is "true"
	// EngineUpgrades is true for MariaDB: a pod re-created with the new template counts as
	// back only once the engine-upgrade step recorded its system tables at the server's
	// version (EngineUpgradedAnnotation), so no switchover reaches a server whose tables an
	// older release series wrote.
	EngineUpgrades bool
}

// rolloutKind is what the rollout step does next.
type rolloutKind string

const (
	rolloutNothing    rolloutKind = ""           // every pod runs the current template
	rolloutWait       rolloutKind = "Wait"       // a rollout is due, but not now (Message says why)
	rolloutDeletePod  rolloutKind = "DeletePod"  // delete Pod (UID); the StatefulSet re-creates it
	rolloutSwitchover rolloutKind = "Switchover" // move the primary role from From to Pod
)

// rolloutAction is the outcome of nextRollout.
type rolloutAction struct {
	Kind rolloutKind
	// Pod is the pod to delete, or the switchover target.
	Pod string
	// UID is the deleted pod's UID (a precondition: a re-created pod is never deleted).
	UID types.UID
	// From is the primary a switchover moves away from.
	From string
	// Message is the Progressing condition message, and the note of the action's event.
	Message string
}

// nextRollout decides the next step of rolling a new pod template out (pods are at the
// StatefulSet's status.updateRevision once re-created). Outdated replicas go first, one at a
// time, highest ordinal first; then the primary role moves to an updated replica; then the
// former primary, now an outdated replica, goes like the others. A pod is deleted only when
// every pod is ready, none is terminating, the topology is Healthy and every replica
// replicates with no lag — unless Forced, which skips the health checks but still waits for
// each re-created pod to be ready, and still restarts a primary that has replicas only after
// a switchover. A single instance is restarted in place. A replica left not ready on a
// template that was replaced since is restarted at once (stuckReplica).
func nextRollout(in rolloutInput) rolloutAction {
	sts := in.StatefulSet
	if sts == nil || sts.DeletionTimestamp != nil || sts.Spec.Replicas == nil || sts.Status.UpdateRevision == "" {
		// Not there, being replaced (storage growth), or no revision reported yet.
		return rolloutAction{}
	}
	if sts.Status.ObservedGeneration < sts.Generation {
		return rolloutAction{Kind: rolloutWait, Message: "the StatefulSet controller has not observed the latest spec yet"}
	}
	r := newRolloutPlan(in)
	if len(r.outdated) == 0 {
		return rolloutAction{}
	}
	// One at a time, forced or not: the pod restarted last is back and ready first.
	if a, ok := r.waitForRestarted(); ok {
		return a
	}
	if a, ok := r.waitForEngine(); ok {
		return a
	}
	if n, ok := stuckReplica(sts, r.pods, r.outdated, r.primary); ok && r.primary != "" && !in.Forced {
		// A template that never worked is replaced without waiting for a health the broken
		// pod itself prevents.
		return r.restart(n, "a replica that never became ready with the template it runs")
	}
	if !in.Forced {
		if a, ok := r.holdUnlessHealthy(); ok {
			return a
		}
	}
	if r.primary == "" {
		// Forced without a record: the labeled primary, if any, still goes last.
		for _, p := range r.pods {
			if p.Labels[resources.RoleLabel] == string(dolphinv1.RolePrimary) {
				r.primary = p.Name
			}
		}
	}
	if a, ok := r.nextReplica(); ok {
		return a
	}
	return r.primaryStep()
}

// rolloutPlan is one decision of nextRollout: the pods by ordinal, which are outdated, and the
// messages every action carries.
type rolloutPlan struct {
	in       rolloutInput
	sts      *appsv1.StatefulSet
	rev      string
	replicas int
	// pods by ordinal (nil: no pod for that ordinal).
	pods     []*corev1.Pod
	outdated []int
	progress string
	// primary is the engine's record of the primary ("" when none).
	primary string
}

func newRolloutPlan(in rolloutInput) *rolloutPlan {
	sts := in.StatefulSet
	r := &rolloutPlan{in: in, sts: sts, rev: sts.Status.UpdateRevision, replicas: int(*sts.Spec.Replicas)}
	r.pods = make([]*corev1.Pod, r.replicas)
	for i := range in.Pods {
		if n, ok := podOrdinal(sts.Name, in.Pods[i].Name); ok && n < r.replicas {
			r.pods[n] = &in.Pods[i]
		}
	}
	updated := 0
	for n, p := range r.pods {
		switch {
		case p == nil || revisionOf(p) == "":
		case revisionOf(p) == r.rev:
			updated++
		default:
			r.outdated = append(r.outdated, n)
		}
	}
	r.progress = fmt.Sprintf("%d/%d instances updated", updated, r.replicas)
	if in.Topology != nil {
		r.primary = in.Topology.Primary
	}
	return r
}

// revisionOf is the pod's template revision. A pod without a revision label was not made by
// the StatefulSet controller: its revision is unknown and it is never deleted for a rollout.
func revisionOf(p *corev1.Pod) string { return p.Labels[appsv1.ControllerRevisionHashLabelKey] }

func (r *rolloutPlan) name(n int) string { return r.sts.Name + "-" + strconv.Itoa(n) }

func (r *rolloutPlan) wait(format string, args ...any) rolloutAction {
	return rolloutAction{Kind: rolloutWait, Message: "rolling out: " + fmt.Sprintf(format, args...) + "; " + r.progress}
}

// held is a wait that the force annotation lifts.
func (r *rolloutPlan) held(format string, args ...any) rolloutAction {
	return r.wait("held while "+format+" (annotate the cluster "+ForceRolloutAnnotation+"=true to roll anyway)", args...)
}

// restart deletes pod n, which the StatefulSet re-creates with the new template.
func (r *rolloutPlan) restart(n int, why string) rolloutAction {
	msg := fmt.Sprintf("restarting %s (%s) with the new pod template", r.name(n), why)
	if r.in.Forced {
		msg += ", forced by " + ForceRolloutAnnotation
	}
	return rolloutAction{Kind: rolloutDeletePod, Pod: r.name(n), UID: r.pods[n].UID, Message: "rolling out: " + msg + "; " + r.progress}
}

// waitForRestarted waits, forced or not, for every pod to exist, none to terminate, and
// every updated one to be ready (and its system tables upgraded where that applies).
func (r *rolloutPlan) waitForRestarted() (rolloutAction, bool) {
	for n, p := range r.pods {
		switch {
		case p == nil:
			return r.wait("waiting for %s to be re-created", r.name(n)), true
		case p.DeletionTimestamp != nil:
			return r.wait("waiting for %s to terminate", r.name(n)), true
		case !podReady(p) && revisionOf(p) == r.rev:
			return r.wait("waiting for %s to be ready and caught up", r.name(n)), true
		case r.in.EngineUpgrades && revisionOf(p) == r.rev && p.Annotations[EngineUpgradedAnnotation] == "":
			return r.wait("waiting for %s's system tables to be upgraded to its server's version (mariadb-upgrade)", r.name(n)), true
		}
	}
	return rolloutAction{}, false
}

// waitForEngine waits, forced or not, while the engine bootstraps or switches over.
func (r *rolloutPlan) waitForEngine() (rolloutAction, bool) {
	t := r.in.Topology
	switch {
	case t == nil:
		return rolloutAction{}, false
	case t.State == "Switchover" || t.State == "Bootstrapping":
		return r.wait("waiting for the topology engine (%s: %s)", t.State, t.Message), true
	case t.SwitchoverInProgress != nil:
		// Accepted and not done (perhaps not even fenced yet): restarting its target, or asking
		// for another, would undo it.
		return r.wait("waiting for the switchover to %q to finish", t.SwitchoverInProgress.To), true
	}
	return rolloutAction{}, false
}

// holdUnlessHealthy holds an unforced rollout until the topology is Healthy with a recorded
// primary, no failover and no errant instance, and every pod is ready and caught up.
func (r *rolloutPlan) holdUnlessHealthy() (rolloutAction, bool) {
	t := r.in.Topology
	switch {
	case t == nil || t.Primary == "":
		return r.wait("waiting for the topology engine to record a primary"), true
	case t.FailoverInProgress != nil:
		return r.held("a failover from %s is in progress", t.FailoverInProgress.From), true
	case len(t.ErrantInstances) > 0:
		return r.held("%s hold errant transactions", strings.Join(t.ErrantInstances, ", ")), true
	case t.State != topologyHealthy:
		return r.held("the topology is %s: %s", t.State, t.Message), true
	}
	for n, p := range r.pods {
		if !podReady(p) {
			return r.held("%s is not ready", r.name(n)), true
		}
		if why := notCaughtUp(t, r.name(n)); why != "" {
			return r.wait("waiting for %s to be ready and caught up (%s)", r.name(n), why), true
		}
	}
	return rolloutAction{}, false
}

// nextReplica restarts the next outdated replica: highest ordinal first, and when forced,
// those not ready before those that are (they serve nobody, and the new template may be
// their fix).
func (r *rolloutPlan) nextReplica() (rolloutAction, bool) {
	var out []int
	for _, n := range r.outdated {
		if r.name(n) != r.primary {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return rolloutAction{}, false
	}
	slices.SortFunc(out, func(a, b int) int {
		if r.in.Forced && podReady(r.pods[a]) != podReady(r.pods[b]) {
			if podReady(r.pods[a]) {
				return 1
			}
			return -1
		}
		return cmp.Compare(b, a)
	})
	n := out[0]
	why := "an outdated replica"
	if lp := lastPromotion(r.in.Topology); lp != nil && lp.Planned && lp.From == r.name(n) {
		why = "the former primary, after the switchover to " + lp.To
	}
	return r.restart(n, why), true
}

// primaryStep is the step when only the primary is outdated: a single instance restarts in
// place; a primary with replicas, forced or not, only after a switchover to an updated one.
func (r *rolloutPlan) primaryStep() rolloutAction {
	p := r.outdated[0]
	if r.replicas == 1 {
		return r.restart(p, "the only instance: there is no replica to switch over to, so clients cannot write until it is back")
	}
	if target, ok := switchoverTarget(r.in.Topology, r.pods, r.rev, r.primary); ok {
		return rolloutAction{Kind: rolloutSwitchover, Pod: target, From: r.primary, Message: fmt.Sprintf(
			"rolling out: switching the primary over from %s to the updated replica %s before restarting it; %s", r.primary, target, r.progress)}
	}
	return r.wait("waiting for an updated replica that can take over from the primary %s (ready, reachable, replicating)", r.primary)
}

// switchoverTarget picks the updated replica the primary role moves to: ready, reachable,
// replicating and not errant; the least lag, then an executed set equal to the primary's,
// then the lowest ordinal. The engine then waits until it applied everything the old
// primary wrote before promoting it.
func switchoverTarget(t *dolphinv1.TopologyStatus, pods []*corev1.Pod, rev, primary string) (string, bool) {
	if t == nil {
		return "", false
	}
	var primaryGTID string
	if p := topologyInstance(t, primary); p != nil {
		primaryGTID = p.GTIDExecuted
	}
	type candidate struct {
		name string
		lag  int64
		same bool
		n    int
	}
	var cs []candidate
	for n, p := range pods {
		if p.Name == primary || p.Labels[appsv1.ControllerRevisionHashLabelKey] != rev || !podReady(p) || slices.Contains(t.ErrantInstances, p.Name) {
			continue
		}
		in := topologyInstance(t, p.Name)
		if in == nil || !in.Reachable || !in.Replicating {
			continue
		}
		lag := int64(1 << 62)
		if in.ReplicationLagSeconds != nil {
			lag = *in.ReplicationLagSeconds
		}
		cs = append(cs, candidate{p.Name, lag, primaryGTID != "" && in.GTIDExecuted == primaryGTID, n})
	}
	if len(cs) == 0 {
		return "", false
	}
	best := slices.MinFunc(cs, func(a, b candidate) int {
		if c := cmp.Compare(a.lag, b.lag); c != 0 {
			return c
		}
		if a.same != b.same {
			if a.same {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.n, b.n)
	})
	return best.name, true
}

// notCaughtUp says why the engine's record does not show an instance healthy and caught up
// (the primary: reachable; a replica: reachable, replicating, no lag), or "".
func notCaughtUp(t *dolphinv1.TopologyStatus, name string) string {
	in := topologyInstance(t, name)
	switch {
	case in == nil:
		return "not observed yet"
	case !in.Reachable:
		return "unreachable"
	case name == t.Primary:
		return ""
	case !in.Replicating:
		return "not replicating"
	case in.ReplicationLagSeconds == nil:
		return "lag unknown"
	case *in.ReplicationLagSeconds > 0:
		return fmt.Sprintf("%ds behind", *in.ReplicationLagSeconds)
	}
	return ""
}

// stuckReplica finds an outdated replica that is not ready at a revision that was never
// rolled out to every pod (neither the StatefulSet's current nor its update revision: a
// template that did not work, replaced since), while every other pod is ready. It serves
// nobody, so replacing it at once costs nothing; waiting for the cluster to be healthy
// first would wait for ever, as it is what keeps the cluster from being healthy.
func stuckReplica(sts *appsv1.StatefulSet, pods []*corev1.Pod, outdated []int, primary string) (int, bool) {
	cur := sts.Status.CurrentRevision
	if cur == "" {
		return 0, false
	}
	stuck := -1
	for _, n := range outdated {
		p := pods[n]
		if p.Name != primary && !podReady(p) && p.Labels[appsv1.ControllerRevisionHashLabelKey] != cur {
			stuck = max(stuck, n)
		}
	}
	if stuck < 0 {
		return 0, false
	}
	for n, p := range pods {
		if n != stuck && !podReady(p) {
			return 0, false
		}
	}
	return stuck, true
}

// topologyInstance is the engine's record of one instance, or nil.
func topologyInstance(t *dolphinv1.TopologyStatus, name string) *dolphinv1.InstanceTopology {
	if t == nil {
		return nil
	}
	for i := range t.Instances {
		if t.Instances[i].Name == name {
			return &t.Instances[i]
		}
	}
	return nil
}

// lastPromotion is the engine's record of the last change of primary, or nil.
func lastPromotion(t *dolphinv1.TopologyStatus) *dolphinv1.PromotionRecord {
	if t == nil {
		return nil
	}
	return t.LastPromotion
}

// podOrdinal returns the ordinal of a pod of StatefulSet sts, if name is one.
func podOrdinal(sts, name string) (int, bool) {
	suffix, ok := strings.CutPrefix(name, sts+"-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(suffix)
	if err != nil || n < 0 || strconv.Itoa(n) != suffix {
		return 0, false
	}
	return n, true
}

// rolloutProgress is the Progressing message of a rollout still to do, or "" when every pod
// runs the current template. It cannot see the force annotation: a held rollout says how to
// force it.
func rolloutProgress(sts *appsv1.StatefulSet, pods []corev1.Pod, t *dolphinv1.TopologyStatus, forced, engineUpgrades bool) string {
	return nextRollout(rolloutInput{StatefulSet: sts, Pods: pods, Topology: t, Forced: forced, EngineUpgrades: engineUpgrades}).Message
}

// reconcileRollout takes the next step of rolling a new pod template out (nextRollout): it
// deletes one pod, which the StatefulSet controller re-creates from the new template, or asks
// the topology engine for a switchover. Every decision comes from observed state, so it is
// safe to repeat and to resume after an operator restart.
func (r *MySQLClusterReconciler) reconcileRollout(ctx context.Context, c *dolphinv1.MySQLCluster) error {
	var sts appsv1.StatefulSet
	key := types.NamespacedName{Namespace: c.Namespace, Name: resources.NamesFor(c).StatefulSet}
	if err := r.Client.Get(ctx, key, &sts); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("reading StatefulSet %s: %w", key, err)
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(c.Namespace), client.MatchingLabels(resources.SelectorLabels(c))); err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	a := nextRollout(rolloutInput{StatefulSet: &sts, Pods: pods.Items, Topology: c.Status.Topology,
		Forced: c.Annotations[ForceRolloutAnnotation] == "true", EngineUpgrades: r.engineUpgrades(c)})
	logger := log.FromContext(ctx)
	switch a.Kind {
	case rolloutDeletePod:
		// A stale cache can show a pod that is being deleted (or was re-created) already: the
		// API server says whether this pass is the one that deletes it, and so announces it.
		// (The Progressing message cannot: the status may show this action before it is
		// taken, when computed from a fresher cache than the step's.)
		var live corev1.Pod
		if err := r.apiReader().Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: a.Pod}, &live); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("reading pod %s before restarting it: %w", a.Pod, err)
		}
		if live.UID != a.UID || live.DeletionTimestamp != nil {
			return nil // being replaced already
		}
		uid := a.UID
		if err := r.Client.Delete(ctx, &live, client.Preconditions{UID: &uid}); err != nil {
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				return nil // gone or re-created already
			}
			return fmt.Errorf("deleting pod %s to roll out the new pod template: %w", a.Pod, err)
		}
		logger.Info("rollout: deleted pod", "pod", a.Pod, "reason", a.Message)
		r.eventAbout(c, &live, corev1.EventTypeNormal, "RollingRestart", "Delete", "deleted pod %s: %s", a.Pod, a.Message)
	case rolloutSwitchover:
		if r.Topology == nil {
			return nil
		}
		// The engine runs with this spec before it gets the request: restarted with a changed
		// setting by the Update after the steps, it would lose the request, and an idle cluster
		// might trigger no reconcile that asks again.
		if err := r.Topology.Update(ctx, c); err != nil {
			return fmt.Errorf("updating the topology engine before a switchover: %w", err)
		}
		fresh, err := r.Topology.RequestSwitchover(ctx, client.ObjectKeyFromObject(c), a.Pod, "")
		if err != nil {
			return fmt.Errorf("requesting a switchover to %s before restarting the primary %s: %w", a.Pod, a.From, err)
		}
		logger.Info("rollout: switchover requested", "from", a.From, "to", a.Pod, "new", fresh)
		// The engine says whether the request is new: a repeat (every pass until it is
		// done, or a stale cache after it) is not announced again.
		if fresh {
			r.event(c, corev1.EventTypeNormal, "RolloutSwitchover", "Switchover", "%s", a.Message)
		}
	case rolloutWait:
		logger.V(1).Info("rollout waits", "reason", a.Message)
	}
	return nil
}
