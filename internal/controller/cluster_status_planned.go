package controller

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/metrics"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// How long an instance that is not ready may stay so and still count as planned work
// (docs/design/0053). Past these bounds it is trouble, whatever started it.
const (
	// plannedStopBound covers a pod being deleted: the switchover hold (25 s at most) and the
	// server's grace period (60 s), with room for a loaded node.
	plannedStopBound = 3 * time.Minute
	// plannedScheduleBound covers a new pod waiting for a node (a scale-up, a re-created pod
	// whose volume pins it, a cluster autoscaler adding a node).
	plannedScheduleBound = 5 * time.Minute
	// plannedStartBound covers a server container that started and is not ready yet: crash
	// recovery after crashOnStop, catching up on the replication it missed.
	plannedStartBound = 10 * time.Minute
	// failoverRecoveryWindow is how long after an unplanned failover the old primary's pod,
	// restarting, is trouble rather than planned work: it is the failover's aftermath.
	failoverRecoveryWindow = 10 * time.Minute
	// plannedRecheck is how often a Progressing cluster's status is computed again, so that
	// work past its bound is reported as trouble without waiting for a pod event.
	plannedRecheck = 30 * time.Second
)

// instanceWait says why one instance is not ready and whether that is planned work.
type instanceWait struct {
	Name    string
	Planned bool
	Why     string
}

// explainNotReady says, for every instance of StatefulSet sts of replicas instances that is not
// ready (its pod not ready, or missing), why, and whether that is planned — a change made on
// purpose: a rollout or a person deleting a pod, a new instance (scale-up, clone, re-clone)
// starting — or trouble: a container that restarted, a pod stuck past the bounds above, the
// old primary of a recent failover. It is a pure function of what the reconciler observed.
//
// progressingSince is when the cluster's Progressing condition last turned True (zero: it is
// not True), and wasMissing the instances the previous status already found without a pod: a
// pod missing then and now, plannedStartBound into the cluster's progress, is not being
// created — it cannot be (a pod is re-created within a second of its deletion).
func explainNotReady(sts string, pods []corev1.Pod, replicas int32, topo *dolphinv1.TopologyStatus, progressingSince time.Time, wasMissing func(string) bool, now time.Time) []instanceWait {
	var waits []instanceWait
	present := map[string]bool{}
	for i := range pods {
		p := &pods[i]
		present[p.Name] = true
		if podReady(p) {
			continue
		}
		planned, why := podWait(p, topo, now)
		waits = append(waits, instanceWait{Name: p.Name, Planned: planned, Why: why})
	}
	// A pod that does not exist is one the StatefulSet is about to create: a scale-up, or
	// a pod re-created after its deletion.
	for i := int32(0); i < replicas && sts != ""; i++ {
		name := fmt.Sprintf("%s-%d", sts, i)
		switch {
		case present[name]:
		case failedOverFrom(topo, name, now):
			waits = append(waits, instanceWait{Name: name, Why: "re-created after the failover away from it at " + stamp(lastPromotion(topo).Time.Time)})
		case !progressingSince.IsZero() && now.Sub(progressingSince) > plannedStartBound && wasMissing(name):
			waits = append(waits, instanceWait{Name: name, Why: "its pod has not been created since " + stamp(progressingSince) + " (see the StatefulSet's events)"})
		default:
			waits = append(waits, instanceWait{Name: name, Planned: true, Why: "being created"})
		}
	}
	sort.Slice(waits, func(i, j int) bool { return waits[i].Name < waits[j].Name })
	return waits
}

// podWait explains one pod that is not ready.
func podWait(p *corev1.Pod, topo *dolphinv1.TopologyStatus, now time.Time) (bool, string) {
	// First: Dolphin deletes the pod of a primary it failed over from, which would read as a
	// planned deletion.
	if failedOverFrom(topo, p.Name, now) {
		return false, "restarting after the failover away from it at " + stamp(lastPromotion(topo).Time.Time)
	}
	if p.DeletionTimestamp != nil {
		if since := now.Sub(p.DeletionTimestamp.Time) + deletionGrace(p); since > plannedStopBound {
			return false, "stopping since " + stamp(now.Add(-since))
		}
		return true, "stopping (deleted)"
	}
	if n, c := restarts(p); n > 0 {
		return false, fmt.Sprintf("container %s restarted %d times%s", c, n, lastTermination(p, c))
	}
	age := now.Sub(p.CreationTimestamp.Time)
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			if age > plannedScheduleBound {
				return false, "not scheduled since " + stamp(p.CreationTimestamp.Time) + ": " + c.Message
			}
			return true, "waiting for a node"
		}
	}
	for _, s := range p.Status.InitContainerStatuses {
		if s.State.Running != nil {
			// A clone or a restore runs as long as the data takes; a seed that fails
			// restarts its container (counted above).
			return true, "initializing (" + s.Name + ")"
		}
	}
	started := time.Time{}
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == resources.ContainerMySQLD && s.State.Running != nil {
			started = s.State.Running.StartedAt.Time
		}
	}
	switch {
	case started.IsZero() && age > plannedStartBound:
		return false, "the server has not started since the pod was created at " + stamp(p.CreationTimestamp.Time)
	case started.IsZero():
		return true, "starting"
	case now.Sub(started) > plannedStartBound:
		return false, "not ready since the server started at " + stamp(started)
	case readyLost(p, started):
		return false, "the server stopped answering its readiness probe"
	}
	return true, "the server is starting"
}

// failedOverFrom reports whether an unplanned failover replaced instance name as the primary
// less than failoverRecoveryWindow ago: its restart is that failover's aftermath.
func failedOverFrom(topo *dolphinv1.TopologyStatus, name string, now time.Time) bool {
	lp := lastPromotion(topo)
	return lp != nil && !lp.Planned && lp.From == name && now.Sub(lp.Time.Time) < failoverRecoveryWindow
}

// stamp formats a time for a condition message. Messages carry times, never durations, so
// that they do not change at every reconcile.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// deletionGrace is how far a deleted pod's deletionTimestamp lies in the future: the API
// server sets it to the deletion time plus the grace period.
func deletionGrace(p *corev1.Pod) time.Duration {
	if p.DeletionGracePeriodSeconds != nil {
		return time.Duration(*p.DeletionGracePeriodSeconds) * time.Second
	}
	return 0
}

// restarts returns the largest restart count of pod's containers and its container's name.
func restarts(p *corev1.Pod) (int32, string) {
	var n int32
	name := ""
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, s := range list {
			if s.RestartCount > n {
				n, name = s.RestartCount, s.Name
			}
		}
	}
	return n, name
}

// lastTermination describes why container c of p last ended, when the kubelet says.
func lastTermination(p *corev1.Pod, c string) string {
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, s := range list {
			if t := s.LastTerminationState.Terminated; s.Name == c && t != nil {
				return fmt.Sprintf(" (last: %s, exit %d)", t.Reason, t.ExitCode)
			}
		}
	}
	return ""
}

// readyLost says whether a pod whose server started at started was ready since and is not
// any more: its Ready condition last changed well after the server started (a pod that
// never was ready has it from before).
func readyLost(p *corev1.Pod, started time.Time) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status != corev1.ConditionTrue {
			return c.LastTransitionTime.Time.After(started.Add(readyFlapMargin))
		}
	}
	return false
}

// readyFlapMargin separates the Ready condition's first False (set as the containers start)
// from a readiness lost later.
const readyFlapMargin = 5 * time.Second

// plannedOnly reports whether every wait is planned (and there is at least one).
func plannedOnly(waits []instanceWait) bool {
	for _, w := range waits {
		if !w.Planned {
			return false
		}
	}
	return len(waits) > 0
}

// describeWaits lists the waits as "db-1: stopping (deleted); db-2: starting".
func describeWaits(waits []instanceWait) string {
	parts := make([]string, 0, len(waits))
	for _, w := range waits {
		parts = append(parts, w.Name+": "+w.Why)
	}
	return strings.Join(parts, "; ")
}

// healthState maps a phase onto the states of the mysql_cluster_state metric: Pending and
// Initializing (a new cluster starting) and Progressing are planned work; Deleting is too.
func healthState(p dolphinv1.Phase) string {
	switch p {
	case dolphinv1.PhaseRunning:
		return metrics.StateHealthy
	case dolphinv1.PhaseDegraded:
		return metrics.StateDegraded
	case dolphinv1.PhaseFailed:
		return metrics.StateFailed
	default:
		return metrics.StateProgressing
	}
}
