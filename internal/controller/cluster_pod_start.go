package controller

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// A new pod can meet one of two short races of Kubernetes' own while the kubelet sets up its
// volumes: the node authorizer refuses the pod's claim until its graph has seen the pod ("no
// relationship found"), or the claim's volume name is set but its status not yet Bound ("PVC is
// not bound"). Either fails the kubelet's first sync of the pod, and the kubelet then waits its
// fixed pod-sync back-off of 10–15 s before it tries again, although the race closed tens of
// milliseconds later. A change of the pod's annotations makes the kubelet sync the pod at once
// (its pod config sends an update for a change of spec, labels or annotations; the pod worker
// takes a pending update before its back-off). So a pod of the cluster whose sandbox is still
// not ready a little after the kubelet first saw it, while every claim it mounts is Bound, gets
// KubeletRetryAnnotation set to the time: nothing else about the pod changes (docs/design/0069).

const (
	// kubeletRetryAfter is how long a pod's sandbox may stay not ready, from the kubelet's
	// first status of the pod and from the last retry asked, before the kubelet is asked to
	// sync the pod again. A healthy pod's volumes and sandbox take well under a second here.
	// The condition's time reaches the API in whole seconds (cut down), so the first retry
	// comes 1–2 s after the kubelet's first sync.
	kubeletRetryAfter = 2 * time.Second
	// kubeletRetryWindow bounds the retries to the start of a pod: a pod whose sandbox is not
	// ready after it waits for something other than a race (a volume that cannot mount, a
	// runtime that fails), and the kubelet's own retries and events are the right answer.
	kubeletRetryWindow = 30 * time.Second
)

// kubeletRetryDue decides, for one pod, whether the kubelet is to be asked to sync it again now
// (retry), and otherwise when to look again (0: not for this state of the pod). Only a pod the
// kubelet has seen counts: its PodReadyToStartContainers condition is False (set by the
// kubelet's first sync, before it sets up volumes; on a Kubernetes without that condition no
// pod is retried). The caller checks the pod's claims (claimsBoundFor) before it retries.
func kubeletRetryDue(pod *corev1.Pod, now time.Time) (retry bool, lookAgain time.Duration) {
	if pod.DeletionTimestamp != nil || pod.Spec.NodeName == "" || pod.Status.Phase != corev1.PodPending {
		return false, 0
	}
	since, ok := sandboxNotReadySince(pod)
	if !ok {
		return false, 0
	}
	switch {
	case since.After(now.Add(kubeletRetryAfter)):
		// The node's clock is well ahead of ours: no telling how long the pod has waited.
		return false, 0
	case since.After(now):
		since = now
	}
	end := since.Add(kubeletRetryWindow)
	if now.After(end) {
		return false, 0
	}
	due := since.Add(kubeletRetryAfter)
	if last, err := time.Parse(time.RFC3339Nano, pod.Annotations[resources.KubeletRetryAnnotation]); err == nil && last.Add(kubeletRetryAfter).After(due) {
		due = last.Add(kubeletRetryAfter)
	}
	if due.After(end) { // the last retry was near the window's end (or dated ahead by hand)
		return false, 0
	}
	if now.Before(due) {
		return false, due.Sub(now)
	}
	return true, 0
}

// sandboxNotReadySince is when the kubelet set pod's PodReadyToStartContainers condition to
// False; ok is false when the condition is absent or not False.
func sandboxNotReadySince(pod *corev1.Pod) (since time.Time, ok bool) {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReadyToStartContainers && c.Status == corev1.ConditionFalse {
			return c.LastTransitionTime.Time, true
		}
	}
	return time.Time{}, false
}

// claimsBoundFor reports whether every claim pod mounts is among claims and Bound. A claim
// Dolphin does not select (not a data claim of the cluster) counts as not known: no retry.
func claimsBoundFor(pod *corev1.Pod, claims []corev1.PersistentVolumeClaim) bool {
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		bound := false
		for i := range claims {
			if claims[i].Name == v.PersistentVolumeClaim.ClaimName {
				bound = claims[i].Status.Phase == corev1.ClaimBound
				break
			}
		}
		if !bound {
			return false
		}
	}
	return true
}

// reconcilePodStart asks the kubelet to sync again each pod of the cluster whose start a race
// of Kubernetes' own put aside (kubeletRetryDue), and looks again while a pod may still need
// it. It is best effort — the kubelet retries by itself in 10–15 s — so its failures are
// logged and looked at again, never returned (they would hold back the cluster's status).
func (r *MySQLClusterReconciler) reconcilePodStart(ctx context.Context, c *dolphinv1.MySQLCluster, out *stepOutcome) error {
	r.retryPodStarts(ctx, c, out, time.Now())
	return nil
}

// retryPodStarts is reconcilePodStart at the time now.
func (r *MySQLClusterReconciler) retryPodStarts(ctx context.Context, c *dolphinv1.MySQLCluster, out *stepOutcome, now time.Time) {
	logger := log.FromContext(ctx)
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(c.Namespace), client.MatchingLabels(resources.SelectorLabels(c))); err != nil {
		logger.Info("pod start: could not list the pods", "error", err.Error())
		out.after(kubeletRetryAfter, "the pods could not be listed for their start")
		return
	}
	var claims []corev1.PersistentVolumeClaim
	claimsRead := false
	for i := range pods.Items {
		pod := &pods.Items[i]
		retry, lookAgain := kubeletRetryDue(pod, now)
		out.after(lookAgain, "a new pod's sandbox is not ready yet")
		if !retry {
			continue
		}
		if !claimsRead {
			var err error
			if claims, err = r.dataClaims(ctx, c); err != nil {
				logger.Info("pod start: could not list the claims", "error", err.Error())
				out.after(kubeletRetryAfter, "the claims could not be listed for a pod's start")
				return
			}
			claimsRead = true
		}
		if !claimsBoundFor(pod, claims) {
			// The kubelet's own retry is as good until the claim is Bound; the claim's update
			// wakes the cluster (claims are watched). A claim the pod template adds beside the
			// data claim is not Dolphin's to read: such a pod is left to the kubelet.
			continue
		}
		out.after(kubeletRetryAfter, "a new pod's sandbox is not ready yet")
		patch := client.MergeFrom(pod.DeepCopy())
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[resources.KubeletRetryAnnotation] = now.UTC().Format(time.RFC3339Nano)
		if err := r.Client.Patch(ctx, pod, patch); err != nil {
			logger.Info("pod start: could not ask the kubelet to sync a pod again", "pod", pod.Name, "error", err.Error())
			continue
		}
		logger.Info("asked the kubelet to sync a pod again: its sandbox is not ready and its claims are Bound", "pod", pod.Name)
		r.eventAbout(c, pod, corev1.EventTypeNormal, "KubeletRetry", "PodStart",
			"Pod %s: sandbox not ready %s after the kubelet first saw it, every claim Bound; asked the kubelet to sync it again instead of waiting for its back-off",
			pod.Name, sandboxWait(pod, now))
	}
}

// sandboxWait is how long pod's sandbox has been not ready, for the event.
func sandboxWait(pod *corev1.Pod, now time.Time) time.Duration {
	since, _ := sandboxNotReadySince(pod)
	return now.Sub(since).Round(100 * time.Millisecond)
}
