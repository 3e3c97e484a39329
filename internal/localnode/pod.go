package localnode

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Restart back-off: the first restart waits initialBackoff, each next one
// twice as long up to maxBackoff; a container that ran resetBackoffAfter
// starts over. (The kubelet uses 10 s and 5 min; the local node is for tests
// and failover, so it restarts faster.)
const (
	initialBackoff    = time.Second
	maxBackoff        = 30 * time.Second
	resetBackoffAfter = time.Minute
	// retryVolumes is how often a pod waiting for a volume source retries.
	retryVolumes = time.Second
	// volumeSyncInterval is how often configMap and secret volumes are compared with their
	// sources.
	volumeSyncInterval = 5 * time.Second
)

// podRunner runs one pod: network, volumes, init containers, containers,
// probes, and its termination. All mutable fields are guarded by mu.
type podRunner struct {
	p   *provider
	key string // namespace/name
	dir string // Dir/pods/<ns>_<name>

	// ctx is cancelled when the pod starts terminating: supervisors then stop
	// their processes within the grace period and return.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when everything is stopped and removed
	kick   chan struct{} // a status change to send

	mu          sync.Mutex
	pod         *corev1.Pod // latest spec and metadata; status is ours
	podIP       netip.Addr
	netns       string
	startTime   metav1.Time
	initDone    bool
	failed      bool // an init container failed and will not be retried
	waitMessage string
	initCtrs    []*ctrState
	ctrs        []*ctrState
	conditions  map[corev1.PodConditionType]corev1.PodCondition
	deadline    time.Time // SIGKILL after this, once terminating
	deleting    bool      // terminating because the pod was deleted (not node shutdown)

	lastSent string // summary of the last status sent (notifier goroutine only), for the log
}

func newPodRunner(p *provider, pod *corev1.Pod) *podRunner {
	ctx, cancel := context.WithCancel(context.Background())
	r := &podRunner{
		p:          p,
		key:        pod.Namespace + "/" + pod.Name,
		dir:        filepath.Join(podsDir(p.opts.Dir), pod.Namespace+"_"+pod.Name),
		ctx:        ctx,
		cancel:     cancel,
		done:       make(chan struct{}),
		kick:       make(chan struct{}, 1),
		pod:        pod.DeepCopy(),
		startTime:  metav1.Now(),
		conditions: map[corev1.PodConditionType]corev1.PodCondition{},
	}
	for i := range pod.Spec.InitContainers {
		r.initCtrs = append(r.initCtrs, newCtrState(&r.pod.Spec.InitContainers[i], true))
	}
	for i := range pod.Spec.Containers {
		r.ctrs = append(r.ctrs, newCtrState(&r.pod.Spec.Containers[i], false))
	}
	return r
}

// changed schedules a status notification (coalesced, never blocks).
func (r *podRunner) changed() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// notifier sends the pod's status to virtual-kubelet after every change, the
// last one after the runner is done.
func (r *podRunner) notifier() {
	for {
		select {
		case <-r.kick:
			r.notify()
		case <-r.done:
			r.notify()
			return
		}
	}
}

// notify sends the pod's status, unless a newer pod took its name: virtual-kubelet
// keeps statuses by namespace/name, and the old pod's last status, arriving after the
// new pod was registered, became the new pod's — written with the old pod's UID, refused,
// and never corrected once the new pod's status stopped changing (a re-created database
// pod ran for minutes without an IP in its API object: the chaos suite's
// pod-delete-during-failover). The old pod's API object is gone by then (a StatefulSet
// re-creates a pod only after its object is deleted), so nothing waits for that status.
//
// A deleted pod's runner that is no longer registered (torn down: its API object was
// deleted) sends nothing either: nothing waits for that status, and it could only meet a
// newer pod of its name on its way.
func (r *podRunner) notify() {
	r.p.mu.Lock()
	cur := r.p.pods[r.key]
	r.p.mu.Unlock()
	if cur != r && (cur != nil || r.isDeleting()) {
		return
	}
	pod := r.podWithStatus()
	if s := statusSummary(&pod.Status); s != r.lastSent {
		r.lastSent = s
		r.p.opts.Log.Info("pod status", "pod", r.key, "uid", pod.UID, "status", s)
	}
	r.p.notify(pod)
}

// run runs the pod until it is terminated; prev, if any, is a runner of an
// earlier pod with the same name that must be gone first.
func (r *podRunner) run(prev *podRunner) {
	go r.notifier()
	defer close(r.done)
	defer r.tearDown()
	r.changed()
	if prev != nil {
		// Even when this pod is deleted meanwhile: its own end (and so the next pod of
		// the name, which waits only for this one) must come after the earlier pod's, or
		// a third pod would start beside a second still stopping (same folder, same
		// data directory).
		<-prev.done
		if r.ctx.Err() != nil {
			return
		}
	}
	vols, err := r.setUp()
	if err != nil {
		return // terminating
	}
	go r.keepVolumesInSync()
	if !r.runInitContainers(vols) {
		<-r.ctx.Done()
		return
	}
	var wg sync.WaitGroup
	for _, c := range r.ctrs {
		wg.Go(func() { r.supervise(c, vols) })
	}
	wg.Wait()
	r.changed()
	<-r.ctx.Done() // a finished pod stays until deleted
}

// setUp creates the pod's folder, network namespace and volumes, retrying
// while a volume source is missing. It fails only once terminating.
func (r *podRunner) setUp() (map[string]string, error) {
	uid := string(r.pod.UID)
	if err := os.MkdirAll(filepath.Join(r.dir, "run"), 0o755); err != nil {
		r.wait(err)
		<-r.ctx.Done()
		return nil, err
	}
	for {
		addr, err := r.p.netw.allocate(uid)
		var ns string
		if err == nil {
			ns, err = r.p.netw.addPod(r.ctx, uid, addr)
		}
		if err == nil {
			r.mu.Lock()
			r.podIP, r.netns = addr, ns
			r.mu.Unlock()
			r.changed()
			break
		}
		if !r.retry(err) {
			return nil, err
		}
	}
	for {
		r.mu.Lock()
		pod := r.podWithIPLocked()
		r.mu.Unlock()
		vols, err := prepareVolumes(r.ctx, r.p.client, pod, r.dir)
		if err == nil {
			r.wait(nil)
			return vols, nil
		}
		if !r.retry(err) {
			return nil, err
		}
	}
}

// keepVolumesInSync rewrites the pod's configMap and secret volumes when their sources
// change, every volumeSyncInterval, until the pod terminates (the kubelet does so about every
// minute; a rotated certificate reaches the server's files this way).
func (r *podRunner) keepVolumesInSync() {
	seen := map[string]string{}
	t := time.NewTicker(volumeSyncInterval)
	defer t.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
		}
		r.mu.Lock()
		pod := r.pod.DeepCopy()
		r.mu.Unlock()
		if err := refreshVolumes(r.ctx, r.p.client, pod, r.dir, seen); err != nil && r.ctx.Err() == nil {
			r.p.opts.Log.V(1).Info("volume sync", "pod", r.key, "error", err.Error())
		}
	}
}

// retry records err as why the pod waits and sleeps; false once terminating.
func (r *podRunner) retry(err error) bool {
	r.wait(err)
	select {
	case <-r.ctx.Done():
		return false
	case <-time.After(retryVolumes):
		return true
	}
}

func (r *podRunner) wait(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg != r.waitMessage {
		r.waitMessage = msg
		r.changed()
	}
}

// runInitContainers runs the init containers in order, each until it exits 0
// (retried with back-off unless restartPolicy is Never). It reports whether
// the containers may start.
func (r *podRunner) runInitContainers(vols map[string]string) bool {
	for _, c := range r.initCtrs {
		backoff := initialBackoff
		for {
			code, ok := r.runOnce(c, vols)
			if !ok {
				return false // terminating
			}
			if code == 0 {
				break
			}
			if r.pod.Spec.RestartPolicy == corev1.RestartPolicyNever {
				r.mu.Lock()
				r.failed = true
				r.mu.Unlock()
				r.changed()
				return false
			}
			if !r.sleep(backoff) {
				return false
			}
			backoff = min(2*backoff, maxBackoff)
			r.mu.Lock()
			c.restartCount++
			r.mu.Unlock()
		}
	}
	r.mu.Lock()
	r.initDone = true
	r.mu.Unlock()
	r.changed()
	return true
}

// sleep waits d; false if the pod started terminating meanwhile.
func (r *podRunner) sleep(d time.Duration) bool {
	select {
	case <-r.ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// terminate starts stopping the pod: every container's main process gets
// SIGTERM now, and the whole container SIGKILL after grace (podRunner.stop). deleting says whether to remove the pod's folder and
// API object afterwards. Calling it again only shortens the deadline.
func (r *podRunner) terminate(grace time.Duration, deleting bool) {
	r.mu.Lock()
	deadline := time.Now().Add(grace)
	if r.deadline.IsZero() || deadline.Before(r.deadline) {
		r.deadline = deadline
	}
	r.deleting = r.deleting || deleting
	r.mu.Unlock()
	r.cancel()
}

// isDeleting reports whether the pod's API object is being deleted.
func (r *podRunner) isDeleting() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.deleting
}

// tearDown runs when every process is gone: it removes the network namespace
// and, for a deleted pod, the pod's folder and API object.
func (r *podRunner) tearDown() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r.mu.Lock()
	ns, uid, deleting := r.netns, string(r.pod.UID), r.deleting
	pod := r.pod
	r.mu.Unlock()
	var errs []error
	if ns != "" {
		errs = append(errs, r.p.netw.removeNamespace(ctx, ns))
	}
	r.p.netw.release(uid)
	if deleting {
		errs = append(errs, os.RemoveAll(r.dir))
		errs = append(errs, r.p.forceDelete(ctx, pod))
	}
	if err := errors.Join(errs...); err != nil {
		r.p.opts.Log.Error(err, "tearing down pod", "pod", r.key)
	}
	r.p.opts.Log.Info("pod stopped", "pod", r.key, "uid", uid, "deleted", deleting)
	r.p.forget(r)
}

// String names the pod for messages.
func (r *podRunner) String() string { return fmt.Sprintf("pod %s (%s)", r.key, r.pod.UID) }
