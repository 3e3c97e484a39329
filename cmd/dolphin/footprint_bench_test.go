package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/operator"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestBenchFootprint measures what the operator costs at N clusters on a bare control plane
// (a real kube-apiserver and etcd, no node: pods stay Pending, as for the peers' figures):
// the operator's RSS, the time until the StatefulSets of the clusters just created exist, and
// its idle CPU once they do. DOLPHIN_BENCH_FOOTPRINT_N lists the cluster counts, cumulative
// (default "10,100"); DOLPHIN_BENCH_FOOTPRINT_IDLE how long idle CPU is sampled (default 60s).
// `make bench-footprint` runs it; the summary line of the largest N goes to DOLPHIN_BENCH_OUT.
func TestBenchFootprint(t *testing.T) {
	spec := os.Getenv("DOLPHIN_BENCH_FOOTPRINT_N")
	if spec == "" {
		t.Skip("set DOLPHIN_BENCH_FOOTPRINT_N (make bench-footprint)")
	}
	var counts []int
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 || (len(counts) > 0 && n <= counts[len(counts)-1]) {
			t.Fatalf("DOLPHIN_BENCH_FOOTPRINT_N=%q: want increasing positive counts such as 10,100", spec)
		}
		counts = append(counts, n)
	}
	idle := time.Minute
	if d, err := time.ParseDuration(os.Getenv("DOLPHIN_BENCH_FOOTPRINT_IDLE")); err == nil && d > 0 {
		idle = d
	}

	bin := filepath.Join(t.TempDir(), "dolphin")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building dolphin: %v\n%s", err, out)
	}
	tenv := testenv.StartForTest(t)
	admin, err := tenv.Environment.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfigPath := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfigPath, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	scheme, err := operator.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(tenv.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns = "footprint"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}

	var logs strings.Builder
	cmd := exec.Command(bin, "operator", "--kubeconfig="+kubeconfigPath, "--leader-elect=false",
		"--metrics-bind-address=0", "--health-probe-bind-address="+freeAddr(t))
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("operator output (tail):\n%s", tailLines(logs.String(), 30))
		}
	})
	pid := cmd.Process.Pid
	time.Sleep(10 * time.Second) // started, caches synced
	t.Logf("footprint n=0 rss_mb=%.1f", rssMB(t, pid))

	var lines []string
	created := 0
	for _, n := range counts {
		began := time.Now()
		for ; created < n; created++ {
			mc := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("c%03d", created)},
				Spec: dolphinv1.MySQLClusterSpec{Instances: 3}}
			if err := c.Create(ctx, mc); err != nil {
				t.Fatal(err)
			}
		}
		for {
			var sts appsv1.StatefulSetList
			if err := c.List(ctx, &sts, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}
			if len(sts.Items) >= n {
				break
			}
			if time.Since(began) > 5*time.Minute {
				t.Fatalf("%d of %d StatefulSets after 5 minutes", len(sts.Items), n)
			}
			time.Sleep(100 * time.Millisecond)
		}
		stsTime := time.Since(began)
		time.Sleep(15 * time.Second) // settle: the first reconciles of the new clusters
		cpu0, at0 := cpuSeconds(t, pid), time.Now()
		time.Sleep(idle)
		perMin := (cpuSeconds(t, pid) - cpu0) / time.Since(at0).Minutes()
		line := fmt.Sprintf("footprint n=%d rss_mb=%.1f sts_s=%.2f idle_cpu_s_per_min=%.2f", n, rssMB(t, pid), stsTime.Seconds(), perMin)
		t.Logf("%s (the StatefulSets of the %d clusters created at this step)", line, n-prev(counts, n))
		lines = append(lines, line)
	}
	t.Log("moco: not measured by this bench yet (figures measured by hand: ../shared/notes/moco-side-by-side.md, issue 11)")
	if out := os.Getenv("DOLPHIN_BENCH_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// prev is the count before n in counts (0 for the first).
func prev(counts []int, n int) int {
	p := 0
	for _, c := range counts {
		if c == n {
			return p
		}
		p = c
	}
	return p
}

// rssMB is a process's resident set size in MB (VmRSS).
func rssMB(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// cpuSeconds is a process's user + system CPU time (clock ticks of 1/100 s).
func cpuSeconds(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name (which is in parentheses and may hold spaces).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
