package controller

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// RecloneAnnotation on a MySQLCluster set to "manual" stops Dolphin from re-cloning errant or
// unrecoverable replicas by itself: they are reported (Degraded) and left alone. Any other
// value, or none, is the automatic default.
const RecloneAnnotation = "mysql.dolphin.dev/reclone"

// RecloneApprovedAnnotation on a MySQLCluster names an errant instance that Dolphin may
// re-clone although an unplanned failover replaced it as the primary (status.topology.
// replacedPrimaries): such an instance may hold the only copy of writes it acknowledged, so
// it is held out until a person, having looked, says so. Removed once the re-clone began.
const RecloneApprovedAnnotation = "mysql.dolphin.dev/reclone-approved"

// heldForConsent reports whether in is a former primary (status.topology.replacedPrimaries)
// that waits for a person's consent before it is re-cloned, whatever the reason to re-clone.
func heldForConsent(c *dolphinv1.MySQLCluster, in string) bool {
	t := c.Status.Topology
	return t != nil && slices.Contains(t.ReplacedPrimaries, in) && c.Annotations[RecloneApprovedAnnotation] != in
}

// reclonePlan is an instance to discard and re-seed from a healthy peer.
type reclonePlan struct {
	Instance string
	// Reason says why; Discarded what is thrown away (its position beyond the primary's).
	Reason, Discarded string
}

// decideReclone picks at most one instance to re-clone (pure): an errant replica (it holds
// transactions the primary lacks) — an errant former primary only with the user's consent
// (RecloneApprovedAnnotation) — or one whose replication stopped because the primary no
// longer has the binlogs it needs (error 1236). Never the primary, never during a failover or
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
				Discarded: fmt.Sprintf("its position %s beyond the primary's %s", orNone(in.GTIDExecuted), orNone(primaryPos))})
		case in.Reachable && !in.Replicating && strings.Contains(in.Error, "1236"):
			plans = append(plans, reclonePlan{Instance: in.Name, Reason: "the primary no longer has the binary logs it needs (error 1236)",
				Discarded: fmt.Sprintf("its data at position %s", orNone(in.GTIDExecuted))})
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
