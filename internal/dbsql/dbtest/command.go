package dbtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// StartCommand (re)starts the server through command, a container's command line as the
// operator builds it — mariadbd itself, or a supervisor that runs it — with every argument
// "--defaults-file=…" replaced by the instance's own config file and the directory of the
// installed mariadbd put first on PATH (an image has it on its PATH; a user's shell may
// not). It waits, like Start, until the server answers. Stop, Kill, PID and LastExit then
// concern command's process: Stop sends it SIGTERM as the kubelet sends a container's main
// process, Kill kills its whole process group.
func (i *Instance) StartCommand(t testing.TB, command []string) {
	t.Helper()
	if len(command) == 0 {
		t.Fatal("dbtest: StartCommand: empty command")
	}
	bin, err := findBinaries()
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	args := make([]string, len(command)-1)
	replaced := false
	for n, a := range command[1:] {
		if strings.HasPrefix(a, "--defaults-file=") {
			a, replaced = "--defaults-file="+i.ConfigFile, true
		}
		args[n] = a
	}
	if !replaced {
		t.Fatalf("dbtest: StartCommand %q: no --defaults-file= argument to point at %s", command, i.ConfigFile)
	}
	env := []string{"PATH=" + filepath.Dir(bin.server) + string(os.PathListSeparator) + os.Getenv("PATH")}
	began := time.Now()
	if err := i.launch(command[0], args, env, true, i.rootSocketDSN()); err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Logf("dbtest: %s (%s) started through %s in %v", i.Name, i.Host, command[0], time.Since(began).Round(time.Millisecond))
}

// ServerPID is the pid of the running mariadbd, from its pid file: the process itself after
// Start, the supervisor's child after StartCommand.
func (i *Instance) ServerPID() (int, error) {
	b, err := os.ReadFile(filepath.Join(i.Dir, "mysqld.pid"))
	if err != nil {
		return 0, fmt.Errorf("%s: reading the pid file: %w", i.Name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s: the pid file: %w", i.Name, err)
	}
	return pid, nil
}

// LastExit is the exit state of the instance's last process once it exited (nil while it
// runs, or before it first started).
func (i *Instance) LastExit() *os.ProcessState {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.cmd == nil || i.runningLocked() {
		return nil
	}
	return i.cmd.ProcessState
}

// WaitExit waits up to timeout for the instance's process to exit by itself and returns its
// exit state; it fails the test otherwise.
func (i *Instance) WaitExit(t testing.TB, timeout time.Duration) *os.ProcessState {
	t.Helper()
	_, done := i.current()
	if done != nil {
		select {
		case <-done:
		case <-time.After(timeout):
			t.Fatalf("dbtest: %s (pid %d) did not exit within %v", i.Name, i.PID(), timeout)
		}
	}
	return i.LastExit()
}

func (i *Instance) isSupervised() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.supervised
}

// exited waits up to timeout until pid is gone or a zombie (whose parent, once the
// supervisor died, is init, which may take a second to reap it).
func exited(pid int, timeout time.Duration) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if err := syscall.Kill(pid, 0); err != nil {
			return true
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return true
		}
		// The state follows the command name in parentheses.
		if s := string(b); strings.HasPrefix(strings.TrimSpace(s[strings.LastIndexByte(s, ')')+1:]), "Z") {
			return true
		}
	}
	return false
}

// ChildPID is a child process of pid (0 when it has none), found in /proc: the server a
// supervisor (a shell running the server command) started.
func ChildPID(pid int) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command name in parentheses: state, ppid, …
		s := string(b)
		if f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(f) > 1 && f[1] == strconv.Itoa(pid) {
			return child
		}
	}
	return 0
}
