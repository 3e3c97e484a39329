package controller

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// RecloneAnnotation and RecloneApprovedAnnotation are the API's (dolphinv1).
const (
	RecloneAnnotation         = dolphinv1.RecloneAnnotation
	RecloneApprovedAnnotation = dolphinv1.RecloneApprovedAnnotation
)

// formerPrimary reports whether in is a primary an unplanned failover replaced
// (status.topology.replacedPrimaries).
func formerPrimary(c *dolphinv1.MySQLCluster, in string) bool {
	t := c.Status.Topology
	return t != nil && slices.Contains(t.ReplacedPrimaries, in)
}

// consented reports whether a person approved discarding in's data
// (RecloneApprovedAnnotation names it).
func consented(c *dolphinv1.MySQLCluster, in string) bool {
	return c.Annotations[RecloneApprovedAnnotation] == in
}

// heldForConsent reports whether in is a former primary that waits for a person's consent
// before it is re-cloned, whatever the reason to re-clone: neither the annotation nor
// spec.failover.errantFormerPrimary RecloneAfterCopy lets it go.
func heldForConsent(c *dolphinv1.MySQLCluster, in string) bool {
	return formerPrimary(c, in) && !consented(c, in) &&
		resources.Defaulted(c).Spec.Failover.ErrantFormerPrimary != dolphinv1.ErrantFormerPrimaryRecloneAfterCopy
}

// reclonePlan is an instance to discard and re-seed from a healthy peer.
type reclonePlan struct {
	Instance string
	// Reason says why; Discarded what is thrown away (its position beyond the primary's).
	Reason, Discarded string
	// Consented is true when a person approved discarding the instance's data
	// (RecloneApprovedAnnotation): it is re-cloned even when no copy of what it holds
	// beyond the primary can be made. Otherwise a copy is required.
	Consented bool
}

// decideReclone picks at most one instance to re-clone (pure): an errant replica (it holds
// transactions the primary lacks) — an errant former primary only with the user's consent
// (RecloneApprovedAnnotation) or spec.failover.errantFormerPrimary RecloneAfterCopy — or one
// whose replication stopped because the primary no longer has the binlogs it needs (error
// 1236). Whatever the plan, reconcileReclone keeps a copy of what the instance holds beyond
// the primary first, and goes on without one only with consent. Never the primary, never during a failover or
// while another instance is being seeded, and only when a healthy peer other than it can serve
// the clone.
func decideReclone(c *dolphinv1.MySQLCluster, pods []corev1.Pod) (reclonePlan, bool) {
	t := c.Status.Topology
	if c.Annotations[RecloneAnnotation] == "manual" || c.Spec.Engine.Flavor == dolphinv1.FlavorMySQL ||
		t == nil || t.Primary == "" || t.FailoverInProgress != nil {
		return reclonePlan{}, false
	}
	for i := range pods {
		if seedWaiting(&pods[i]) {
			return reclonePlan{}, false
		}
	}
	var primaryPos string
	for _, in := range t.Instances {
		if in.Name == t.Primary {
			primaryPos = in.GTIDExecuted
		}
	}
	var plans []reclonePlan
	for _, in := range t.Instances {
		if in.Name == t.Primary {
			continue
		}
		switch {
		case heldForConsent(c, in.Name):
			// A former primary replaced by a failover: what it holds beyond the primary may
			// be writes it acknowledged alone — also when it shows as error 1236 (a diverged
			// history whose sequence numbers look behind). Never discarded without consent.
		case slices.Contains(t.ErrantInstances, in.Name):
			plans = append(plans, reclonePlan{Instance: in.Name, Reason: "it holds transactions the primary does not have (errant)",
				Discarded: fmt.Sprintf("its position %s beyond the primary's %s", orNone(in.GTIDExecuted), orNone(primaryPos)),
				Consented: consented(c, in.Name)})
		case in.Reachable && !in.Replicating && strings.Contains(in.Error, "1236"):
			plans = append(plans, reclonePlan{Instance: in.Name, Reason: "the primary no longer has the binary logs it needs (error 1236)",
				Discarded: fmt.Sprintf("its data at position %s", orNone(in.GTIDExecuted)), Consented: consented(c, in.Name)})
		}
	}
	slices.SortFunc(plans, func(a, b reclonePlan) int { return strings.Compare(a.Instance, b.Instance) })
	for _, p := range plans {
		peers := make([]corev1.Pod, 0, len(pods))
		for _, pod := range pods {
			if pod.Name != p.Instance {
				peers = append(peers, pod)
			}
		}
		if _, err := chooseBackupSource(c, peers, dolphinv1.BackupTargetPreferReplica); err == nil {
			return p, true
		}
	}
	return reclonePlan{}, false
}

func orNone(s string) string {
	if s == "" {
		return "(empty)"
	}
	return s
}
