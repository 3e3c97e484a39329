package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
)

// serverPID is the host PID of an instance's server: the main process of its mysqld container,
// or, when that is the crash-on-stop supervisor (docs/design/0038), the server it runs — the
// process to hang (SIGSTOP) or kill -9 as a fault of the server itself.
func (s *stack) serverPID(pod string) int {
	s.t.Helper()
	var p corev1.Pod
	if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: pod}, &p); err != nil {
		s.t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "dolphin-local://"))
	if err != nil {
		s.t.Fatalf("container id of %s: %v", pod, err)
	}
	// The executable, not the command name: the local node's shim starts containers with
	// execveat, and the kernel names such a process after the descriptor ("5").
	if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); !isShell(filepath.Base(exe)) {
		return pid
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if child := dbtest.ChildPID(pid); child > 0 {
			return child
		}
	}
	s.t.Fatalf("the server container of %s (pid %d) runs a shell with no child", pod, pid)
	return 0
}

// isShell reports whether an executable's name is a POSIX shell's.
func isShell(name string) bool {
	switch name {
	case "sh", "dash", "bash", "ash", "busybox":
		return true
	}
	return false
}
