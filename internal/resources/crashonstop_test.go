package resources

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakeServer is a server for crashOnStop: it writes its pid, and on SIGTERM (a clean
// shutdown) notes it and exits 42.
const fakeServer = `trap 'echo shutdown >> "$1/cleanly"; exit 42' TERM
echo $$ > "$1/pid.tmp" && mv "$1/pid.tmp" "$1/pid"
while :; do sleep 0.02; done`

// shells are the POSIX shells crashOnStop is checked with: the host's /bin/sh (dash on
// Debian and Ubuntu, the official MariaDB image's base) and the others installed.
func shells() []string {
	out := []string{"/bin/sh"}
	for _, name := range []string{"dash", "bash", "busybox"} {
		if p, err := exec.LookPath(name); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// supervise starts crashOnStop under shell with the fake server (or, with exit, a server
// that exits with that code at once) and, for the fake server, waits for its pid.
func supervise(t *testing.T, shell, dir string, exit string) (*exec.Cmd, int) {
	t.Helper()
	args := []string{"-c", crashOnStop, "crash-on-stop", "/bin/sh", "-c", fakeServer, "server", dir}
	if exit != "" {
		args = []string{"-c", crashOnStop, "crash-on-stop", "/bin/sh", "-c", "exit " + exit}
	}
	if strings.HasSuffix(shell, "busybox") {
		args = append([]string{"sh"}, args...)
	}
	cmd := exec.Command(shell, args...)
	cmd.Stderr = &lockedBuffer{}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	if exit != "" {
		return cmd, 0
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(filepath.Join(dir, "pid")); err == nil {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			return cmd, pid
		}
		if time.Now().After(deadline) {
			t.Fatal("the fake server did not start")
		}
	}
}

// exitStatus is cmd's exit code, or 128+signal when a signal ended it (how a shell and the
// kubelet report it).
func exitStatus(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ws.ExitStatus()
	case <-time.After(10 * time.Second):
		t.Fatal("the supervisor did not exit")
		return 0
	}
}

// gone waits until pid no longer exists (or is a zombie of an exited supervisor's child,
// reaped by init).
func gone(pid int) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return true
		}
		if f := strings.Fields(string(b)); len(f) > 2 && f[2] == "Z" {
			return true
		}
	}
	return false
}

func TestCrashOnStopKillsTheServerAndKeepsItsStatus(t *testing.T) {
	for _, shell := range shells() {
		t.Run(filepath.Base(shell), func(t *testing.T) {
			for _, code := range []string{"0", "3", "1"} {
				cmd, _ := supervise(t, shell, t.TempDir(), code)
				if got := exitStatus(t, cmd); strconv.Itoa(got) != code {
					t.Errorf("a server that exits %s: the supervisor exits %d", code, got)
				}
			}
			for _, stop := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
				dir := t.TempDir()
				cmd, server := supervise(t, shell, dir, "")
				for range 3 { // a repeated stop changes nothing
					_ = cmd.Process.Signal(stop)
				}
				if got := exitStatus(t, cmd); got != 128+int(syscall.SIGKILL) {
					t.Errorf("%v to the supervisor: it exits %d, want %d (the server's SIGKILL); its stderr: %s", stop, got, 128+int(syscall.SIGKILL), cmd.Stderr)
				}
				if _, err := os.Stat(filepath.Join(dir, "cleanly")); err == nil {
					t.Errorf("%v to the supervisor: the server shut down cleanly", stop)
				}
				if !gone(server) {
					t.Errorf("%v to the supervisor: the server (pid %d) still runs", stop, server)
				}
			}
			for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSEGV} {
				cmd, server := supervise(t, shell, t.TempDir(), "")
				if err := syscall.Kill(server, sig); err != nil {
					t.Fatal(err)
				}
				if got, want := exitStatus(t, cmd), 128+int(sig); got != want {
					t.Errorf("the server died of %v: the supervisor exits %d, want %d", sig, got, want)
				}
			}
		})
	}
}

// lockedBuffer is a supervisor's stderr, kept for a failure's message.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
