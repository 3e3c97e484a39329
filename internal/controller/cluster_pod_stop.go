package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/topology"
)

// podStopRecheck is how often the pod-stop step looks again while a deleted pod's server is
// held for a switchover: its release follows the switchover by at most this much.
const podStopRecheck = 500 * time.Millisecond

// podStopAction is what the operator does for a cluster pod being deleted (docs/design/0051).
type podStopAction int

const (
	// podStopNone: nothing — a pod not being deleted, one without the hold (an older template,
	// a single instance), or one whose hold is over (run out, or cut to a short grace period:
	// Dolphin's own restart of a lost primary, a forced delete).
	podStopNone podStopAction = iota
	// podStopSwitchover: the pod holds the primary: switch over before its server stops.
	podStopSwitchover
	// podStopRelease: the pod's server may stop (it is no primary, or no longer one, or the
	// primary is lost anyway).
	podStopRelease
)

// podStopFacts is what decidePodStop needs of a pod and its cluster.
type podStopFacts struct {
	// IsPrimary: the pod is the primary status records.
	IsPrimary bool
	// Deleting: its deletion has begun.
	Deleting bool
	// Holds: its server container has the preStop hold.
	Holds bool
	// HoldOver: its hold has ended whatever Dolphin does (holdOver).
	HoldOver bool
	// PrimaryLost: a failover is under way or waits (nothing to switch over from).
	PrimaryLost bool
	// Paused: the cluster is paused; its engine does no switchover (topology.Settings.Paused),
	// so a held primary would only wait out its hold before the failover.
	Paused bool
}

// decidePodStop is what a pod needs. Pure.
func decidePodStop(f podStopFacts) podStopAction {
	switch {
	case !f.Deleting || !f.Holds || f.HoldOver:
		return podStopNone
	case f.IsPrimary && !f.PrimaryLost && !f.Paused:
		return podStopSwitchover
	default:
		return podStopRelease
	}
}

// holdOver reports whether a deleted pod's hold has ended by itself at now: its grace period
// is too short for it (the kubelet cuts the hook to the grace period: Dolphin's own 1 s
// restarts of a lost primary, forced deletes), or HoldForSwitchoverSeconds have passed since
// the deletion began (the deletion timestamp is its start plus the grace period).
func holdOver(pod *corev1.Pod, now time.Time) bool {
	if pod.DeletionTimestamp == nil {
		return false
	}
	grace := int64(0)
	if pod.DeletionGracePeriodSeconds != nil {
		grace = *pod.DeletionGracePeriodSeconds
	}
	if grace <= 2 {
		return true
	}
	began := pod.DeletionTimestamp.Add(-time.Duration(grace) * time.Second)
	return now.After(began.Add(resources.HoldForSwitchoverSeconds * time.Second))
}

// primaryLost reports whether status shows the primary lost: a failover in progress or
// waiting, or the primary missing observations.
func primaryLost(c *dolphinv1.MySQLCluster) bool {
	t := c.Status.Topology
	if t == nil {
		return false
	}
	switch topology.State(t.State) {
	case topology.StatePrimaryLost, topology.StatePrimarySuspect, topology.StateFailover:
		return true
	}
	return t.FailoverInProgress != nil
}

// releaseTimeout bounds one release call: a pod whose agent does not answer quickly is left
// to its hold's bound rather than hold up the reconcile.
const releaseTimeout = 2 * time.Second

// reconcilePodStop switches the primary role away from a primary pod being deleted or
// evicted (a drain, a user's delete) while the pod's preStop hook keeps its server running,
// and releases the hold of every other pod being deleted (docs/design/0051). Only listing the
// pods can fail it: a pod that cannot be released stops when its hold runs out.
func (r *MySQLClusterReconciler) reconcilePodStop(ctx context.Context, c *dolphinv1.MySQLCluster, out *stepOutcome) error {
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(c.Namespace), client.MatchingLabels(resources.SelectorLabels(c))); err != nil {
		return fmt.Errorf("listing the cluster's pods: %w", err)
	}
	primary := ""
	if c.Status.Topology != nil {
		primary = c.Status.Topology.Primary
	}
	lost, now := primaryLost(c), time.Now()
	logger := log.FromContext(ctx)
	for i := range pods.Items {
		pod := &pods.Items[i]
		f := podStopFacts{IsPrimary: pod.Name == primary, Deleting: pod.DeletionTimestamp != nil,
			Holds: resources.HoldsForSwitchover(pod), HoldOver: holdOver(pod, now), PrimaryLost: lost, Paused: c.Spec.Paused}
		switch decidePodStop(f) {
		case podStopSwitchover:
			out.after(podStopRecheck, "a deleted primary's pod waits for its switchover or release")
			if r.Topology == nil || r.stopSwitchoverAsked(c, pod.UID) {
				continue
			}
			// The engine runs with this spec before it gets the request (see cluster_rollout.go).
			if err := r.Topology.Update(ctx, c); err != nil {
				logger.Info("pod-stop: the topology engine could not be updated; the pod's hold runs out", "pod", pod.Name, "error", err.Error())
				continue
			}
			fresh, err := r.Topology.RequestSwitchover(ctx, client.ObjectKeyFromObject(c), "", "")
			if err != nil {
				logger.Info("pod-stop: switchover not requested; the pod's hold runs out", "pod", pod.Name, "error", err.Error())
				continue
			}
			r.markStopSwitchoverAsked(c, pod.UID)
			if fresh {
				r.eventAbout(c, pod, corev1.EventTypeNormal, "PrimaryPodStopping", "Switchover",
					"the primary's pod %s is being deleted: switching over to the most advanced replica before its server stops", pod.Name)
			}
		case podStopRelease:
			if r.stopReleased(c, pod.UID) {
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, releaseTimeout)
			err := r.releaseStop(rctx, c, pod)
			cancel()
			if err != nil {
				out.after(podStopRecheck, "a deleted primary's pod waits for its switchover or release")
				logger.V(1).Info("pod-stop: not released yet", "pod", pod.Name, "error", err.Error())
				continue
			}
			logger.Info("pod-stop: released", "pod", pod.Name)
		}
	}
	r.forgetStops(c, pods.Items)
	return nil
}

// releaseAllStops releases the hold of every pod of a cluster being deleted, best effort
// (an agent that does not answer within a few seconds leaves its pod to its hold's bound).
func (r *MySQLClusterReconciler) releaseAllStops(ctx context.Context, c *dolphinv1.MySQLCluster) {
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(c.Namespace), client.MatchingLabels(resources.SelectorLabels(c))); err != nil {
		return
	}
	for i := range pods.Items {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		if err := r.releaseStop(pctx, c, &pods.Items[i]); err != nil {
			log.FromContext(ctx).V(1).Info("pod-stop: not released before the cluster's deletion", "pod", pods.Items[i].Name, "error", err.Error())
		}
		cancel()
	}
}

// releaseStop tells pod's agent that its server may stop. An agent without the endpoint
// (a pod of an older template: no hold) counts as released.
func (r *MySQLClusterReconciler) releaseStop(ctx context.Context, c *dolphinv1.MySQLCluster, pod *corev1.Pod) error {
	if r.Agents == nil {
		return errors.New("no agent connector")
	}
	a, err := r.Agents.Agent(ctx, c, pod)
	if err != nil {
		return err
	}
	var se *agent.StatusError
	if err := a.ReleaseStop(ctx); err != nil && !(errors.As(err, &se) && se.StatusCode == http.StatusNotFound) {
		return err
	}
	r.markStopReleased(c, pod.UID)
	return nil
}

// stopState remembers, per cluster and pod UID, what the pod-stop step did already (in
// memory: after an operator restart a repeated request or release changes nothing).
type stopState struct {
	asked, released map[types.UID]bool
}

// stopsOf is c's stopState, created when missing; r.stopMu must be held.
func (r *MySQLClusterReconciler) stopsOf(c *dolphinv1.MySQLCluster) *stopState {
	key := client.ObjectKeyFromObject(c)
	if r.stops == nil {
		r.stops = map[types.NamespacedName]*stopState{}
	}
	st := r.stops[key]
	if st == nil {
		st = &stopState{asked: map[types.UID]bool{}, released: map[types.UID]bool{}}
		r.stops[key] = st
	}
	return st
}

func (r *MySQLClusterReconciler) stopSwitchoverAsked(c *dolphinv1.MySQLCluster, uid types.UID) bool {
	r.stopMu.Lock()
	defer r.stopMu.Unlock()
	return r.stopsOf(c).asked[uid]
}

func (r *MySQLClusterReconciler) markStopSwitchoverAsked(c *dolphinv1.MySQLCluster, uid types.UID) {
	r.stopMu.Lock()
	defer r.stopMu.Unlock()
	r.stopsOf(c).asked[uid] = true
}

func (r *MySQLClusterReconciler) stopReleased(c *dolphinv1.MySQLCluster, uid types.UID) bool {
	r.stopMu.Lock()
	defer r.stopMu.Unlock()
	return r.stopsOf(c).released[uid]
}

func (r *MySQLClusterReconciler) markStopReleased(c *dolphinv1.MySQLCluster, uid types.UID) {
	r.stopMu.Lock()
	defer r.stopMu.Unlock()
	r.stopsOf(c).released[uid] = true
}

// forgetStops drops what is remembered of c's pods that are no longer being deleted (gone),
// and the whole cluster's record once it has no pod being deleted.
func (r *MySQLClusterReconciler) forgetStops(c *dolphinv1.MySQLCluster, pods []corev1.Pod) {
	deleting := map[types.UID]bool{}
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			deleting[p.UID] = true
		}
	}
	r.stopMu.Lock()
	defer r.stopMu.Unlock()
	if len(deleting) == 0 {
		delete(r.stops, client.ObjectKeyFromObject(c))
		return
	}
	st := r.stopsOf(c)
	for _, m := range []map[types.UID]bool{st.asked, st.released} {
		for uid := range m {
			if !deleting[uid] {
				delete(m, uid)
			}
		}
	}
}
