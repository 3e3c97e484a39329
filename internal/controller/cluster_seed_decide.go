package controller

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// Seed modes: how an instance with an empty data directory starts.
const (
	// SeedEmpty initialises a fresh data directory (a new cluster, and MySQL always).
	SeedEmpty = "empty"
	// SeedBackup restores the backup of spec.bootstrap (a cluster's first instances).
	SeedBackup = "backup"
	// SeedClone copies a healthy peer's data directory, streamed from its agent (an instance
	// added to, or replaced in, a cluster that holds data).
	SeedClone = "clone"
	// SeedExternal copies the server of spec.bootstrap.external (a new cluster's first
	// instance; the others are cloned from it).
	SeedExternal = "external"
)

// seedPlan is what the operator tells an instance's seed container.
type seedPlan struct {
	Mode string
	// Source is the peer to clone (SeedClone only).
	Source *corev1.Pod
}

// decideSeed says how pod, whose data directory is empty, is seeded; a non-empty wait says
// why it must wait instead. It is pure: the cluster's engine record and the pods decide.
//   - MySQL: empty (clone is not built for it), then replication from the primary.
//   - A cluster that never had a primary: empty, or the backup of spec.bootstrap.
//   - A cluster with data: a clone of its healthiest peer (a replica preferred, as for
//     backups), never of itself; it waits while no peer can serve one.
func decideSeed(c *dolphinv1.MySQLCluster, pods []corev1.Pod, pod *corev1.Pod) (seedPlan, string) {
	if c.Spec.Engine.Flavor == dolphinv1.FlavorMySQL {
		return seedPlan{Mode: SeedEmpty}, ""
	}
	if c.Status.Topology == nil || c.Status.Topology.Primary == "" {
		if c.Spec.Bootstrap == nil {
			return seedPlan{Mode: SeedEmpty}, ""
		}
		if externalBootstrap(c) != nil {
			return decideExternalSeed(c, pods, pod)
		}
		if c.Status.RestoredFrom == nil {
			return seedPlan{}, "the backup of spec.bootstrap is not resolved yet"
		}
		return seedPlan{Mode: SeedBackup}, ""
	}
	peers := make([]corev1.Pod, 0, len(pods))
	for _, p := range pods {
		if p.Name != pod.Name {
			peers = append(peers, p)
		}
	}
	src, err := chooseBackupSource(c, peers, dolphinv1.BackupTargetPreferReplica)
	if err != nil {
		return seedPlan{}, fmt.Sprintf("no peer to clone %s from: %v", pod.Name, err)
	}
	return seedPlan{Mode: SeedClone, Source: src.Pod}, ""
}

// decideExternalSeed seeds a new cluster of spec.bootstrap.external: its first instance
// copies the external server once the checks passed, the others are cloned from the first
// once it serves (a copy each would load the source thrice and land at three positions).
// With physicalCopy every instance restores the backup instead.
func decideExternalSeed(c *dolphinv1.MySQLCluster, pods []corev1.Pod, pod *corev1.Pod) (seedPlan, string) {
	if !externalSourceReady(c) {
		return seedPlan{}, "the external server's checks have not passed (condition " + dolphinv1.ConditionExternalSourceReady + ")"
	}
	if physicalExternalCopy(c) != nil {
		// Every instance restores the backup taken on the server's host: they all start at
		// its position, as from any bootstrap backup.
		if c.Status.RestoredFrom == nil {
			return seedPlan{}, "the backup of spec.bootstrap.external.physicalCopy is not resolved yet"
		}
		return seedPlan{Mode: SeedBackup}, ""
	}
	first := resources.PodName(c, 0)
	if pod.Name == first {
		if n := seedRestarts(pod); n >= externalCopyAttempts {
			return seedPlan{}, fmt.Sprintf("the copy of the external server failed %d times: delete pod %s to try again", n, first)
		}
		return seedPlan{Mode: SeedExternal}, ""
	}
	for i := range pods {
		p := &pods[i]
		if p.Name == first && p.DeletionTimestamp == nil && p.Status.PodIP != "" &&
			containerReady(p, resources.ContainerMySQLD) && containerReady(p, resources.ContainerAgent) {
			return seedPlan{Mode: SeedClone, Source: p}, ""
		}
	}
	return seedPlan{}, first + " copies the external server first; " + pod.Name + " is cloned from it then"
}

// seedWaiting is true when pod's seed init container runs: it waits for an instruction, or
// carries one out.
func seedWaiting(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.PodIP == "" {
		return false
	}
	for _, s := range p.Status.InitContainerStatuses {
		if s.Name == resources.ContainerSeed {
			return s.State.Running != nil
		}
	}
	return false
}
