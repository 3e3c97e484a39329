package realnode

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/utils/ptr"

	"github.com/dolphin-operator/dolphin/internal/imagebuild/manifest"
	"github.com/dolphin-operator/dolphin/internal/localcluster"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// nodeInputs finds what a real node needs (control plane, node binaries, images), skipping
// under -short; anything missing fails the test with the command that builds it.
func nodeInputs(t *testing.T) (cpBin, nodeBin string, m manifest.Manifest) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real node; skipped under -short")
	}
	cpBin, err := localcluster.FindBinDir("")
	if err != nil {
		t.Fatalf("%v (run make control-plane)", err)
	}
	nodeBin = os.Getenv("DOLPHIN_NODE_BIN")
	if nodeBin == "" {
		t.Fatal("DOLPHIN_NODE_BIN is not set: run through make test, or set it to the output of hack/node.sh")
	}
	images := os.Getenv("DOLPHIN_IMAGES")
	if images == "" {
		t.Fatal("DOLPHIN_IMAGES is not set: run through make test, or set it to the folder of make images")
	}
	if m, err = manifest.Read(images); err != nil {
		t.Fatal(err)
	}
	if err := Check(nodeBin); err != nil {
		t.Fatal(err)
	}
	return cpBin, nodeBin, m
}

// TestRealNodeRunsPodsFromImagesBuiltHere starts the control plane and a real node, runs a
// MariaDB pod from the image built here as the restricted Pod Security Standard wants it, and
// checks what a real cluster gives: logs and exec through the API server and kubelet, cluster
// DNS, a ClusterIP reached from the host and from a pod through kube-proxy; then Down leaves
// no bridge, no kube-proxy chains and no mounts behind.
func TestRealNodeRunsPodsFromImagesBuiltHere(t *testing.T) {
	cpBin, nodeBin, images := nodeInputs(t)
	unlock, err := LockHost()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unlock) // after Down and the control plane's stop (cleanups run last first)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	if keep := os.Getenv("DOLPHIN_KEEP_DIR"); keep != "" { // to read the logs after a failure
		dir = keep
	}
	netw, err := ParseNetwork("dltest0", "10.244.65.0/24")
	if err != nil {
		t.Fatal(err)
	}
	cp, err := localcluster.Start(ctx, localcluster.Options{Dir: dir, BinDir: cpBin, AdvertiseAddress: netw.Gateway().String(), ServiceCIDR: DefaultServiceCIDR})
	if err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	opts := Options{Dir: filepath.Join(dir, "realnode"), BinDir: nodeBin, NodeName: "test-node", Network: netw, ServiceCIDR: DefaultServiceCIDR}
	downed := false
	t.Cleanup(func() {
		if !downed {
			if err := Down(context.Background(), cp, opts); err != nil {
				t.Errorf("down: %v", err)
			}
		}
		if err := cp.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	sysctlsBefore := readSysctls()
	archives := []string{images.Pause.Archive, images.MariaDB[0].Archive}
	began := time.Now()
	if _, err := Up(ctx, cp, opts, archives, func(step string, took time.Duration) {
		t.Logf("%s (%.1fs)", step, took.Seconds())
	}); err != nil {
		t.Fatalf("node up: %v", err)
	}
	t.Logf("node up in %.1fs", time.Since(began).Seconds())

	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	testenv.Eventually(t, 60*time.Second, "node Ready", func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, "test-node", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("conditions %v", n.Status.Conditions)
	})

	image := images.MariaDB[0].References[1] // docker.io/library/mariadb:10.11
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default", Labels: map[string]string{"app": "db"}},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](999), FSGroup: ptr.To[int64](999),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: "mariadb", Image: image, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/bin/sh", "-c", "mariadbd --version; mariadb-install-db --no-defaults --datadir=/data --auth-root-authentication-method=normal >/dev/null && " +
					"exec mariadbd --no-defaults --datadir=/data --socket=/tmp/s --port=3306 --bind-address=0.0.0.0 --skip-grant-tables"},
				Ports:        []corev1.ContainerPort{{Name: "mysql", ContainerPort: 3306}},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}, {Name: "tmp", MountPath: "/tmp"}},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("mysql")}}, PeriodSeconds: 1},
			}},
			Volumes: []corev1.Volume{
				{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
	// A node up in two seconds (its images linked from a seed) can be ahead of the controller
	// manager's default ServiceAccount, without which the API server refuses the pod.
	testenv.Eventually(t, 60*time.Second, "the pod created", func() error {
		_, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		return err
	})
	created := time.Now()
	testenv.Eventually(t, 120*time.Second, "pod Ready", func() error {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "db", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("phase %s, statuses %+v", p.Status.Phase, p.Status.ContainerStatuses)
	})
	t.Logf("MariaDB pod Ready %.1fs after creation", time.Since(created).Seconds())

	logs, err := cs.CoreV1().Pods("default").GetLogs("db", &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("kubectl logs: %v", err)
	}
	if want := "mariadbd  Ver " + images.MariaDB[0].References[0][strings.LastIndex(images.MariaDB[0].References[0], ":")+1:]; !strings.Contains(string(logs), want) {
		t.Fatalf("logs %q do not contain %q", logs, want)
	}

	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "db"},
			Ports: []corev1.ServicePort{{Name: "mysql", Port: 3306, TargetPort: intstr.FromString("mysql")}}},
	}
	svc, err = cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// From the host, through kube-proxy's rules.
	testenv.Eventually(t, 30*time.Second, "host → ClusterIP", func() error {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(svc.Spec.ClusterIP, "3306"), time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
	// An address of the Service range that no Service (or no translated endpoint) has is
	// refused at once, never routed off the node (where this machine's network accepts it).
	began = time.Now()
	if c, err := net.DialTimeout("tcp", "10.96.0.250:3306", 3*time.Second); err == nil {
		c.Close()
		t.Fatal("a connection to an unused Service address was established")
	} else if !strings.Contains(err.Error(), "refused") || time.Since(began) > time.Second {
		t.Fatalf("an unused Service address: %v after %s, want connection refused at once", err, time.Since(began))
	}
	// From the pod: cluster DNS and the Service, and the API server through `kubernetes`.
	testenv.Eventually(t, 30*time.Second, "pod → DNS name → ClusterIP", func() error {
		out, err := execIn(ctx, cfg, cs, "default", "db", "mariadb", "-h", "db.default.svc.cluster.local", "-P", "3306",
			"--protocol=tcp", "-N", "-e", "select 40+2")
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) != "42" {
			return fmt.Errorf("query answered %q", out)
		}
		return nil
	})
	testenv.Eventually(t, 30*time.Second, "pod → kubernetes Service", func() error {
		_, err := execIn(ctx, cfg, cs, "default", "db", "bash", "-c", "exec 3<>/dev/tcp/kubernetes.default.svc.cluster.local/443")
		return err
	})

	kubeletRetriesOnAnAnnotation(ctx, t, cs, image, dir)

	// Down leaves nothing behind.
	downed = true
	if err := Down(ctx, cp, opts); err != nil {
		t.Fatalf("down: %v", err)
	}
	if err := exec.Command("ip", "link", "show", "dltest0").Run(); err == nil {
		t.Error("the bridge is still there after Down")
	}
	if out, _ := exec.Command("iptables-save").Output(); bytes.Contains(out, []byte("KUBE-")) || bytes.Contains(out, []byte("CNI-")) || bytes.Contains(out, []byte(serviceChain)) {
		t.Errorf("iptables rules left after Down:\n%s", grepLines(out, "KUBE-", "CNI-"))
	}
	for _, d := range []string{"/run/containerd", "/var/lib/kubelet", "/var/lib/cni"} {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s left after Down", d)
		}
	}
	l := NewLayout(opts.Dir)
	for _, d := range []string{l.Dir, l.RunDir()} {
		if left, err := mountsUnder(d); err != nil || len(left) > 0 {
			t.Errorf("mounts under %s left after Down: %v %v", d, left, err)
		}
	}
	if _, err := os.Stat(l.RunDir()); err == nil {
		t.Errorf("%s left after Down", l.RunDir())
	}
	if after := readSysctls(); !maps.Equal(after, sysctlsBefore) {
		t.Errorf("sysctls after Down %v, before Up %v", after, sysctlsBefore)
	}
	if _, err := LoadOptions(opts.Dir); err == nil {
		t.Error("the node's record is still there after Down: a second Down would clean up again")
	}
}

// execIn runs a command in a pod's container through the API server and the kubelet (kubectl
// exec), returning its output.
func execIn(ctx context.Context, cfg *rest.Config, cs *kubernetes.Clientset, ns, pod string, cmd ...string) (string, error) {
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		return stdout.String(), fmt.Errorf("exec %v: %w: %s", cmd, err, stderr.String())
	}
	return stdout.String(), nil
}

func grepLines(b []byte, subs ...string) string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		for _, s := range subs {
			if strings.Contains(l, s) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// readSysctls reads every sysctl the node may change.
func readSysctls() map[string]string {
	out := map[string]string{}
	for _, k := range changedSysctls {
		if v, err := os.ReadFile("/proc/sys/" + k); err == nil {
			out[k] = strings.TrimSpace(string(v))
		}
	}
	return out
}
