package clustermanager

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/topology"
)

// lostPrimaryGrace is the termination grace given to the pod of a primary that was failed
// over while it did not answer: a hung server cannot shut down cleanly anyway.
const lostPrimaryGrace = int64(1)

// restartLostPrimary deletes the pod of a primary that a failover replaced while it did not
// answer (hung, or cut off from everyone). Left alone, a hung primary that resumes would
// commit what was waiting for an acknowledgement and be errant; killed, it restarts with
// --init-rpl-role=SLAVE, rolls back what nobody acknowledged and rejoins as a replica
// (docs/design/0011). A replaced primary that answers (restarted behind a replica) rejoins
// by itself and is left alone. The StatefulSet re-creates the pod on the same volume.
// A deletion that fails is tried again at every cycle until the pod is gone or replaced.
func (r *reporter) restartLostPrimary(ctx context.Context, rep topology.Report) error {
	if p := rep.Promotion; p != nil && !p.Planned && p.From != "" {
		r.restart = &pendingRestart{pod: p.From}
		// Only a credible loss time spares a pod: sparing the hung one would leave it to
		// resume, deleting a fresh one costs a restart.
		if p.Duration > 0 && p.Duration < maxCredibleLoss {
			r.restart.lostSince = time.Now().Add(-p.Duration)
		}
	}
	// A failover that waits for writes only the lost primary holds restarts it once: killed,
	// it keeps every write it acknowledged and comes back as the primary (docs/design/0039).
	switch lost := rep.Decision.RestartLostPrimary; {
	case lost == "":
		r.restartedForWaiting = ""
	case lost != r.restartedForWaiting && r.restart == nil:
		// A pod re-created since the loss (deleted by someone else) is starting with the
		// writes already: it is spared.
		r.restart, r.restartedForWaiting = &pendingRestart{pod: lost, waiting: true, lostSince: rep.PrimaryLostSince}, lost
	}
	pr := r.restart
	if pr == nil {
		return nil
	}
	for _, in := range rep.Instances {
		if in.Name == pr.pod && in.Reachable() {
			r.restart = nil // it answers: it rejoins by itself
			return nil
		}
	}
	var pod corev1.Pod
	if err := r.m.APIReader().Get(ctx, types.NamespacedName{Namespace: r.key.Namespace, Name: pr.pod}, &pod); err != nil {
		if apierrors.IsNotFound(err) {
			r.restart = nil
			return nil
		}
		return fmt.Errorf("reading pod %s: %w", pr.pod, err)
	}
	if pod.DeletionTimestamp != nil || (pr.uid != "" && pod.UID != pr.uid) || createdAfter(pod, pr.lostSince) {
		r.restart = nil // being deleted, or already replaced
		return nil
	}
	if r.serviceSelects == pr.pod || time.Since(r.serviceLeft[pr.pod]) < serviceDrain {
		return nil // clients may still be sent to it: the next report tries again
	}
	pr.uid = pod.UID
	uid := pod.UID
	r.releaseStop(ctx, &pod)
	if err := r.m.Client.Delete(ctx, &pod, client.GracePeriodSeconds(lostPrimaryGrace),
		client.Preconditions{UID: &uid}); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			r.restart = nil
			return nil
		}
		return fmt.Errorf("deleting pod %s: %w", pr.pod, err)
	}
	r.restart = nil
	if pr.waiting {
		r.event(ctx, corev1.EventTypeWarning, "RestartedLostPrimary", "Delete",
			"deleted pod %s of the lost primary, which does not answer, so that it restarts: it holds writes no replica left has, and comes back as the primary", pr.pod)
		return nil
	}
	r.event(ctx, corev1.EventTypeWarning, "RestartedLostPrimary", "Delete",
		"deleted pod %s of the replaced primary, which did not answer, so that it restarts and rejoins as a replica", pr.pod)
	return nil
}

// releaseStopTimeout bounds the release of a replaced primary's hold before its deletion:
// short, because the deletion waits for it and a hung primary's pod may not answer at all
// (the deletion's own 1 s grace period then bounds the hold); an agent that answers does so
// in milliseconds.
const releaseStopTimeout = 300 * time.Millisecond

// releaseStop ends pod's preStop hold, when it has one, before Dolphin deletes it to restart
// a replaced primary: that server must stop the moment the deletion reaches the node
// (restartLostPrimary). A failure is logged; the deletion goes on.
func (r *reporter) releaseStop(ctx context.Context, pod *corev1.Pod) {
	if r.m.ReleaseStop == nil || !resources.HoldsForSwitchover(pod) {
		return
	}
	var c dolphinv1.MySQLCluster
	err := r.m.Client.Get(ctx, r.key, &c)
	if err == nil {
		rctx, cancel := context.WithTimeout(ctx, releaseStopTimeout)
		err = r.m.ReleaseStop(rctx, &c, pod)
		cancel()
	}
	if err != nil {
		r.m.Log.Info("the replaced primary's stop was not released before its deletion: it waits out its grace period",
			"cluster", r.key.String(), "pod", pod.Name, "error", err.Error())
	}
}

// serviceDrain is how long a lost primary's pod is left alone after the primary Service
// stopped selecting it. kube-proxy applies a Service change up to its minSyncPeriod (1 s by
// default) later; deleting the pod meanwhile resets its clients' connections, and a client
// that reconnects at once is still sent to the pod, whose address is going away: its SYN gets
// no answer, and kube-proxy's connection tracking keeps the retries there — a client without a
// connect timeout waits for the kernel's SYN retries (~2 min). The chaos suite's sysbench did,
// twice, when the promotion's report moved the Service and deleted the hung primary's pod in
// the same milliseconds.
const serviceDrain = 2 * time.Second

// maxCredibleLoss bounds the failover durations whose start restartLostPrimary trusts to
// tell the lost pod from a re-created one (an engine that did not see the loss begin reports
// a meaningless one).
const maxCredibleLoss = 10 * time.Minute

// createdAfter reports whether pod was created after t (never for a zero t). Creation times
// have whole seconds: a pod created in the same second as t counts as created before it (a
// lost primary's pod ran for far longer than a second before it was lost).
func createdAfter(pod corev1.Pod, t time.Time) bool {
	return !t.IsZero() && pod.CreationTimestamp.Time.After(t)
}
