package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/dolphin-operator/dolphin/config/crd"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// binDirForTest finds the control-plane binaries like hack/control-plane.sh --print does (or
// KUBEBUILDER_ASSETS), skipping under -short.
func binDirForTest(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real control plane; skipped under -short")
	}
	dir, err := FindBinDir("")
	if err != nil {
		t.Fatalf("%v (run hack/control-plane.sh or `make control-plane`)", err)
	}
	return dir
}

// startForTest starts a control plane in dir and stops it when the test ends.
// node is Options.StartNode (may be nil).
func startForTest(t *testing.T, ctx context.Context, dir, binDir string,
	node func(context.Context, string, *PKI) (func() error, error)) *ControlPlane {
	t.Helper()
	began := time.Now()
	cp, err := Start(ctx, Options{Dir: dir, BinDir: binDir, StartNode: node, Progress: func(c string, d time.Duration) {
		t.Logf("%s ready (%.1fs)", c, d.Seconds())
	}})
	if err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	t.Logf("control plane up in %s", time.Since(began).Round(10*time.Millisecond))
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Errorf("stopping: %v", err)
		}
	})
	return cp
}

func clientFor(t *testing.T, kubeconfig string) *kubernetes.Clientset {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func TestLocalControlPlaneUpDown(t *testing.T) {
	binDir := binDirForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cp := startForTest(t, ctx, dir, binDir, nil)
	cs := clientFor(t, filepath.Join(dir, "kubeconfig"))

	// Every thread of every control-plane process runs at ControlPlaneNice relative to this
	// process, as nice(1) here sets it (root may lower a niceness where it holds CAP_SYS_NICE;
	// anyone else runs at the default).
	wantNice := niceness(t, "nice")
	if os.Geteuid() == 0 {
		wantNice = niceness(t, "nice", "-n", strconv.Itoa(ControlPlaneNice), "nice")
	}
	for _, name := range []string{Etcd, APIServer, ControllerManager, Scheduler} {
		p := cp.Process(name)
		if p == nil {
			t.Fatalf("no %s process recorded", name)
		}
		got := threadNiceness(t, p.PID)
		if len(got) == 0 || slices.ContainsFunc(got, func(n int) bool { return n != wantNice }) {
			t.Errorf("%s (pid %d): thread niceness %v, want all %d", name, p.PID, got, wantNice)
		}
	}

	const ns = "localcluster-test"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](2),
			// Parallel: with no node, web-0 never becomes Ready, so OrderedReady would stop there.
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/none"}}},
			},
		},
	}
	if _, err := cs.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	listPods := func() (int, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return 0, err
		}
		return len(pods.Items), nil
	}
	began := time.Now()
	testenv.Eventually(t, 30*time.Second, "the StatefulSet controller creates 2 pods", func() error {
		n, err := listPods()
		if err != nil {
			return fmt.Errorf("listing pods: %w", err)
		}
		if n != 2 {
			return fmt.Errorf("%d pods", n)
		}
		return nil
	})
	t.Logf("2 pods created in %s", time.Since(began).Round(10*time.Millisecond))

	began = time.Now()
	if err := cs.AppsV1().StatefulSets(ns).Delete(ctx, "web", metav1.DeleteOptions{
		PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
	}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the garbage collector deletes the pods", func() error {
		if n, err := listPods(); err != nil || n != 0 {
			return fmt.Errorf("%d pods left (%v)", n, err)
		}
		return nil
	})
	t.Logf("pods garbage-collected in %s", time.Since(began).Round(10*time.Millisecond))

	// A second Start on a running, healthy control plane reuses it.
	again, err := Start(ctx, Options{Dir: dir, BinDir: binDir})
	if err != nil {
		t.Fatal(err)
	}
	if !again.Reused {
		t.Error("Start on a healthy control plane did not reuse it")
	}

	// A killed API server is started again alone, on its port: etcd and the rest keep
	// running (the local node and its Service proxy with them).
	before := map[string]int{}
	for _, p := range cp.Processes() {
		before[p.Name] = p.PID
	}
	if err := syscall.Kill(before[APIServer], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the API server gone", func() error {
		if cp.Process(APIServer).Alive() {
			return errors.New("still alive")
		}
		return nil
	})
	wantPorts := cp.Ports()
	revived, err := Start(ctx, Options{Dir: dir, BinDir: binDir})
	if err != nil {
		t.Fatal(err)
	}
	if !revived.Reused {
		t.Error("Start after an API server died did not reuse the rest")
	}
	for _, p := range revived.Processes() {
		if changed := p.PID != before[p.Name]; changed != (p.Name == APIServer) {
			t.Errorf("%s: pid %d -> %d; only the API server may be restarted", p.Name, before[p.Name], p.PID)
		}
	}
	if names := func() (n []string) {
		for _, p := range revived.Processes() {
			n = append(n, p.Name)
		}
		return n
	}(); !slices.Equal(names, controlPlaneComponents) {
		t.Errorf("recorded order %v, want %v (the stop order depends on it)", names, controlPlaneComponents)
	}
	if revived.Ports() != wantPorts {
		t.Errorf("ports changed: %+v -> %+v", wantPorts, revived.Ports())
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
		t.Errorf("the restarted API server does not answer the old client: %v", err)
	}
	cp = revived

	pids := map[string]int{}
	for _, p := range cp.Processes() {
		pids[p.Name] = p.PID
	}
	if len(pids) != 4 {
		t.Errorf("recorded processes %v, want the 4 components", pids)
	}
	ports := cp.Ports()
	began = time.Now()
	if err := cp.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("control plane down in %s", time.Since(began).Round(10*time.Millisecond))
	for name, pid := range pids {
		if !exited(pid) {
			t.Errorf("%s: pid %d still runs after Stop", name, pid)
		}
	}
	if left := processesUsing(t, dir); len(left) > 0 {
		t.Errorf("processes still using %s after Stop: %v", dir, left)
	}
	for _, port := range ports.list() {
		if !PortFree(*port) {
			t.Errorf("port %d still in use after Stop", *port)
		}
	}

	// Start again on the same folder, with a node hook: etcd keeps its data, the hook runs
	// once the API server is ready and is stopped while the API server still answers.
	var nodeStarted, nodeStopped bool
	node := func(ctx context.Context, kubeconfig string, pki *PKI) (func() error, error) {
		if _, err := clientFor(t, kubeconfig).CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
			return nil, fmt.Errorf("node hook: %w", err)
		}
		if _, _, err := pki.IssueClientCert("node", "system:node:local", "system:nodes"); err != nil {
			return nil, err
		}
		nodeStarted = true
		return func() error {
			nodeStopped = true
			_, err := clientFor(t, kubeconfig).CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{})
			return err
		}, nil
	}
	cp2 := startForTest(t, ctx, dir, binDir, node)
	if cp2.Reused {
		t.Fatal("Start after Stop claims to have reused running processes")
	}
	if !nodeStarted {
		t.Error("the StartNode hook was not called")
	}
	if err := cp2.Stop(); err != nil {
		t.Errorf("stopping (the node hook runs first, while the API server answers): %v", err)
	}
	if !nodeStopped {
		t.Error("Stop did not call the node's stop function")
	}
}

// processesUsing returns the PIDs of processes whose command line mentions dir.
func processesUsing(t *testing.T, dir string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(cmdline), dir) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestStartRetriesWhenAPortIsTaken hands kube-apiserver a port another process holds, as
// happens when a port chosen for a component is taken before it binds it: Start stops what
// it started and starts again on other ports, and nothing of the first attempt survives.
func TestStartRetriesWhenAPortIsTaken(t *testing.T) {
	binDir := binDirForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	busy := taken.Addr().(*net.TCPAddr).Port
	calls := 0
	pickPorts = func(n int) ([]int, error) {
		calls++
		ports, err := FreePorts(n)
		if err == nil && calls == 1 {
			ports[2] = busy // EtcdClient, EtcdPeer, APIServer, …: see Ports.list
		}
		return ports, err
	}
	t.Cleanup(func() { pickPorts = FreePorts })

	dir := t.TempDir()
	cp := startForTest(t, ctx, dir, binDir, nil)
	if calls != 2 {
		t.Errorf("ports chosen %d times, want 2 (a first attempt with the taken port, then a retry)", calls)
	}
	if got := cp.Ports(); got.APIServer == busy || got.APIServer == 0 {
		t.Errorf("kube-apiserver on port %d, the taken one was %d", got.APIServer, busy)
	}
	log, err := os.ReadFile(filepath.Join(dir, "logs", APIServer+".log"))
	if err != nil || !strings.Contains(string(log), "address already in use") {
		t.Errorf("kube-apiserver's log does not show the first attempt's bind failure (%v)", err)
	}
	if _, err := clientFor(t, cp.Kubeconfig).Discovery().ServerVersion(); err != nil {
		t.Errorf("the API server on the new port does not answer: %v", err)
	}
	// One process per component: the first attempt's etcd was stopped, not left behind.
	for _, name := range controlPlaneComponents {
		if n := len(processesNaming(t, dir, name)); n != 1 {
			t.Errorf("%d processes of %s run for %s, want 1", n, name, dir)
		}
	}
}

// processesNaming returns the PIDs of the processes whose command line mentions both dir and
// the program name.
func processesNaming(t *testing.T, dir, name string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if strings.Contains(string(cmdline), dir) && len(args) > 0 && filepath.Base(args[0]) == name {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestInstallCRDsServesEveryKind checks what `dolphin local up` relies on when it starts the
// operator right after InstallCRDs: every kind of every served version maps through a fresh
// discovery-based REST mapper at once (an operator started between Established and discovery
// failed with "no matches for kind MySQLCluster" in a make test run).
func TestInstallCRDsServesEveryKind(t *testing.T) {
	binDir := binDirForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cp := startForTest(t, ctx, dir, binDir, nil)
	names, err := InstallCRDs(ctx, cp.Kubeconfig, crd.Bases(), 9443)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := restmapper.GetAPIGroupResources(dc)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	objs, err := readCRDs(crd.Bases())
	if err != nil {
		t.Fatal(err)
	}
	mapped := 0
	for _, u := range objs {
		kind, _, _ := unstructured.NestedString(u.Object, "spec", "names", "kind")
		for _, gv := range servedVersions(u) {
			if _, err := mapper.RESTMapping(schema.GroupKind{Group: gv.Group, Kind: kind}, gv.Version); err != nil {
				t.Errorf("%s %s right after InstallCRDs: %v", kind, gv, err)
			}
			mapped++
		}
	}
	if mapped < len(names) {
		t.Errorf("mapped %d kind versions for %d CRDs", mapped, len(names))
	}
}

// exited reports whether pid no longer runs: gone, or a zombie. A component this test's
// process started and a revived ControlPlane stopped stays a zombie until the first
// ControlPlane's waiting goroutine reaps it, which on a busy machine may come a moment after
// Stop returned (CI saw "etcd: pid still exists after Stop" so).
func exited(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X')
}

// threadNiceness is the niceness of each thread of process pid (/proc/PID/task/*/stat, the
// 19th field).
func threadNiceness(t *testing.T, pid int) []int {
	t.Helper()
	stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	var nice []int
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		// The fields after the parenthesised command name, which may hold spaces.
		rest := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		n, err := strconv.Atoi(rest[16]) // field 19: state is field 3, rest[0]
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		nice = append(nice, n)
	}
	return nice
}

// niceness runs a command that prints a niceness (nice(1) without a command) and returns it.
func niceness(t *testing.T, args ...string) int {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).Output()
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("%v printed %q", args, out)
	}
	return n
}
