package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// recloneCooldown is the least time between two re-clones of the same instance: the new pod
// must be seeded and observed before its old errant record is believed again.
const recloneCooldown = 2 * time.Minute

// recloneConfirmation is how long an instance must stay errant (or stopped by error 1236) in
// the engine's observations before it is re-cloned: one observation can be a race (a replica
// observed after the primary wrote more), and discarding a healthy replica is costly.
const recloneConfirmation = 15 * time.Second

// recloneWatch remembers since when each instance has been a re-clone candidate, and why a
// cluster's re-clone waits (no copy could be kept).
type recloneWatch struct {
	mu    sync.Mutex
	since map[string]time.Time
	waits map[string]string
}

// wait records why the cluster's re-clone waits; "" clears it.
func (w *recloneWatch) wait(cluster, why string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waits == nil {
		w.waits = map[string]string{}
	}
	if why == "" {
		delete(w.waits, cluster)
		return
	}
	w.waits[cluster] = why
}

// waiting says why the cluster's re-clone waits, or "".
func (w *recloneWatch) waiting(cluster string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.waits[cluster]
}

// confirmed records that key is a candidate now and says whether it has been one for d; keys
// of the cluster that are no longer candidates are forgotten.
func (w *recloneWatch) confirmed(cluster, instance string, now time.Time, d time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.since == nil {
		w.since = map[string]time.Time{}
	}
	key := cluster + "/" + instance
	for k := range w.since {
		if strings.HasPrefix(k, cluster+"/") && k != key {
			delete(w.since, k)
		}
	}
	first, ok := w.since[key]
	if !ok {
		w.since[key] = now
		return false
	}
	return now.Sub(first) >= d
}

// forget drops the cluster's candidates and its wait.
func (w *recloneWatch) forget(cluster string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.waits, cluster)
	for k := range w.since {
		if strings.HasPrefix(k, cluster+"/") {
			delete(w.since, k)
		}
	}
}

// reconcileReclone re-clones the instance decideReclone picks: its agent marks the data to be
// discarded, status.lastReclone and a Warning event say what is thrown away, and its pod is
// deleted; the StatefulSet re-creates it on the same volume, and its seed container empties the
// directory and clones a healthy peer (reconcileSeeds).
func (r *MySQLClusterReconciler) reconcileReclone(ctx context.Context, c *dolphinv1.MySQLCluster, out *stepOutcome) error {
	if r.Agents == nil {
		return nil
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(c.Namespace), client.MatchingLabels(resources.SelectorLabels(c))); err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	clusterKey := c.Namespace + "/" + c.Name
	plan, ok := decideReclone(c, pods.Items)
	if !ok {
		r.reclones.forget(clusterKey)
		return nil
	}
	confirm := r.RecloneConfirmation
	if confirm <= 0 {
		confirm = recloneConfirmation
	}
	if !r.reclones.confirmed(clusterKey, plan.Instance, time.Now(), confirm) {
		out.after(confirm/3+time.Millisecond, "a re-clone waits for its decision to be confirmed")
		return nil
	}
	var pod *corev1.Pod
	for i := range pods.Items {
		if pods.Items[i].Name == plan.Instance {
			pod = &pods.Items[i]
		}
	}
	if pod == nil || pod.DeletionTimestamp != nil || !containerReady(pod, resources.ContainerAgent) {
		return nil
	}
	if last := c.Status.LastReclone; last != nil && last.Instance == plan.Instance && time.Since(last.Time.Time) < recloneCooldown {
		return nil
	}
	a, err := r.Agents.Agent(ctx, c, pod)
	if err != nil {
		return fmt.Errorf("reaching the agent of %s to re-clone it: %w", pod.Name, err)
	}
	kept, err := r.keepBeforeReclone(ctx, c, pods.Items, a, plan)
	if err != nil {
		r.reclones.wait(clusterKey, fmt.Sprintf("%s is to be re-cloned (%s), but %v", plan.Instance, plan.Reason, err))
		out.after(30*time.Second, "a re-clone waits for the copy of what the instance holds")
		return nil
	}
	r.reclones.wait(clusterKey, "")
	// Making the copy took time: a failover may have changed the primary it was measured
	// against, or the instance may no longer be the one to re-clone.
	var fresh dolphinv1.MySQLCluster
	if err := r.apiReader().Get(ctx, client.ObjectKeyFromObject(c), &fresh); err != nil {
		return fmt.Errorf("reading the cluster again before re-cloning %s: %w", plan.Instance, err)
	}
	if again, ok := decideReclone(&fresh, pods.Items); !ok || again.Instance != plan.Instance ||
		fresh.Status.Topology.Primary != c.Status.Topology.Primary {
		log.FromContext(ctx).Info("not re-cloning: the cluster changed while the copy was made", "pod", plan.Instance)
		r.reclones.forget(clusterKey)
		return nil
	}
	reason := plan.Reason + "; discarding " + plan.Discarded
	rec := dolphinv1.RecloneRecord{Instance: plan.Instance, Reason: plan.Reason, Discarded: plan.Discarded, Time: metav1.Now()}
	switch {
	case kept != nil && kept.Transactions > 0:
		// Recorded before anything is marked for discarding.
		if err := r.recordKept(ctx, c, pod, *kept); err != nil {
			return err
		}
		rec.Kept = kept.Name
		reason += fmt.Sprintf(" after keeping a copy of the %d transactions the primary lacks (%s) as %s", kept.Transactions, kept.GTIDs, kept.Name)
	case kept != nil:
		reason += " (it holds nothing the primary lacks)"
	default:
		reason += " without a copy, as " + RecloneApprovedAnnotation + " allows"
	}
	req := agent.ReseedRequest{Reason: reason}
	if kept != nil {
		req.Keep = &agent.ReseedKeep{Name: kept.Name, Instance: plan.Instance, Primary: c.Status.Topology.Primary,
			PrimaryState: kept.PrimaryState, GTIDs: kept.GTIDs}
	}
	if err := a.Reseed(ctx, req); err != nil {
		return fmt.Errorf("marking %s for re-cloning: %w", pod.Name, err)
	}
	if err := r.recordOwnedStatus(ctx, c, dolphinv1.MySQLClusterStatus{LastReclone: &rec}, "status.lastReclone"); err != nil {
		return err
	}
	r.eventAbout(c, pod, corev1.EventTypeWarning, "Recloning", "Reclone", "re-cloning %s from a healthy peer: %s", pod.Name, reason)
	r.reclones.forget(clusterKey)
	log.FromContext(ctx).Info("re-cloning an instance", "pod", pod.Name, "reason", reason)
	if err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting %s to re-clone it: %w", pod.Name, err)
	}
	if c.Annotations[RecloneApprovedAnnotation] == plan.Instance {
		// Used: a later errant state of the same instance asks again.
		patch := []byte(`{"metadata":{"annotations":{"` + RecloneApprovedAnnotation + `":null}}}`)
		if err := r.Client.Patch(ctx, c, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return fmt.Errorf("removing %s after use: %w", RecloneApprovedAnnotation, err)
		}
	}
	return nil
}
