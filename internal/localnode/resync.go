package localnode

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// statusResyncInterval is how often the node compares its pods' statuses in the API with its own.
const statusResyncInterval = 5 * time.Second

// resyncStatuses is the check a kubelet's status manager makes (its syncBatch, every 10 s)
// and virtual-kubelet does not: every statusResyncInterval it lists the node's pods and, for
// each pod whose status in the API has differed from the node's for two checks in a row,
// writes the node's status itself. virtual-kubelet writes a status only when the provider
// sends a new one, so a write it lost (it keeps one status per pod name, and a re-created
// pod's can be taken by the old pod's) stayed lost: a re-created database pod ran for minutes
// without an address in its API object (the chaos suite, docs/design/0036).
func (p *provider) resyncStatuses(ctx context.Context) error {
	t := time.NewTicker(statusResyncInterval)
	defer t.Stop()
	var drifting map[types.UID]string
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		drifting = p.resyncOnce(ctx, drifting)
	}
}

// resyncOnce is one check. drifting holds, per pod UID, the node's status summary of the pods
// that differed at the last check; it returns those that differ now and were not corrected.
func (p *provider) resyncOnce(ctx context.Context, drifting map[types.UID]string) map[types.UID]string {
	ctx, cancel := context.WithTimeout(ctx, statusResyncInterval)
	defer cancel()
	list, err := p.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: "spec.nodeName=" + p.opts.NodeName})
	if err != nil {
		p.opts.Log.V(1).Info("status resync: listing pods", "error", err.Error())
		return drifting
	}
	next := map[types.UID]string{}
	for i := range list.Items {
		api := &list.Items[i]
		r := p.runner(api.Namespace, api.Name)
		if r == nil || r.pod.UID != api.UID || api.DeletionTimestamp != nil ||
			api.Status.Phase == corev1.PodSucceeded || api.Status.Phase == corev1.PodFailed {
			continue // not ours (any more), or no longer written by the node (as virtual-kubelet)
		}
		ours := r.podWithStatus()
		want := statusSummary(&ours.Status)
		have := statusSummary(&api.Status)
		if have == want {
			continue
		}
		if drifting[api.UID] != want {
			next[api.UID] = want // first seen: virtual-kubelet may be writing it right now
			continue
		}
		p.opts.Log.Info("pod status in the API differs from the node's: writing it", "pod", r.key,
			"uid", api.UID, "api", have, "node", want)
		upd := api.DeepCopy()
		upd.Status = ours.Status
		if _, err := p.client.CoreV1().Pods(api.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{}); err != nil {
			p.opts.Log.Info("status resync: writing the status failed", "pod", r.key, "error", err.Error())
			next[api.UID] = want
		}
	}
	return next
}

// statusSummary is what a status says that matters to its readers: phase, addresses, and per
// container whether it runs, is ready and how often it restarted (times are left out: the API
// keeps them to the second).
func statusSummary(st *corev1.PodStatus) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s ip=%s", st.Phase, st.PodIP)
	for _, cs := range slices.Concat(st.InitContainerStatuses, st.ContainerStatuses) {
		state := "waiting"
		switch {
		case cs.State.Running != nil:
			state = "running"
		case cs.State.Terminated != nil:
			state = fmt.Sprintf("exited(%d)", cs.State.Terminated.ExitCode)
		}
		fmt.Fprintf(&b, " %s=%s,ready=%t,restarts=%d", cs.Name, state, cs.Ready, cs.RestartCount)
	}
	for _, c := range st.Conditions {
		if c.Type == corev1.PodReady {
			fmt.Fprintf(&b, " Ready=%s", c.Status)
		}
	}
	return b.String()
}
