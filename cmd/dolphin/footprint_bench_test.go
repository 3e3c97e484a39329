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
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/operator"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// footprintNamespace holds the clusters of the footprint bench.
const footprintNamespace = "footprint"

// TestBenchFootprint measures what the operator costs at N clusters on a bare control plane
// (a real kube-apiserver and etcd, no node: pods stay Pending, as for the peers' figures):
// the operator's RSS, the time until the StatefulSets of the clusters just created exist, and
// its idle CPU once they do. DOLPHIN_BENCH_FOOTPRINT_N lists the cluster counts, cumulative
// (default "10,100"); DOLPHIN_BENCH_FOOTPRINT_IDLE how long idle CPU is sampled (default 60s).
// When DOLPHIN_MOCO names MOCO's controller binary (hack/moco.sh builds it), the same steps
// run against MOCO on a control plane of its own and the ratios Dolphin/MOCO at the largest N
// are printed. `make bench-footprint` runs it; the summary lines go to DOLPHIN_BENCH_OUT.
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
	mocoBin := os.Getenv("DOLPHIN_MOCO")
	if mocoBin != "" {
		if _, err := os.Stat(mocoBin); err != nil {
			t.Fatalf("DOLPHIN_MOCO: %v (build it with hack/moco.sh)", err)
		}
	}

	var lines []string
	var dolphin, moco []footprint
	t.Run("dolphin", func(t *testing.T) {
		dolphin = measureFootprint(t, startDolphin(t), counts, idle)
	})
	for _, f := range dolphin {
		lines = append(lines, f.line("footprint"))
	}
	if mocoBin == "" {
		t.Log("moco: not measured (DOLPHIN_MOCO is not set; make bench-footprint builds it with hack/moco.sh)")
	} else {
		t.Run("moco", func(t *testing.T) {
			moco = measureFootprint(t, startMOCO(t, mocoBin), counts, idle)
		})
		for _, f := range moco {
			lines = append(lines, f.line("moco"))
		}
	}
	if len(dolphin) == len(counts) && len(moco) == len(counts) {
		d, m := dolphin[len(dolphin)-1], moco[len(moco)-1]
		line := fmt.Sprintf("ratio rss=%.2f sts=%.2f idle_cpu=%.2f", ratio(d.rssMB, m.rssMB),
			ratio(d.sts.Seconds(), m.sts.Seconds()), ratio(d.idleCPUPerMin, m.idleCPUPerMin))
		t.Logf("%s (Dolphin/MOCO at n=%d)", line, d.n)
		lines = append(lines, line)
	}
	if out := os.Getenv("DOLPHIN_BENCH_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// benchOperator is an operator under measurement, running against a control plane of its own.
type benchOperator struct {
	// name prefixes the lines logged for it ("footprint" for Dolphin, "moco").
	name string
	pid  int
	// client is an administrator's client of the operator's control plane.
	client client.Client
	// newCluster returns a 3-instance cluster named name in footprintNamespace.
	newCluster func(name string) client.Object
}

// footprint is what an operator cost at n clusters.
type footprint struct {
	n             int
	rssMB         float64
	sts           time.Duration // until the StatefulSets of the clusters created at this step existed
	idleCPUPerMin float64       // CPU-seconds per minute once they did
}

func (f footprint) line(name string) string {
	return fmt.Sprintf("%s n=%d rss_mb=%.1f sts_s=%.2f idle_cpu_s_per_min=%.2f", name, f.n, f.rssMB, f.sts.Seconds(), f.idleCPUPerMin)
}

// ratio is a/b, 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// measureFootprint creates clusters in op's control plane up to each of counts and measures op
// at each step (and at 0, logged only).
func measureFootprint(t *testing.T, op benchOperator, counts []int, idle time.Duration) []footprint {
	ctx := context.Background()
	time.Sleep(10 * time.Second) // started, caches synced
	t.Logf("%s n=0 rss_mb=%.1f", op.name, rssMB(t, op.pid))
	var out []footprint
	created := 0
	for _, n := range counts {
		began := time.Now()
		for ; created < n; created++ {
			if err := op.client.Create(ctx, op.newCluster(fmt.Sprintf("c%03d", created))); err != nil {
				t.Fatal(err)
			}
		}
		for {
			var sts appsv1.StatefulSetList
			if err := op.client.List(ctx, &sts, client.InNamespace(footprintNamespace)); err != nil {
				t.Fatal(err)
			}
			if len(sts.Items) >= n {
				break
			}
			if time.Since(began) > 5*time.Minute {
				t.Fatalf("%s: %d of %d StatefulSets after 5 minutes", op.name, len(sts.Items), n)
			}
			time.Sleep(100 * time.Millisecond)
		}
		f := footprint{n: n, sts: time.Since(began)}
		waitQuiet(t, op) // the first reconciles of the new clusters are not idle time
		cpu0, at0 := cpuSeconds(t, op.pid), time.Now()
		time.Sleep(idle)
		f.idleCPUPerMin = (cpuSeconds(t, op.pid) - cpu0) / time.Since(at0).Minutes()
		f.rssMB = rssMB(t, op.pid)
		t.Logf("%s (the StatefulSets of the %d clusters created at this step)", f.line(op.name), n-prev(counts, n))
		out = append(out, f)
	}
	return out
}

// quietCPU is the most CPU an operator may use in a quietWindow for its clusters to count as
// settled (5 % of a core).
const (
	quietWindow = 5 * time.Second
	quietCPU    = 0.25
)

// waitQuiet waits until op has used at most quietCPU CPU-seconds in a quietWindow — its new
// clusters reconciled and their first status writes done — and at most 3 minutes (then the
// idle figure includes the rest, and the log says so). A fixed pause was too short on a
// loaded machine and too long on an idle one.
func waitQuiet(t *testing.T, op benchOperator) {
	began := time.Now()
	for {
		cpu0 := cpuSeconds(t, op.pid)
		time.Sleep(quietWindow)
		used := cpuSeconds(t, op.pid) - cpu0
		if used <= quietCPU {
			t.Logf("%s settled after %s (%.2f CPU-s in the last %s)", op.name, time.Since(began).Round(time.Second), used, quietWindow)
			return
		}
		if time.Since(began) > 3*time.Minute {
			t.Logf("%s did not settle within 3 minutes (%.2f CPU-s in the last %s): idle CPU is measured anyway", op.name, used, quietWindow)
			return
		}
	}
}

// startDolphin builds the binary a real install runs, dolphin-operator (0041), and runs it on
// a control plane of its own with Dolphin's CRDs.
func startDolphin(t *testing.T) benchOperator {
	bin := filepath.Join(t.TempDir(), "dolphin-operator")
	if out, err := exec.Command("go", "build", "-o", bin, "../dolphin-operator").CombinedOutput(); err != nil {
		t.Fatalf("building dolphin-operator: %v\n%s", err, out)
	}
	tenv := testenv.StartForTest(t)
	scheme, err := operator.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c := benchClient(t, tenv, scheme, footprintNamespace)
	args := []string{"--kubeconfig=" + testenv.AdminKubeconfig(t, tenv.Environment), "--leader-elect=false",
		"--metrics-bind-address=0", "--health-probe-bind-address=" + testenv.FreeAddr(t)}
	if addr := os.Getenv("DOLPHIN_BENCH_FOOTPRINT_PPROF"); addr != "" {
		args = append(args, "--pprof-bind-address="+addr)
	}
	// More operator flags, to compare settings (e.g. --gc-percent=100, Go's default).
	args = append(args, strings.Fields(os.Getenv("DOLPHIN_BENCH_FOOTPRINT_ARGS"))...)
	return benchOperator{
		name:   "footprint",
		pid:    startBenchProcess(t, exec.Command(bin, args...)),
		client: c,
		newCluster: func(name string) client.Object {
			return &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: footprintNamespace, Name: name},
				Spec: dolphinv1.MySQLClusterSpec{Instances: 3}}
		},
	}
}

// benchClient is an administrator's client of tenv with the given namespaces created.
func benchClient(t *testing.T, tenv *testenv.Env, scheme *runtime.Scheme, namespaces ...string) client.Client {
	t.Helper()
	c, err := client.New(tenv.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range namespaces {
		if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// startBenchProcess starts cmd, kills it when the test ends (showing its output's tail if the
// test failed) and returns its pid.
func startBenchProcess(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s output (tail):\n%s", filepath.Base(cmd.Path), tailLines(logs.String(), 30))
		}
	})
	return cmd.Process.Pid
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

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// rssMB is a process's resident set size in MB (VmRSS).
func rssMB(t *testing.T, pid int) float64 {
	return float64(testenv.MustProcStatusKB(t, pid, "VmRSS")) / 1024
}

// cpuSeconds is a process's user + system CPU time.
func cpuSeconds(t *testing.T, pid int) float64 { return testenv.MustProcCPU(t, pid).Seconds() }
