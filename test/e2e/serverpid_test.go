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
	if _, ok := strings.CutPrefix(containerID(&p, "mysqld"), "containerd://"); ok {
		// The pod's status names the container: re-read, because right after a restart it
		// still names the one that died (a test that signals the server again at once).
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			id, _ := strings.CutPrefix(containerID(&p, "mysqld"), "containerd://")
			if pid := containerServerPIDNow(id); pid > 0 {
				return pid
			}
			if time.Now().After(deadline) {
				s.t.Fatalf("no mariadbd runs in the mysqld container %s of %s", id, pod)
			}
			if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: pod}, &p); err != nil {
				s.t.Fatal(err)
			}
		}
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

// containerID is the runtime's ID of a pod's container ("" when it has none yet).
func containerID(p *corev1.Pod, name string) string {
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == name {
			return c.ContainerID
		}
	}
	return ""
}

// containerServerPIDNow is, on a real node, the host PID of the mariadbd that runs in the
// container with runtime ID id: the process of that name whose cgroup names the container (0: none now).
func containerServerPIDNow(id string) int {
	if id == "" {
		return 0
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, c := range procs {
		comm, err := os.ReadFile(c)
		if err != nil || strings.TrimSpace(string(comm)) != "mariadbd" {
			continue
		}
		dir := filepath.Dir(c)
		if cg, err := os.ReadFile(filepath.Join(dir, "cgroup")); err == nil && strings.Contains(string(cg), id) {
			pid, _ := strconv.Atoi(filepath.Base(dir))
			return pid
		}
	}
	return 0
}
