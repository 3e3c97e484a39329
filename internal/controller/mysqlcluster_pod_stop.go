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
)

// podStopRecheck is how often the pod-stop step looks again while a deleted pod's server is
// held for a switchover: its release follows the switchover by at most this much.
const podStopRecheck = 500 * time.Millisecond

// podStopAction is what the operator does for a cluster pod being deleted (docs/design/0051).
type podStopAction int

const (
	// podStopNone: nothing (a pod not being deleted, or a single instance's, which has no hold).
	podStopNone podStopAction = iota
	// podStopSwitchover: the pod holds the primary: switch over before its server stops.
	podStopSwitchover
	// podStopRelease: the pod's server may stop (it is no primary, or no longer one).
	podStopRelease
)

// decidePodStop is what a pod of a cluster of instances instances needs: deleting is whether
// its deletion has begun, primary the primary the status records. Pure.
func decidePodStop(pod string, deleting bool, primary string, instances int32) podStopAction {
	switch {
	case !deleting || instances < 2:
		return podStopNone
	case pod == primary:
		return podStopSwitchover
	default:
		return podStopRelease
	}
}

// reconcilePodStop switches the primary role away from a primary pod being deleted or
// evicted (a drain, a user's delete) while the pod's preStop hook keeps its server running,
// and releases the hold of every other pod being deleted (docs/design/0051). It never fails
// the reconcile: a pod that cannot be released stops when its hold runs out.
func (r *MySQLClusterReconciler) reconcilePodStop(ctx context.Context, c *dolphinv1.MySQLCluster) error {
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(c.Namespace), client.MatchingLabels(resources.SelectorLabels(c))); err != nil {
		return fmt.Errorf("listing the cluster's pods: %w", err)
	}
	primary := ""
	if c.Status.Topology != nil {
		primary = c.Status.Topology.Primary
	}
	logger := log.FromContext(ctx)
	for i := range pods.Items {
		pod := &pods.Items[i]
		switch decidePodStop(pod.Name, pod.DeletionTimestamp != nil, primary, c.Spec.Instances) {
		case podStopSwitchover:
			requeueAfter(ctx, podStopRecheck)
			if r.Topology == nil || r.stopSwitchoverAsked(pod.UID) {
				continue
			}
			// The engine runs with this spec before it gets the request (see rollout.go).
			if err := r.Topology.Update(ctx, c); err != nil {
				logger.Info("pod-stop: the topology engine could not be updated; the pod's hold runs out", "pod", pod.Name, "error", err.Error())
				continue
			}
			fresh, err := r.Topology.RequestSwitchover(ctx, client.ObjectKeyFromObject(c), "", "")
			if err != nil {
				logger.Info("pod-stop: switchover not requested; the pod's hold runs out", "pod", pod.Name, "error", err.Error())
				continue
			}
			r.markStopSwitchoverAsked(pod.UID)
			if fresh {
				r.eventAbout(c, pod, corev1.EventTypeNormal, "PrimaryPodStopping", "Switchover",
					"the primary's pod %s is being deleted: switching over to the most advanced replica before its server stops", pod.Name)
			}
		case podStopRelease:
			if r.stopReleased(pod.UID) {
				continue
			}
			if err := r.releaseStop(ctx, c, pod); err != nil {
				requeueAfter(ctx, podStopRecheck)
				logger.V(1).Info("pod-stop: not released yet", "pod", pod.Name, "error", err.Error())
				continue
			}
			logger.Info("pod-stop: released", "pod", pod.Name)
		}
	}
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
	r.markStopReleased(pod.UID)
	return nil
}

// stopState remembers, per pod UID, what the pod-stop step did already (in memory: after an
// operator restart a repeated request or release changes nothing).
type stopState struct {
	asked, released map[types.UID]bool
}

func (r *MySQLClusterReconciler) stopSwitchoverAsked(uid types.UID) bool {
	r.stopMu.Lock()
	defer r.stopMu.Unlock()
	return r.stop.asked[uid]
}

func (r *MySQLClusterReconciler) markStopSwitchoverAsked(uid types.UID) {
	r.stopMu.Lock()
	defer r.stopMu.Unlock()
	if r.stop.asked == nil {
		r.stop.asked = map[types.UID]bool{}
	}
	r.stop.asked[uid] = true
}

func (r *MySQLClusterReconciler) stopReleased(uid types.UID) bool {
	r.stopMu.Lock()
	defer r.stopMu.Unlock()
	return r.stop.released[uid]
}

func (r *MySQLClusterReconciler) markStopReleased(uid types.UID) {
	r.stopMu.Lock()
	defer r.stopMu.Unlock()
	if r.stop.released == nil {
		r.stop.released = map[types.UID]bool{}
	}
	r.stop.released[uid] = true
}
