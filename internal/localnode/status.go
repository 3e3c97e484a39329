package localnode

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// podGrace is the pod's termination grace period (default 30 s).
func (r *podRunner) podGrace() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return graceOf(r.pod)
}

func graceOf(pod *corev1.Pod) time.Duration {
	if pod.DeletionGracePeriodSeconds != nil {
		return time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		return time.Duration(*g) * time.Second
	}
	return 30 * time.Second
}

// podWithIPLocked is the pod with the addresses in its status, for the
// downward API. r.mu must be held.
func (r *podRunner) podWithIPLocked() *corev1.Pod {
	pod := r.pod.DeepCopy()
	if r.podIP.IsValid() {
		pod.Status.PodIP = r.podIP.String()
		pod.Status.PodIPs = []corev1.PodIP{{IP: pod.Status.PodIP}}
	}
	host := r.p.netw.gateway.String()
	pod.Status.HostIP = host
	pod.Status.HostIPs = []corev1.HostIP{{IP: host}}
	return pod
}

// podWithStatus is the pod with the status the node reports now.
func (r *podRunner) podWithStatus() *corev1.Pod {
	r.mu.Lock()
	defer r.mu.Unlock()
	pod := r.podWithIPLocked()
	st := &pod.Status
	st.StartTime = &r.startTime
	st.Phase = r.phaseLocked()
	st.Reason, st.Message = "", ""
	st.InitContainerStatuses = r.statusesLocked(r.initCtrs)
	st.ContainerStatuses = r.statusesLocked(r.ctrs)

	containersReady := len(r.ctrs) > 0
	for _, c := range r.ctrs {
		containersReady = containersReady && c.ready
	}
	networkReady := r.netns != ""
	initialized := r.initDone || len(r.initCtrs) == 0 && networkReady
	st.Conditions = []corev1.PodCondition{
		r.conditionLocked(corev1.PodReadyToStartContainers, networkReady, ""),
		r.conditionLocked(corev1.PodInitialized, initialized, "ContainersNotInitialized"),
		r.conditionLocked(corev1.ContainersReady, containersReady, "ContainersNotReady"),
		r.conditionLocked(corev1.PodReady, containersReady, "ContainersNotReady"),
		r.conditionLocked(corev1.PodScheduled, true, ""),
	}
	return pod
}

// phaseLocked derives the pod phase from its containers, as the kubelet does.
func (r *podRunner) phaseLocked() corev1.PodPhase {
	if r.failed {
		return corev1.PodFailed
	}
	if !r.initDone {
		return corev1.PodPending
	}
	running, succeeded, failed, waiting := 0, 0, 0, 0
	for _, c := range r.ctrs {
		switch {
		case c.state.Running != nil:
			running++
		case c.state.Terminated != nil && c.state.Terminated.ExitCode == 0:
			succeeded++
		case c.state.Terminated != nil:
			failed++
		case c.lastState.Terminated != nil: // waiting to restart
			running++
		default:
			waiting++
		}
	}
	switch {
	case waiting > 0:
		return corev1.PodPending
	case running > 0:
		return corev1.PodRunning
	}
	// Every container has terminated: with restartPolicy Always (or
	// OnFailure and a failure) they restart, the pod is still running.
	policy := r.pod.Spec.RestartPolicy
	if r.ctx.Err() == nil && (policy == corev1.RestartPolicyAlways || policy == "" ||
		policy == corev1.RestartPolicyOnFailure && failed > 0) {
		return corev1.PodRunning
	}
	if failed > 0 {
		return corev1.PodFailed
	}
	return corev1.PodSucceeded
}

func (r *podRunner) statusesLocked(ctrs []*ctrState) []corev1.ContainerStatus {
	out := make([]corev1.ContainerStatus, 0, len(ctrs))
	for _, c := range ctrs {
		state := c.state
		if r.waitMessage != "" && state.Waiting != nil && c.lastState.Terminated == nil {
			state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
				Reason: "ContainerCreating", Message: r.waitMessage}}
		}
		cs := corev1.ContainerStatus{
			Name:                 c.spec.Name,
			Image:                c.spec.Image,
			ImageID:              "dolphin-local://host/" + c.spec.Image,
			ContainerID:          containerID(c.pid),
			State:                *state.DeepCopy(),
			LastTerminationState: *c.lastState.DeepCopy(),
			Ready:                c.ready,
			RestartCount:         c.restartCount,
		}
		if !c.init {
			cs.Started = ptr.To(c.state.Running != nil && c.started)
		}
		if c.init && c.state.Terminated != nil && c.state.Terminated.ExitCode == 0 {
			cs.Ready = true
		}
		out = append(out, cs)
	}
	return out
}

// conditionLocked returns condition t, keeping its transition time while its
// status does not change.
func (r *podRunner) conditionLocked(t corev1.PodConditionType, ok bool, reason string) corev1.PodCondition {
	status := corev1.ConditionFalse
	if ok {
		status, reason = corev1.ConditionTrue, ""
	}
	prev, seen := r.conditions[t]
	if seen && prev.Status == status {
		return prev
	}
	c := corev1.PodCondition{Type: t, Status: status, Reason: reason, LastTransitionTime: metav1.Now()}
	r.conditions[t] = c
	return c
}
