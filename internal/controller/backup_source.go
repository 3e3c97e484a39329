package controller

import (
	"fmt"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// maxBackupSourceLagSeconds is the replication lag above which a replica is not used as a
// backup source while a closer one (or the primary) is available.
const maxBackupSourceLagSeconds = 300

// backupSource is the instance a backup is taken on.
type backupSource struct {
	Pod  *corev1.Pod
	Role dolphinv1.InstanceRole
}

// chooseBackupSource picks the instance for a backup from the engine's last observation and
// the pods: with PreferReplica, the least lagging healthy replica (reachable, replicating, not
// errant, lag known and at most maxBackupSourceLagSeconds, its pod running with both the
// server and the agent ready), else the primary; with Primary, the primary. It is pure: the
// reason it returns when nothing qualifies is shown to the user.
func chooseBackupSource(c *dolphinv1.MySQLCluster, pods []corev1.Pod, target dolphinv1.BackupTarget) (backupSource, error) {
	t := c.Status.Topology
	if t == nil || t.Primary == "" {
		return backupSource{}, fmt.Errorf("the cluster has no established primary yet (topology not observed)")
	}
	byName := map[string]*corev1.Pod{}
	for i := range pods {
		byName[pods[i].Name] = &pods[i]
	}
	usable := func(name string) (*corev1.Pod, string) {
		p := byName[name]
		switch {
		case p == nil:
			return nil, "its pod does not exist"
		case p.DeletionTimestamp != nil:
			return nil, "its pod is being deleted"
		case p.Status.PodIP == "":
			return nil, "its pod has no IP yet"
		case !containerReady(p, resources.ContainerMySQLD):
			return nil, "its database container is not ready"
		case !containerReady(p, resources.ContainerAgent):
			return nil, "its agent container is not ready"
		}
		return p, ""
	}
	if target != dolphinv1.BackupTargetPrimary {
		type candidate struct {
			pod *corev1.Pod
			lag int64
		}
		var cands []candidate
		for _, in := range t.Instances {
			if in.Name == t.Primary || !in.Reachable || !in.Replicating || in.ReplicationLagSeconds == nil ||
				*in.ReplicationLagSeconds > maxBackupSourceLagSeconds || slices.Contains(t.ErrantInstances, in.Name) {
				continue
			}
			if p, _ := usable(in.Name); p != nil {
				cands = append(cands, candidate{p, *in.ReplicationLagSeconds})
			}
		}
		sort.SliceStable(cands, func(i, j int) bool {
			if cands[i].lag != cands[j].lag {
				return cands[i].lag < cands[j].lag
			}
			return cands[i].pod.Name < cands[j].pod.Name
		})
		if len(cands) > 0 {
			return backupSource{Pod: cands[0].pod, Role: dolphinv1.RoleReplica}, nil
		}
	}
	p, why := usable(t.Primary)
	if p == nil {
		return backupSource{}, fmt.Errorf("no healthy replica, and the primary %s cannot take it: %s", t.Primary, why)
	}
	return backupSource{Pod: p, Role: dolphinv1.RolePrimary}, nil
}

// containerReady is true when the pod reports the named container ready.
func containerReady(p *corev1.Pod, name string) bool {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == name {
			return s.Ready
		}
	}
	return false
}
