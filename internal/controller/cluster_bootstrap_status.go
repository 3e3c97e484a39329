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
	if pod, msg := restoreFailure(pods.Items); pod != "" && externalBootstrap(c) != nil {
		return &userError{Reason: "ExternalCopyFailed", Message: fmt.Sprintf(
			"copying the external server on %s failed: %s; no server was started on that instance, and it tries again. Fix the server "+
				"or the account of spec.bootstrap.external if the message says so, or delete this cluster", pod, msg)}
	} else if pod != "" {
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
