package localcluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dolphin-operator/dolphin/internal/freeport"
)

// Process is one process of the local cluster: started detached (its own session, output to
// a log file) so that it outlives the command that started it, and recorded in state.json so
// that a later command finds it again. A PID alone is never trusted: the process must still
// run the recorded command line (see Alive), so a reused PID is never signalled.
type Process struct {
	// Name is the component name ("etcd", "kube-apiserver", "operator", …).
	Name string `json:"name"`
	// PID is the process ID; 0 once stopped.
	PID int `json:"pid"`
	// Args is the full command line; Args[0] is the absolute path of the binary.
	Args []string `json:"args"`
	// Log is the file that receives the process's standard output and error.
	Log string `json:"log"`
	// Probe tells whether the process is healthy.
	Probe Probe `json:"probe"`

	// done is closed when this process (the parent) has reaped the child; nil for a process
	// found in state.json, whose parent is someone else.
	done chan struct{}
	// waitErr is the exit status, valid once done is closed.
	waitErr error
}

// ControlPlaneNice is the scheduling niceness the control plane's processes (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler) start with. A real cluster's control
// plane has machines of its own; here it shares two cores with the node, its pods and whatever
// else the machine runs, and a starved API server widens a race of Kubernetes' own (the node
// authorizer learns of a pod's claim after the kubelet, which was told of the pod, asks for
// it: the kubelet is refused and retries the pod only after its 10–15 s back-off; upstream
// kubernetes/kubernetes#49880). Raising the control plane's priority gives it the CPU it needs
// when it needs it, as its own machines would; it idles otherwise. Only root may lower a
// niceness: anyone else runs the control plane at the default.
const ControlPlaneNice = -5

// startProcess starts args detached from this process: a new session (no terminal signals, no
// death with the parent), standard input from /dev/null and output appended to logPath, at
// niceness nice (through nice(1), which execs args in place: the process and its command line
// are args' own; 0 runs it as this process runs). The
// child gets this process's environment plus env (NAME=value; never logged or recorded). The
// child is reaped by a goroutine while this process lives; after that init adopts it.
func startProcess(name string, args, env []string, logPath, workDir string, nice int) (*Process, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening log of %s: %w", name, err)
	}
	defer f.Close()
	fmt.Fprintf(f, runMarker+"%s dolphin local: starting %s\n", time.Now().Format(time.RFC3339), strings.Join(args, " "))
	argv := args
	// Only root may lower a niceness; BusyBox's nice exits rather than warn when it may not.
	if nice != 0 && os.Geteuid() == 0 {
		if path, err := exec.LookPath("nice"); err == nil {
			argv = append([]string{path, "-n", strconv.Itoa(nice)}, args...)
		} else {
			fmt.Fprintf(f, "dolphin local: no nice(1) on PATH: %s runs at the default priority\n", name)
		}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	// *os.File outputs are handed to the child as they are: no copying goroutine in this
	// process that would stop when it exits.
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = workDir
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, PID: cmd.Process.Pid, Args: args, Log: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Alive reports whether the process runs, and still runs the recorded command line.
func (p *Process) Alive() bool {
	if p == nil || p.PID <= 0 {
		return false
	}
	if p.done != nil {
		select {
		case <-p.done:
			return false
		default:
			return true
		}
	}
	return runs(p.PID, p.Args)
}

// runs reports whether pid is a live (not zombie) process whose command line is args.
func runs(pid int, args []string) bool {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(raw) == 0 {
		return false
	}
	got := strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
	if !slices.Equal(got, args) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name: "pid (comm) S …".
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z' && stat[i+2] != 'X'
	}
	return true
}

// Stop sends SIGTERM, waits up to timeout for the process to exit, then sends SIGKILL and
// waits again. A process that does not run the recorded command line is left alone.
func (p *Process) Stop(timeout time.Duration) error {
	if !p.Alive() {
		p.PID = 0
		return nil
	}
	if err := syscall.Kill(p.PID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signalling %s (pid %d): %w", p.Name, p.PID, err)
	}
	if p.waitGone(timeout) {
		p.PID = 0
		return nil
	}
	if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing %s (pid %d): %w", p.Name, p.PID, err)
	}
	if !p.waitGone(10 * time.Second) {
		return fmt.Errorf("%s (pid %d) still runs after SIGKILL", p.Name, p.PID)
	}
	p.PID = 0
	return nil
}

// waitGone waits up to timeout for the process to exit and reports whether it did.
func (p *Process) waitGone(timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	if p.done != nil {
		select {
		case <-p.done:
			return true
		case <-deadline.C:
			return false
		}
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if !p.Alive() {
			return true
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			return !p.Alive()
		}
	}
}

// exitError describes why the process is not running, with the end of its log.
func (p *Process) exitError() error {
	status := "is not running"
	if p.done != nil && p.waitErr != nil {
		status = "exited: " + p.waitErr.Error()
	}
	return fmt.Errorf("%s %s; last lines of %s:\n%s", p.Name, status, p.Log, logTail(p.Log, 15))
}

// runMarker starts the line that heads each run of a process in its log.
const runMarker = "==== "

// logTail returns the last n lines that the latest run wrote to the log at path (best effort).
func logTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	if len(data) > 64<<10 {
		data = data[len(data)-64<<10:]
	}
	// Only this run's lines: the log is appended to by every start, each headed by a marker
	// (an earlier run's "address already in use" must not explain this one's failure).
	if i := bytes.LastIndex(data, []byte("\n"+runMarker)); i >= 0 {
		data = data[i+1:]
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

// FreePorts returns n distinct TCP ports that nothing listens on right now, chosen outside the
// kernel's ephemeral port range (where every outgoing connection takes its local port) and
// reserved against other processes choosing at the same time (see package freeport). A
// process that binds without asking may still take one before the caller binds it: the
// component then fails with "address already in use", and Start retries with other ports.
func FreePorts(n int) ([]int, error) {
	ports, err := freeport.Pick(n)
	if err != nil {
		return nil, fmt.Errorf("finding free ports: %w", err)
	}
	return ports, nil
}

// PortFree reports whether a listener can bind port on every address right now.
func PortFree(port int) bool { return freeport.Free(port) }
