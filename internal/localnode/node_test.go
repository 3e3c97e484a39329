package localnode

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// Test network: its own bridge and range, so tests never meet a real local
// node (dolphin0, 10.244.0.0/24) on the same host.
const (
	testBridge = "dlnodetest"
	testCIDR   = "10.244.250.0/24"
	testNode   = "local-test"
)

// testNodeEnv is a running API server (envtest) with a local node.
type testNodeEnv struct {
	client kubernetes.Interface
	dir    string
	ns     string
}

// startNode starts envtest and Run, and stops both when the test ends,
// checking that the node left no network namespace or bridge behind.
func startNode(t *testing.T) *testNodeEnv {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a control plane and host processes; skipped under -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("the local node needs root (network and mount namespaces)")
	}
	setAssets(t)
	env := testenv.StartForTest(t)
	client, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{RESTConfig: env.Config, NodeName: testNode, Dir: dir,
			PodCIDR: testCIDR, Bridge: testBridge, Log: testr.New(t)})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(2 * time.Minute):
			t.Errorf("Run did not return within 2 minutes of cancel")
		}
		if entries, _ := os.ReadDir(netnsDir); len(entries) > 0 {
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), testBridge+"-") {
					t.Errorf("network namespace %s left behind", e.Name())
				}
			}
		}
		if _, err := os.Stat("/sys/class/net/" + testBridge); err == nil {
			t.Errorf("bridge %s left behind", testBridge)
		}
	})

	e := &testNodeEnv{client: client, dir: dir, ns: "default"}
	testenv.Eventually(t, 30*time.Second, "node Ready", func() error {
		n, err := client.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("not ready: %v", n.Status.Conditions)
	})
	// envtest runs no controller manager: create the service account the
	// ServiceAccount admission plugin wants.
	_, err = client.CoreV1().ServiceAccounts(e.ns).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return e
}

func (e *testNodeEnv) pod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	p, err := e.client.CoreV1().Pods(e.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitReady waits until the pod is Ready and returns it.
func (e *testNodeEnv) waitReady(t *testing.T, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	testenv.Eventually(t, timeout, name+" Ready", func() error {
		p, err := e.client.CoreV1().Pods(e.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pod = p
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("phase %s, conditions %v, init %v, containers %v", p.Status.Phase,
			p.Status.Conditions, p.Status.InitContainerStatuses, p.Status.ContainerStatuses)
	})
	return pod
}

func (e *testNodeEnv) logOf(name, container string) string {
	b, _ := os.ReadFile(filepath.Join(e.dir, "pods", e.ns+"_"+name, container+".log"))
	return string(b)
}

func containerPID(t *testing.T, cs corev1.ContainerStatus) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimPrefix(cs.ContainerID, "dolphin-local://"))
	if err != nil {
		t.Fatalf("container ID %q: %v", cs.ContainerID, err)
	}
	return pid
}

func TestPodLifecycle(t *testing.T) {
	e := startNode(t)
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "lifecycle-cfg", Namespace: e.ns},
		Data: map[string]string{"greeting": "hello from a configMap"}}
	if _, err := e.client.CoreV1().ConfigMaps(e.ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mounts := []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "lifecycle", Namespace: e.ns},
		Spec: corev1.PodSpec{
			NodeName:                      testNode,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			Volumes: []corev1.Volume{
				{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}, DefaultMode: ptr.To[int32](0o440)}}},
			},
			InitContainers: []corev1.Container{{
				Name: "init", Image: "busybox", Command: []string{"sh", "-c", "echo hi > /data/x"}, VolumeMounts: mounts,
			}},
			Containers: []corev1.Container{{
				Name: "main", Image: "busybox",
				Command: []string{"sh", "-c", `cat /data/x; cat /etc/dolphin-localnode-test/greeting; echo; ` +
					`echo "ip=$POD_IP"; touch /etc/dolphin-localnode-test/w 2>/dev/null && echo rw || echo ro; ` +
					`stat -L -c mode=%a /etc/dolphin-localnode-test/greeting; ` +
					`while :; do echo "now: $(cat /etc/dolphin-localnode-test/greeting)"; sleep 1; done`},
				Env: []corev1.EnvVar{{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{
					FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}},
				VolumeMounts: append(mounts, corev1.VolumeMount{Name: "cfg", MountPath: "/etc/dolphin-localnode-test", ReadOnly: true}),
				ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
					Exec: &corev1.ExecAction{Command: []string{"test", "-f", "/data/x"}}}},
			}},
		},
	}
	if _, err := e.client.CoreV1().Pods(e.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := e.waitReady(t, pod.Name, 60*time.Second)
	ip, err := netip.ParseAddr(got.Status.PodIP)
	if err != nil || !netip.MustParsePrefix(testCIDR).Contains(ip) || len(got.Status.PodIPs) != 1 {
		t.Fatalf("podIP %q / podIPs %v: want one address in %s", got.Status.PodIP, got.Status.PodIPs, testCIDR)
	}
	for _, want := range []string{"hi\n", "hello from a configMap", "ip=" + got.Status.PodIP + "\n", "ro\n", "mode=440"} {
		testenv.Eventually(t, 5*time.Second, fmt.Sprintf("log shows %q", want), func() error {
			if l := e.logOf(pod.Name, "main"); !strings.Contains(l, want) {
				return fmt.Errorf("log: %q", l)
			}
			return nil
		})
	}
	// A change of the configMap reaches the running container's mounted files, as the
	// kubelet keeps configMap and secret volumes in sync.
	cm.Data["greeting"] = "hello again"
	if _, err := e.client.CoreV1().ConfigMaps(e.ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the container reads the changed configMap", func() error {
		if l := e.logOf(pod.Name, "main"); !strings.Contains(l, "now: hello again") {
			return fmt.Errorf("log tail: %q", tail(l, 200))
		}
		return nil
	})
	// A status the API lost (virtual-kubelet writes only when the node sends a new one) is
	// written again, as a kubelet's status manager does: here the address is wiped by hand.
	lost := e.pod(t, pod.Name)
	lost.Status.PodIP, lost.Status.PodIPs = "", nil
	if _, err := e.client.CoreV1().Pods(e.ns).UpdateStatus(ctx, lost, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 4*statusResyncInterval, "the lost address written again", func() error {
		if ip := e.pod(t, pod.Name).Status.PodIP; ip != got.Status.PodIP {
			return fmt.Errorf("podIP %q, want %q", ip, got.Status.PodIP)
		}
		return nil
	})

	// kill -9 from outside: restarted, Ready again.
	pid := containerPID(t, got.Status.ContainerStatuses[0])
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "restart after kill -9", func() error {
		p := e.pod(t, pod.Name)
		cs := p.Status.ContainerStatuses[0]
		if cs.RestartCount != 1 || !cs.Ready || cs.LastTerminationState.Terminated == nil {
			return fmt.Errorf("status %+v", cs)
		}
		if code := cs.LastTerminationState.Terminated.ExitCode; code != 128+9 {
			return fmt.Errorf("last exit code %d, want 137", code)
		}
		return nil
	})
	e.waitReady(t, pod.Name, 10*time.Second)
	pid = containerPID(t, e.pod(t, pod.Name).Status.ContainerStatuses[0])

	// Delete: processes and network namespace gone, then the API object.
	if err := e.client.CoreV1().Pods(e.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "pod object removed", func() error {
		_, err := e.client.CoreV1().Pods(e.ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the pod: %w", err)
		}
		return errors.New("still there")
	})
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("container process %d still exists after deletion (kill 0: %v)", pid, err)
	}
	if _, err := os.Stat(nsPath(testBridge + "-" + string(got.UID))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("network namespace still there after deletion: %v", err)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "pods", e.ns+"_"+pod.Name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pod folder still there after deletion: %v", err)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
