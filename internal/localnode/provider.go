package localnode

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// provider is the virtual-kubelet provider (node.PodLifecycleHandler and
// node.PodNotifier): one podRunner per pod.
type provider struct {
	opts   Options
	client kubernetes.Interface
	netw   *network
	mounts mountPoints

	mu       sync.Mutex
	pods     map[string]*podRunner // namespace/name -> the newest runner
	notifyFn func(*corev1.Pod)
	closed   bool
}

func newProvider(opts Options, client kubernetes.Interface, netw *network) *provider {
	return &provider{opts: opts, client: client, netw: netw, pods: map[string]*podRunner{}}
}

// CreatePod starts running pod. A runner of an earlier pod with the same name
// (deleted, still stopping) finishes first.
func (p *provider) CreatePod(_ context.Context, pod *corev1.Pod) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("localnode: node is shutting down")
	}
	key := pod.Namespace + "/" + pod.Name
	prev := p.pods[key]
	if prev != nil && prev.pod.UID == pod.UID {
		return nil
	}
	r := newPodRunner(p, pod)
	p.pods[key] = r
	if prev != nil {
		p.opts.Log.Info("pod created; starts once the earlier pod of its name is gone", "pod", key, "uid", pod.UID, "earlier", prev.pod.UID)
	} else {
		p.opts.Log.Info("pod created", "pod", key, "uid", pod.UID)
	}
	go r.run(prev)
	return nil
}

// UpdatePod takes the new metadata (labels, annotations) and image fields.
// Images map to the same host binaries, so nothing restarts.
func (p *provider) UpdatePod(_ context.Context, pod *corev1.Pod) error {
	r := p.runner(pod.Namespace, pod.Name)
	if r == nil || r.pod.UID != pod.UID {
		return errdefs.NotFoundf("pod %s/%s is not running here", pod.Namespace, pod.Name)
	}
	r.mu.Lock()
	r.pod.Labels, r.pod.Annotations = pod.Labels, pod.Annotations
	r.mu.Unlock()
	r.changed()
	return nil
}

// DeletePod starts terminating the pod (grace period from the deletion, else
// the spec). It returns at once; once every process is gone the runner
// removes the pod's network and folder and force-deletes the API object.
func (p *provider) DeletePod(_ context.Context, pod *corev1.Pod) error {
	r := p.runner(pod.Namespace, pod.Name)
	if r == nil {
		return errdefs.NotFoundf("pod %s/%s is not running here", pod.Namespace, pod.Name)
	}
	if r.pod.UID != pod.UID {
		// An earlier pod of the name, already replaced: the runner is a newer pod's.
		p.opts.Log.Info("not stopping pod: the node runs another pod of its name", "pod", r.key, "uid", pod.UID, "running", r.pod.UID)
		return nil
	}
	p.opts.Log.Info("pod deleted: stopping it", "pod", r.key, "uid", r.pod.UID, "grace", graceOf(pod).String())
	r.terminate(graceOf(pod), true)
	return nil
}

// GetPod returns the pod as the node runs it.
//
// A pod being deleted is not returned: virtual-kubelet looks pods up by name and compares
// only specs, labels and annotations, so a StatefulSet's new pod of the same name would
// otherwise pass for the old one and never start. Not found, it is created (CreatePod lets
// the old one finish first).
func (p *provider) GetPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	r := p.runner(namespace, name)
	if r == nil || r.isDeleting() {
		return nil, errdefs.NotFoundf("pod %s/%s is not running here", namespace, name)
	}
	return r.podWithStatus(), nil
}

// GetPodStatus returns the pod's current status, also while it is being deleted.
func (p *provider) GetPodStatus(_ context.Context, namespace, name string) (*corev1.PodStatus, error) {
	r := p.runner(namespace, name)
	if r == nil {
		return nil, errdefs.NotFoundf("pod %s/%s is not running here", namespace, name)
	}
	return &r.podWithStatus().Status, nil
}

// GetPods returns every pod the node runs.
func (p *provider) GetPods(context.Context) ([]*corev1.Pod, error) {
	p.mu.Lock()
	runners := make([]*podRunner, 0, len(p.pods))
	for _, r := range p.pods {
		runners = append(runners, r)
	}
	p.mu.Unlock()
	pods := make([]*corev1.Pod, 0, len(runners))
	for _, r := range runners {
		pods = append(pods, r.podWithStatus())
	}
	return pods, nil
}

// NotifyPods registers virtual-kubelet's status callback.
func (p *provider) NotifyPods(_ context.Context, f func(*corev1.Pod)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.notifyFn = f
}

func (p *provider) notify(pod *corev1.Pod) {
	p.mu.Lock()
	f := p.notifyFn
	p.mu.Unlock()
	if f != nil {
		f(pod)
	}
}

func (p *provider) runner(namespace, name string) *podRunner {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pods[namespace+"/"+name]
}

// forget drops r once it is done (unless a newer pod took its name).
func (p *provider) forget(r *podRunner) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pods[r.key] == r {
		delete(p.pods, r.key)
	}
}

// forceDelete removes the API object of a pod whose processes are gone.
func (p *provider) forceDelete(ctx context.Context, pod *corev1.Pod) error {
	opts := metav1.DeleteOptions{GracePeriodSeconds: new(int64),
		Preconditions: metav1.NewUIDPreconditions(string(pod.UID))}
	err := p.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, opts)
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// shutdown stops every pod (each with its grace period) without deleting the
// API objects, and waits until they are stopped or ctx is done.
func (p *provider) shutdown(ctx context.Context) {
	p.mu.Lock()
	p.closed = true
	runners := make([]*podRunner, 0, len(p.pods))
	for _, r := range p.pods {
		runners = append(runners, r)
	}
	p.mu.Unlock()
	for _, r := range runners {
		r.terminate(min(r.podGrace(), 10*time.Second), false)
	}
	for _, r := range runners {
		select {
		case <-r.done:
		case <-ctx.Done():
			return
		}
	}
}
