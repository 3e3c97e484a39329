package localnode

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// probe runs the container's startup probe, then its readiness and liveness
// probes, until ctx is done. A failed startup or liveness probe stops the
// process (which the supervisor then restarts per policy).
func (r *podRunner) probe(ctx context.Context, c *ctrState, proc *process) {
	spec := c.spec
	if spec.StartupProbe != nil {
		if !r.probeLoop(ctx, c, proc, spec.StartupProbe, func(bool) bool { return true }) {
			return
		}
		r.mu.Lock()
		c.started = true
		r.mu.Unlock()
		r.changed()
	}
	if spec.ReadinessProbe == nil {
		r.setReady(c, true)
	} else {
		go r.probeLoop(ctx, c, proc, spec.ReadinessProbe, func(ok bool) bool {
			r.setReady(c, ok)
			return false
		})
	}
	if spec.LivenessProbe != nil {
		go r.probeLoop(ctx, c, proc, spec.LivenessProbe, func(bool) bool { return false })
	}
}

func (r *podRunner) setReady(c *ctrState, ready bool) {
	r.mu.Lock()
	changed := c.ready != ready
	c.ready = ready
	r.mu.Unlock()
	if changed {
		r.changed()
	}
}

// probeLoop runs p every period after its initial delay. Each time the
// success or failure threshold is reached it calls onResult, and returns true
// when onResult does (startup). Reaching the failure threshold of a startup
// or liveness probe (onResult is not the readiness one) kills the process and
// returns false. It returns false when ctx is done.
func (r *podRunner) probeLoop(ctx context.Context, c *ctrState, proc *process, p *corev1.Probe,
	onResult func(ok bool) bool) bool {
	isReadiness := p == c.spec.ReadinessProbe
	period := seconds(p.PeriodSeconds, 10)
	timeout := seconds(p.TimeoutSeconds, 1)
	failureThreshold := int(orDefault(p.FailureThreshold, 3))
	successThreshold := int(orDefault(p.SuccessThreshold, 1))
	if !sleepCtx(ctx, time.Duration(p.InitialDelaySeconds)*time.Second) {
		return false
	}
	successes, failures := 0, 0
	for {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		err := r.check(pctx, c, proc, &p.ProbeHandler)
		cancel()
		if ctx.Err() != nil {
			return false
		}
		if err == nil {
			successes, failures = successes+1, 0
			if successes >= successThreshold && onResult(true) {
				return true
			}
		} else {
			successes, failures = 0, failures+1
			if failures >= failureThreshold {
				if isReadiness {
					onResult(false)
				} else {
					r.p.opts.Log.Info("probe failed: restarting container", "pod", r.key,
						"container", c.spec.Name, "error", err.Error())
					grace := r.podGrace()
					if p.TerminationGracePeriodSeconds != nil {
						grace = time.Duration(*p.TerminationGracePeriodSeconds) * time.Second
					}
					r.stop(proc, time.Now().Add(grace))
					return false
				}
			}
		}
		if !sleepCtx(ctx, period) {
			return false
		}
	}
}

// check runs one probe attempt.
func (r *podRunner) check(ctx context.Context, c *ctrState, proc *process, h *corev1.ProbeHandler) error {
	r.mu.Lock()
	podIP := r.podIP.String()
	pod := r.podWithIPLocked()
	r.mu.Unlock()
	switch {
	case h.Exec != nil:
		return execProbe(ctx, pod, c.spec, proc.cmd.Process.Pid, h.Exec.Command)
	case h.TCPSocket != nil:
		port, err := resolvePort(h.TCPSocket.Port, c.spec)
		if err != nil {
			return err
		}
		host := podIP
		if h.TCPSocket.Host != "" {
			host = h.TCPSocket.Host
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return err
		}
		return conn.Close()
	case h.HTTPGet != nil:
		return httpProbe(ctx, podIP, c.spec, h.HTTPGet)
	case h.GRPC != nil:
		return errors.New("gRPC probes are not supported by the local node")
	}
	return errors.New("probe has no handler")
}

// execProbe runs command in the container's namespaces (nsenter into the
// container process's mount and network namespaces) as the container's user.
func execProbe(ctx context.Context, pod *corev1.Pod, c *corev1.Container, pid int, command []string) error {
	if len(command) == 0 {
		return errors.New("exec probe without a command")
	}
	args := []string{"--target", strconv.Itoa(pid), "--mount", "--net", "--uts"}
	uid, gid, _ := credentials(pod, c)
	if uid >= 0 {
		args = append(args, "--setuid", strconv.FormatInt(uid, 10))
	}
	if gid >= 0 {
		args = append(args, "--setgid", strconv.FormatInt(gid, 10))
	}
	if c.WorkingDir != "" {
		args = append(args, "--wd="+c.WorkingDir)
	}
	cmd := exec.CommandContext(ctx, "nsenter", append(append(args, "--"), command...)...)
	env, _, err := containerEnv(ctx, nil, pod, &corev1.Container{Name: c.Name, Env: plainEnv(c.Env)})
	if err != nil {
		return err
	}
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("exec probe %q: %w: %s", strings.Join(command, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// plainEnv keeps the env entries with literal values and fieldRefs (no API
// reads during probes).
func plainEnv(env []corev1.EnvVar) []corev1.EnvVar {
	var out []corev1.EnvVar
	for _, e := range env {
		if e.ValueFrom == nil || e.ValueFrom.FieldRef != nil {
			out = append(out, e)
		}
	}
	return out
}

func httpProbe(ctx context.Context, podIP string, c *corev1.Container, g *corev1.HTTPGetAction) error {
	port, err := resolvePort(g.Port, c)
	if err != nil {
		return err
	}
	host := podIP
	if g.Host != "" {
		host = g.Host
	}
	scheme := "http"
	if g.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	p := g.Path
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		scheme+"://"+net.JoinHostPort(host, strconv.Itoa(port))+p, nil)
	if err != nil {
		return err
	}
	for _, h := range g.HTTPHeaders {
		req.Header.Add(h.Name, h.Value)
	}
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, // as the kubelet does
		DisableKeepAlives: true,
	}}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("HTTP probe: status %d", resp.StatusCode)
	}
	return nil
}

// resolvePort turns a probe port (number or container port name) into a number.
func resolvePort(p intstr.IntOrString, c *corev1.Container) (int, error) {
	if p.Type == intstr.Int {
		return p.IntValue(), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil {
		return n, nil
	}
	return 0, fmt.Errorf("container %q has no port named %q", c.Name, p.StrVal)
}

func seconds(v int32, def int32) time.Duration {
	if v <= 0 {
		v = def
	}
	return time.Duration(v) * time.Second
}

func orDefault(v, def int32) int32 {
	if v <= 0 {
		return def
	}
	return v
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
