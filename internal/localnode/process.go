package localnode

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// hostPath is the PATH containers get when they set none, and the one image
// binaries are looked up in.
const hostPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// resolveBinary maps a container's image and command to a host executable.
// There are no images on the local node; the table is:
//
//	image contains "mariadb" or "mysql"  -> command[0] looked up in hostPath
//	                                        (Debian's mariadb-server binaries),
//	                                        except /opt/dolphin/bin/dolphin (the
//	                                        instance agent): Options.DolphinBinary
//	image contains "dolphin"              -> command[0] "dolphin" or "/dolphin"
//	                                        is Options.DolphinBinary
//	any image                             -> command[0] as given: an absolute
//	                                        path, or looked up in hostPath
//
// The image's entrypoint is unknown, so a container without a command fails
// with CreateContainerConfigError.
func resolveBinary(c *corev1.Container, dolphinBinary string) (string, error) {
	if len(c.Command) == 0 {
		return "", fmt.Errorf("container %q: the local node runs host binaries and does not know image %q's "+
			"entrypoint: set command", c.Name, c.Image)
	}
	name := c.Command[0]
	image := strings.ToLower(c.Image)
	isDB := strings.Contains(image, "mariadb") || strings.Contains(image, "mysql")
	if !isDB && strings.Contains(image, "dolphin") && (name == "dolphin" || name == "/dolphin") {
		return dolphinBinary, nil
	}
	// The instance agent runs the dolphin binary that an init container copied into a
	// database pod (resources.AgentBinary); here that is the host's dolphin binary.
	if isDB && name == "/opt/dolphin/bin/dolphin" {
		return dolphinBinary, nil
	}
	if filepath.IsAbs(name) {
		if _, err := os.Stat(name); err != nil {
			return "", fmt.Errorf("container %q: %w", c.Name, err)
		}
		return name, nil
	}
	for _, dir := range filepath.SplitList(hostPath) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("container %q: %q (image %q) not found in %s", c.Name, name, c.Image, hostPath)
}

// credentials returns the user and group a container runs as (-1: root's)
// and its supplementary groups (fsGroup and supplementalGroups).
func credentials(pod *corev1.Pod, c *corev1.Container) (uid, gid int64, groups []uint32) {
	uid, gid = -1, -1
	if psc := pod.Spec.SecurityContext; psc != nil {
		if psc.RunAsUser != nil {
			uid = *psc.RunAsUser
		}
		if psc.RunAsGroup != nil {
			gid = *psc.RunAsGroup
		}
		if psc.FSGroup != nil {
			groups = append(groups, uint32(*psc.FSGroup))
		}
		for _, g := range psc.SupplementalGroups {
			groups = append(groups, uint32(g))
		}
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			uid = *sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			gid = *sc.RunAsGroup
		}
	}
	if uid >= 0 && gid < 0 {
		gid = 0 // as a container runtime does without runAsGroup
	}
	return uid, gid, groups
}

// expandArgs expands $(VAR) references in command and args from env, as the
// kubelet does ($$ escapes a $).
func expandArgs(args []string, env map[string]string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		var b strings.Builder
		for j := 0; j < len(a); j++ {
			switch {
			case strings.HasPrefix(a[j:], "$$"):
				b.WriteByte('$')
				j++
			case strings.HasPrefix(a[j:], "$("):
				if end := strings.IndexByte(a[j:], ')'); end > 0 {
					if v, ok := env[a[j+2:j+end]]; ok {
						b.WriteString(v)
						j += end
						continue
					}
				}
				b.WriteByte(a[j])
			default:
				b.WriteByte(a[j])
			}
		}
		out[i] = b.String()
	}
	return out
}

// process is one started container process.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once reaped; then state is set
	// state is set when the process has exited.
	state *os.ProcessState
	err   error
}

// startProcess starts the shim for spec (written to specFile), logging to
// logFile. The process gets new mount and UTS namespaces and its own process
// group, so that signals reach everything it started.
func startProcess(spec launchSpec, specFile, logFile string) (*process, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("encoding launch spec: %w", err)
	}
	if err := os.WriteFile(specFile, b, 0o600); err != nil {
		return nil, fmt.Errorf("writing launch spec: %w", err)
	}
	log, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return nil, fmt.Errorf("opening container log: %w", err)
	}
	defer log.Close() // the child holds its own copy
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this executable for the shim: %w", err)
	}
	cmd := exec.Command(self)
	cmd.Args = []string{"dolphin-localnode-shim"}
	cmd.Env = []string{shimEnv + "=" + specFile}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS,
		Setpgid:    true,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", spec.Path, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = p.wait()
		p.state = cmd.ProcessState
		close(p.done)
	}()
	return p, nil
}

// wait waits for the container's main process to exit, SIGKILLs what is left of its process
// group — as the kernel kills a container's PID namespace when its init exits, so that no
// child (a server a shell started) outlives its container — and then reaps it. The group is
// killed before the reaping: until then the main process's pid, the group's id, cannot be
// reused by another process.
func (p *process) wait() error {
	pid := p.cmd.Process.Pid
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	return p.cmd.Wait()
}

// terminate asks the container to stop as the kubelet does: the stop signal (SIGTERM) to
// its main process only. Its children hear of it from the main process, if at all: a
// supervisor decides how its server stops (resources.crashOnStop kills it).
func (p *process) terminate() {
	_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGTERM)
}

// kill SIGKILLs the container: its main process and its process group.
func (p *process) kill() {
	pid := p.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL) // in case it left its group
}

// exitCode returns the exit code and a Kubernetes-style reason once exited; a
// signal becomes 128+signal.
func (p *process) exitCode() (int32, string) {
	st := p.state
	if st == nil {
		return -1, "Unknown"
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int32(ws.Signal()), "Error"
	}
	if st.ExitCode() == 0 {
		return 0, "Completed"
	}
	return int32(st.ExitCode()), "Error"
}

// mountPoints creates missing mount points on the host and remembers them, so
// Run can remove the empty ones it created when it exits.
type mountPoints struct {
	mu      sync.Mutex
	created []string
}

func (m *mountPoints) ensure(target string, dir bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	// Record the top-most missing ancestor and everything below it.
	var missing []string
	for p := target; p != "/" && p != "."; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err == nil {
			break
		}
		missing = append(missing, p)
	}
	if err := ensureMountPoint(target, dir); err != nil {
		return err
	}
	slices.Reverse(missing)
	m.created = append(m.created, missing...)
	return nil
}

// removeCreated removes, deepest first, the mount points it created that are
// empty now.
func (m *mountPoints) removeCreated() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := len(m.created) - 1; i >= 0; i-- {
		p := m.created[i]
		if fi, err := os.Lstat(p); err == nil && (fi.IsDir() || fi.Size() == 0) {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				continue
			}
		}
	}
	m.created = nil
}
