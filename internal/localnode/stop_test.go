package localnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// stoppingScript starts a child that notes a SIGTERM it gets, then waits; it notes its own
// SIGTERM and exits 0 without passing it on.
const stoppingScript = `sh -c 'trap "echo > /out/child-term; exit 0" TERM; while :; do sleep 0.1; done' &
echo $! > /out/child.pid
trap 'echo > /out/main-term; exit 0' TERM
while :; do sleep 0.1; done`

// exitingScript leaves a child running and exits 3.
const exitingScript = `sleep 1000 &
echo $! > /out/orphan.pid
exit 3`

// TestContainerStopsLikeTheKubelets: a pod deletion sends SIGTERM to each container's main
// process only, as the kubelet does (a supervisor then decides how its server stops:
// resources.crashOnStop); and when a container's main process exits — stopped, or by itself
// — nothing it started outlives it.
func TestContainerStopsLikeTheKubelets(t *testing.T) {
	e := startNode(t)
	ctx := context.Background()
	out := t.TempDir()
	mount := []corev1.VolumeMount{{Name: "out", MountPath: "/out"}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "stopping", Namespace: e.ns},
		Spec: corev1.PodSpec{
			NodeName:                      testNode,
			AutomountServiceAccountToken:  ptr.To(false),
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			Volumes: []corev1.Volume{{Name: "out", VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: out}}}},
			Containers: []corev1.Container{
				{Name: "stopped", Image: "busybox", Command: []string{"/bin/sh", "-c", stoppingScript}, VolumeMounts: mount},
				{Name: "exits", Image: "busybox", Command: []string{"/bin/sh", "-c", exitingScript}, VolumeMounts: mount},
			},
		},
	}
	if _, err := e.client.CoreV1().Pods(e.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pidIn := func(name string) int {
		var pid int
		testenv.Eventually(t, 30*time.Second, name+" written", func() error {
			b, err := os.ReadFile(filepath.Join(out, name))
			if err != nil {
				return err
			}
			pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
			return err
		})
		return pid
	}

	orphan := pidIn("orphan.pid")
	testenv.Eventually(t, 30*time.Second, "the exiting container terminated with its code", func() error {
		for _, cs := range e.pod(t, pod.Name).Status.ContainerStatuses {
			if cs.Name == "exits" && cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 3 {
				return nil
			}
		}
		return errors.New("not yet")
	})
	if !processGone(orphan, 5*time.Second) {
		t.Errorf("the child (pid %d) of a container whose main process exited still runs", orphan)
	}

	child := pidIn("child.pid")
	began := time.Now()
	if err := e.client.CoreV1().Pods(e.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "pod object removed", func() error {
		if _, err := e.client.CoreV1().Pods(e.ns).Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (err %v)", err)
		}
		return nil
	})
	if took := time.Since(began); took > 20*time.Second {
		t.Errorf("deletion took %v: the main process did not stop on SIGTERM", took)
	}
	if _, err := os.Stat(filepath.Join(out, "main-term")); err != nil {
		t.Errorf("the main process got no SIGTERM: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, "child-term")); err == nil {
		t.Error("the main process's child got the SIGTERM too: the node signalled the process group")
	}
	if !processGone(child, 5*time.Second) {
		t.Errorf("the child (pid %d) of a stopped container still runs", child)
	}
}

// processGone waits up to timeout until pid is gone or a zombie.
func processGone(pid int, timeout time.Duration) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return true
		}
		s := string(b)
		if f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(f) > 0 && f[0] == "Z" {
			return true
		}
	}
	return false
}
