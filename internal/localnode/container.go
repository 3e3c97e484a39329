package localnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ctrState is one container's state, guarded by its runner's mu.
type ctrState struct {
	spec         *corev1.Container
	init         bool
	restartCount int32
	state        corev1.ContainerState
	lastState    corev1.ContainerState
	started      bool // startup probe passed (or none)
	ready        bool
	pid          int
}

func newCtrState(c *corev1.Container, init bool) *ctrState {
	return &ctrState{spec: c, init: init,
		state: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}
}

// supervise runs a regular container until the pod terminates, restarting it
// per the pod's restartPolicy with back-off.
func (r *podRunner) supervise(c *ctrState, vols map[string]string) {
	backoff := initialBackoff
	for {
		began := time.Now()
		code, ok := r.runOnce(c, vols)
		if !ok {
			return
		}
		policy := r.pod.Spec.RestartPolicy
		if policy == corev1.RestartPolicyNever || (policy == corev1.RestartPolicyOnFailure && code == 0) {
			return
		}
		if time.Since(began) > resetBackoffAfter {
			backoff = initialBackoff
		}
		r.mu.Lock()
		c.lastState = c.state
		c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
			Message: fmt.Sprintf("back-off %s restarting failed container %s", backoff, c.spec.Name)}}
		r.mu.Unlock()
		r.changed()
		if !r.sleep(backoff) {
			r.mu.Lock()
			c.state, c.lastState = c.lastState, corev1.ContainerState{}
			r.mu.Unlock()
			return
		}
		backoff = min(2*backoff, maxBackoff)
		r.mu.Lock()
		c.restartCount++
		r.mu.Unlock()
	}
}

// runOnce starts the container and waits for it to exit, running its probes
// meanwhile. It returns the exit code, or ok=false if the pod started
// terminating (the process is then stopped within the grace period).
func (r *podRunner) runOnce(c *ctrState, vols map[string]string) (code int32, ok bool) {
	if r.ctx.Err() != nil {
		return 0, false
	}
	proc, err := r.launch(c, vols)
	if err != nil {
		// Not startable (bad command, missing binary): report, as a
		// container that failed at once.
		now := metav1.Now()
		r.mu.Lock()
		c.state = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 128, Reason: "StartError", Message: err.Error(), StartedAt: now, FinishedAt: now}}
		r.mu.Unlock()
		r.changed()
		return 128, true
	}
	started := metav1.Now()
	r.mu.Lock()
	c.state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}
	c.pid = proc.cmd.Process.Pid
	c.started = c.spec.StartupProbe == nil
	c.ready = false
	r.mu.Unlock()
	r.changed()

	probeCtx, stopProbes := context.WithCancel(r.ctx)
	if !c.init {
		go r.probe(probeCtx, c, proc)
	}
	select {
	case <-proc.done:
	case <-r.ctx.Done():
		r.stop(proc, r.graceDeadline())
	}
	stopProbes()
	code, reason := proc.exitCode()
	message := terminationMessage(r.dir, c.spec, code)
	r.mu.Lock()
	c.state = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: code, Reason: reason, Message: message, StartedAt: started, FinishedAt: metav1.Now(),
		ContainerID: containerID(c.pid)}}
	c.ready, c.pid = false, 0
	r.mu.Unlock()
	r.changed()
	return code, r.ctx.Err() == nil
}

func (r *podRunner) graceDeadline() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.deadline
}

// stop stops a container as the kubelet does: SIGTERM to its main process, SIGKILL to all
// of it at deadline; it waits for the exit (after which nothing of the container is left,
// process.wait).
func (r *podRunner) stop(proc *process, deadline time.Time) {
	proc.terminate()
	select {
	case <-proc.done:
	case <-time.After(time.Until(deadline)):
		proc.kill()
		<-proc.done
	}
}

// launch resolves the container's binary, environment, user and mounts, and
// starts it in the pod's namespaces.
func (r *podRunner) launch(c *ctrState, vols map[string]string) (*process, error) {
	r.mu.Lock()
	pod := r.podWithIPLocked()
	netns := r.netns
	r.mu.Unlock()
	spec := c.spec
	bin, err := resolveBinary(spec, r.p.opts.DolphinBinary)
	if err != nil {
		return nil, err
	}
	env, envMap, err := containerEnv(r.ctx, r.p.client, pod, spec)
	if err != nil {
		return nil, err
	}
	uid, gid, groups := credentials(pod, spec)
	ls := launchSpec{
		NetNS:    nsPath(netns),
		Hostname: podHostname(pod),
		Dir:      spec.WorkingDir,
		UID:      uid, GID: gid, Groups: groups,
		Path: bin,
		Args: expandArgs(append(append([]string{}, spec.Command...), spec.Args...), envMap),
		Env:  env,
	}
	for _, vm := range spec.VolumeMounts {
		src, ok := vols[vm.Name]
		if !ok {
			return nil, fmt.Errorf("volume mount %q: no volume of that name", vm.Name)
		}
		if vm.SubPath != "" {
			src = filepath.Join(src, filepath.Clean("/"+vm.SubPath))
			if _, err := os.Stat(src); errors.Is(err, os.ErrNotExist) {
				if err := os.MkdirAll(src, 0o755); err != nil {
					return nil, fmt.Errorf("subPath %s: %w", vm.SubPath, err)
				}
			}
		}
		target := path.Clean(vm.MountPath)
		fi, err := os.Stat(src)
		if err != nil {
			return nil, fmt.Errorf("volume %q: %w", vm.Name, err)
		}
		if err := r.p.mounts.ensure(target, fi.IsDir()); err != nil {
			return nil, err
		}
		ls.Mounts = append(ls.Mounts, mount{Source: src, Target: target, ReadOnly: vm.ReadOnly})
	}
	// The termination message file, as the kubelet provides it: a file of the node mounted at
	// terminationMessagePath, read when the container ends.
	if tp := spec.TerminationMessagePath; tp != "" && path.IsAbs(tp) {
		file := terminationFile(r.dir, spec.Name)
		if err := os.WriteFile(file, nil, 0o666); err != nil {
			return nil, fmt.Errorf("termination message file: %w", err)
		}
		if err := os.Chmod(file, 0o666); err != nil { // not subject to the umask
			return nil, fmt.Errorf("termination message file: %w", err)
		}
		if err := r.p.mounts.ensure(path.Clean(tp), false); err != nil {
			return nil, err
		}
		ls.Mounts = append(ls.Mounts, mount{Source: file, Target: path.Clean(tp)})
	}
	return startProcess(ls, filepath.Join(r.dir, "run", spec.Name+".json"), filepath.Join(r.dir, spec.Name+".log"))
}

// terminationFile is the node's file behind a container's terminationMessagePath.
func terminationFile(podDir, container string) string {
	return filepath.Join(podDir, container+".termination-log")
}

// terminationMessage is what the kubelet reports as a terminated container's message: the
// termination message file (at most 4096 bytes), else, with FallbackToLogsOnError and a
// failure, the end of its log.
func terminationMessage(podDir string, spec *corev1.Container, code int32) string {
	if b, err := os.ReadFile(terminationFile(podDir, spec.Name)); err == nil && len(b) > 0 {
		if len(b) > 4096 {
			b = b[:4096]
		}
		return string(b)
	}
	if code != 0 && spec.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError {
		return logTail(filepath.Join(podDir, spec.Name+".log"))
	}
	return ""
}

// containerID is the ID reported in containerStatuses.
func containerID(pid int) string {
	if pid == 0 {
		return ""
	}
	return fmt.Sprintf("dolphin-local://%d", pid)
}

// Limits of a termination message taken from the log, as the kubelet's
// (FallbackToLogsOnError: the last 80 lines, at most 2048 bytes).
const (
	logTailLines = 80
	logTailBytes = 2048
)

// logTail is the end of a container's log, for terminationMessagePolicy
// FallbackToLogsOnError; "" when the log cannot be read.
func logTail(file string) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-logTailBytes, 0)
	buf := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(buf), "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return strings.Join(lines, "\n")
}
