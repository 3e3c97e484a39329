package controller

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// Requests a user makes by annotating a MySQLCluster, handed to the topology engine.

// SwitchoverAnnotation and FailoverAcceptLossAnnotation are the API's (dolphinv1).
const (
	SwitchoverAnnotation         = dolphinv1.SwitchoverAnnotation
	FailoverAcceptLossAnnotation = dolphinv1.FailoverAcceptLossAnnotation
)

// SwitchoverAcceptedAnnotation holds a switchover request between its acceptance and its
// hand-over to the engine: "<id>/<target>". The same patch that removes SwitchoverAnnotation
// writes it, so a request is accepted exactly once; the engine records the id, so an operator
// restarted before removing this annotation never carries the request out twice (the chaos
// suite saw a second switchover, back to the old primary, after such a restart).
const SwitchoverAcceptedAnnotation = "mysql.dolphin.dev/switchover-accepted"

// forwardSwitchover hands a switchover requested by annotation to the topology engine, once:
// first one patch turns SwitchoverAnnotation into SwitchoverAcceptedAnnotation with an id of
// its own, then the engine gets the request with that id, then the accepted annotation goes.
// Whatever step an operator restart interrupts, the next reconcile continues from the
// annotations left, and the engine's record of the id stops a second delivery.
func (r *MySQLClusterReconciler) forwardSwitchover(ctx context.Context, c *dolphinv1.MySQLCluster) error {
	requested, isRequested := c.Annotations[SwitchoverAnnotation]
	accepted, isAccepted := c.Annotations[SwitchoverAcceptedAnnotation]
	if (!isRequested && !isAccepted) || c.Spec.Paused {
		return nil
	}
	if isRequested {
		// A merge patch of the annotations only: no resourceVersion precondition, which the
		// engine's status writes would make fail for no reason. A newer request replaces an
		// accepted one not handed over yet.
		accepted = string(uuid.NewUUID()) + "/" + requested
		patch := client.MergeFrom(c.DeepCopy())
		delete(c.Annotations, SwitchoverAnnotation)
		c.Annotations[SwitchoverAcceptedAnnotation] = accepted
		if err := r.Client.Patch(ctx, c, patch); err != nil {
			return fmt.Errorf("accepting the %s annotation: %w", SwitchoverAnnotation, err)
		}
	}
	id, target, _ := strings.Cut(accepted, "/")
	to := target
	if to == "auto" {
		to = ""
	}
	fresh, err := r.Topology.RequestSwitchover(ctx, client.ObjectKeyFromObject(c), to, id)
	if err != nil {
		return fmt.Errorf("requesting a switchover: %w", err)
	}
	if fresh {
		r.event(c, corev1.EventTypeNormal, "SwitchoverRequested", "Switchover", "switchover to %q requested", target)
	} else {
		r.event(c, corev1.EventTypeNormal, "SwitchoverRequested", "Switchover", "switchover to %q: nothing new to do (already accepted or pending, or the primary already)", target)
	}
	patch := client.MergeFrom(c.DeepCopy())
	delete(c.Annotations, SwitchoverAcceptedAnnotation)
	if err := r.Client.Patch(ctx, c, patch); err != nil {
		return fmt.Errorf("removing the %s annotation: %w", SwitchoverAcceptedAnnotation, err)
	}
	return nil
}

// forwardAcceptLoss hands FailoverAcceptLossAnnotation to the topology engine while the
// failover it names is in progress, and removes it once none is.
func (r *MySQLClusterReconciler) forwardAcceptLoss(ctx context.Context, c *dolphinv1.MySQLCluster) error {
	from, ok := c.Annotations[FailoverAcceptLossAnnotation]
	if !ok {
		return nil
	}
	if t := c.Status.Topology; t != nil && t.FailoverInProgress != nil && t.FailoverInProgress.From == from {
		waiting, err := r.Topology.AcceptFailoverLoss(client.ObjectKeyFromObject(c), from)
		if err != nil {
			return fmt.Errorf("accepting the loss of the failover from %s: %w", from, err)
		}
		if waiting {
			r.event(c, corev1.EventTypeWarning, "FailoverLossAccepted", "Failover",
				"failover from %s may promote a replica without the writes only %s received: they are given up (%s)",
				from, t.FailoverInProgress.ReceivedBy, FailoverAcceptLossAnnotation)
			return nil
		}
	} else {
		r.event(c, corev1.EventTypeNormal, "FailoverLossAccepted", "Failover",
			"no failover from %q is in progress: %s removed, nothing given up", from, FailoverAcceptLossAnnotation)
	}
	patch := client.MergeFrom(c.DeepCopy())
	delete(c.Annotations, FailoverAcceptLossAnnotation)
	if err := r.Client.Patch(ctx, c, patch); err != nil {
		return fmt.Errorf("removing the %s annotation: %w", FailoverAcceptLossAnnotation, err)
	}
	return nil
}
