package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/termination"
)

// restoreFailure is the first instance whose restore init container failed, with the tail of
// its log (terminationMessagePolicy FallbackToLogsOnError), or "" when none did.
func restoreFailure(pods []corev1.Pod) (pod, message string) {
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	for _, p := range pods {
		for _, s := range p.Status.InitContainerStatuses {
			if s.Name != resources.ContainerSeed {
				continue
			}
			if t := s.State.Terminated; t != nil && t.ExitCode == 0 {
				continue // it failed before, and then succeeded
			}
			for _, t := range []*corev1.ContainerStateTerminated{s.State.Terminated, s.LastTerminationState.Terminated} {
				if t != nil && t.ExitCode != 0 {
					msg := strings.TrimSpace(t.Message)
					if msg == "" {
						msg = fmt.Sprintf("exit code %d (%s)", t.ExitCode, t.Reason)
					}
					return p.Name, termination.Last(msg)
				}
			}
		}
	}
	return "", ""
}

// reconcileRestoreOutcome turns a failed restore on any instance into a userError: the backup
// cannot be restored as it is (a checksum mismatch, an unreachable store, a wrong password in
// the store's Secret), so the cluster is Failed and says why; the pod keeps retrying, so a
// fixed Secret or store heals it.
func (r *MySQLClusterReconciler) reconcileRestoreOutcome(ctx context.Context, c *dolphinv1.MySQLCluster) error {
	if c.Spec.Bootstrap == nil {
		return nil
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(c.Namespace), client.MatchingLabels(resources.SelectorLabels(c))); err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	if externalBootstrap(c) != nil && physicalExternalCopy(c) == nil {
		return externalCopyOutcome(c, pods.Items)
	}
	if pod, msg := restoreFailure(pods.Items); pod != "" {
		return &userError{Reason: "RestoreFailed", Message: fmt.Sprintf(
			"restoring the backup on %s failed: %s; no server was started on that instance. Fix the store or its Secret "+
				"if the message says so (the instance retries), or delete this cluster and create it again from another backup", pod, msg)}
	}
	return nil
}

// restoredCondition is the Restored condition of a cluster with spec.bootstrap (nil without).
func restoredCondition(o observation) *metav1.Condition {
	if !o.Bootstrap {
		return nil
	}
	from := o.Previous.RestoredFrom
	if from == nil {
		return &metav1.Condition{Type: dolphinv1.ConditionRestored, Status: metav1.ConditionFalse, Reason: "CheckingBackup",
			Message: "checking the backup named by spec.bootstrap before creating any instance"}
	}
	if pod, msg := restoreFailure(o.Pods); pod != "" {
		return &metav1.Condition{Type: dolphinv1.ConditionRestored, Status: metav1.ConditionFalse, Reason: "RestoreFailed",
			Message: pod + ": " + msg}
	}
	done := 0
	for _, p := range o.Pods {
		for _, s := range p.Status.InitContainerStatuses {
			if s.Name == resources.ContainerSeed && s.State.Terminated != nil && s.State.Terminated.ExitCode == 0 {
				done++
			}
		}
	}
	if done >= int(o.Replicas) {
		return &metav1.Condition{Type: dolphinv1.ConditionRestored, Status: metav1.ConditionTrue, Reason: "Restored",
			Message: fmt.Sprintf("every instance holds the backup %s (GTID %s)", from.Path, from.GTIDPosition)}
	}
	// Once restored, a condition that was True stays so: later instances (a replaced pod)
	// find their data and skip the restore.
	if meta.IsStatusConditionTrue(o.Previous.Conditions, dolphinv1.ConditionRestored) {
		c := meta.FindStatusCondition(o.Previous.Conditions, dolphinv1.ConditionRestored)
		return c
	}
	return &metav1.Condition{Type: dolphinv1.ConditionRestored, Status: metav1.ConditionFalse, Reason: "Restoring",
		Message: fmt.Sprintf("%d/%d instances restored from %s", done, o.Replicas, from.Path)}
}

// externalCopyAttempts is how many times the first instance of a cluster bootstrapped from an
// external server copies it before Dolphin stops asking: each attempt is a long transaction
// on the source, and a failure that repeats (a loader error) would repeat forever.
const externalCopyAttempts = 3

// seedRestarts is how many times pod's seed container has restarted (each failed attempt).
func seedRestarts(p *corev1.Pod) int32 {
	for _, s := range p.Status.InitContainerStatuses {
		if s.Name == resources.ContainerSeed {
			return s.RestartCount
		}
	}
	return 0
}

// externalCopyOutcome is the userError of a failed copy of spec.bootstrap.external, while the
// cluster has no primary yet (afterwards a seed failure is a clone's, not the copy's).
func externalCopyOutcome(c *dolphinv1.MySQLCluster, pods []corev1.Pod) error {
	if c.Status.Topology != nil && c.Status.Topology.Primary != "" {
		return nil
	}
	pod, msg := restoreFailure(pods)
	if pod == "" {
		return nil
	}
	first := resources.PodName(c, 0)
	if pod != first {
		return &userError{Reason: "ExternalCopyFailed", Message: fmt.Sprintf(
			"cloning %s from %s, which holds the copy of the external server, failed: %s; it tries again", pod, first, msg)}
	}
	for i := range pods {
		if pods[i].Name == first && seedRestarts(&pods[i]) >= externalCopyAttempts {
			return &userError{Reason: "ExternalCopyFailed", Message: fmt.Sprintf(
				"copying the external server on %s failed %d times, the last: %s. Dolphin stopped trying (each attempt is a long "+
					"transaction on the server). Fix the server or the account of spec.bootstrap.external if the message says so, then "+
					"delete pod %s to try again, or delete this cluster", first, externalCopyAttempts, msg, first)}
		}
	}
	return &userError{Reason: "ExternalCopyFailed", Message: fmt.Sprintf(
		"copying the external server on %s failed: %s; no server was started on that instance, and it tries again (at most %d times)",
		first, msg, externalCopyAttempts)}
}
