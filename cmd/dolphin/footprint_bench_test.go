package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
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
// its idle CPU and mean RSS once they do, and the RSS added per cluster (slope) from the first
// count to the last. DOLPHIN_BENCH_FOOTPRINT_N lists the cluster counts, cumulative (make
// bench-footprint: "10,100,300"); DOLPHIN_BENCH_FOOTPRINT_IDLE how long idle CPU and memory
// are sampled (default 2m, so that the window holds a garbage collection).
// When DOLPHIN_MOCO names MOCO's controller binary (hack/moco.sh builds it), the same steps
// run against MOCO on a control plane of its own and the ratios Dolphin/MOCO at the largest N
// are printed. `make bench-footprint` runs it; the summary lines go to DOLPHIN_BENCH_OUT.
func TestBenchFootprint(t *testing.T) {
	spec := os.Getenv("DOLPHIN_BENCH_FOOTPRINT_N")
	if spec == "" {
		t.Skip("set DOLPHIN_BENCH_FOOTPRINT_N (make bench-footprint)")
	}
	counts, err := testenv.IncreasingCounts(spec)
	if err != nil {
		t.Fatalf("DOLPHIN_BENCH_FOOTPRINT_N=%v", err)
	}
	idle := 2 * time.Minute // Go collects at least every 2 minutes: the window holds one
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
	if len(counts) > 1 {
		lines = append(lines, slopeLine("footprint", dolphin, len(counts)))
		if mocoBin != "" {
			lines = append(lines, slopeLine("moco", moco, len(counts)))
		}
	}
	if len(dolphin) == len(counts) && len(moco) == len(counts) {
		d, m := dolphin[len(dolphin)-1], moco[len(moco)-1]
		line := fmt.Sprintf("ratio rss=%.2f sts=%.2f idle_cpu=%.2f", ratio(d.rssMB, m.rssMB),
			ratio(d.sts.Seconds(), m.sts.Seconds()), ratio(d.idleCPUPerMin, m.idleCPUPerMin))
		if len(counts) > 1 {
			line += fmt.Sprintf(" slope=%.2f", ratio(slope(dolphin), slope(moco)))
		}
		t.Logf("%s (Dolphin/MOCO at n=%d; slope: RSS per cluster from n=%d to n=%d)", line, d.n, counts[0], d.n)
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
	// pprof is the address of its pprof endpoint, "" when it serves none.
	pprof string
	// client is an administrator's client of the operator's control plane.
	client client.Client
	// newCluster returns a 3-instance cluster named name in footprintNamespace.
	newCluster func(name string) client.Object
}

// footprint is what an operator cost at n clusters.
type footprint struct {
	n int
	// rssMB is the mean resident set size over the idle window, maxRSSMB the largest seen.
	rssMB, maxRSSMB float64
	// anonMB and fileMB split rssMB: the process's own memory (heap, stacks) and the pages of
	// files it maps (its binary's code and data, shared with the page cache).
	anonMB, fileMB float64
	sts            time.Duration // until the StatefulSets of the clusters created at this step existed
	idleCPUPerMin  float64       // CPU-seconds per minute once they did
}

func (f footprint) line(name string) string {
	return fmt.Sprintf("%s n=%d rss_mb=%.1f max_rss_mb=%.1f anon_mb=%.1f file_mb=%.1f sts_s=%.2f idle_cpu_s_per_min=%.2f",
		name, f.n, f.rssMB, f.maxRSSMB, f.anonMB, f.fileMB, f.sts.Seconds(), f.idleCPUPerMin)
}

// memorySample is how often sampleMemory reads the process's memory.
const memorySample = 2 * time.Second

// sampleMemory reads pid's memory every memorySample for d and records the means and the
// largest RSS seen. An idle Go process's RSS saws up and down by a third between garbage
// collections (at least one every 2 minutes): a single reading depends on where in that cycle
// it falls, the mean over a window that holds a collection does not.
func (f *footprint) sampleMemory(t *testing.T, pid int, d time.Duration) {
	var anon, file float64
	samples := 0
	for end := time.Now().Add(d); ; {
		a := float64(testenv.MustProcStatusKB(t, pid, "RssAnon")) / 1024
		fl := float64(testenv.MustProcStatusKB(t, pid, "RssFile")) / 1024
		anon, file, samples = anon+a, file+fl, samples+1
		f.maxRSSMB = max(f.maxRSSMB, a+fl)
		if time.Now().After(end) {
			break
		}
		time.Sleep(memorySample)
	}
	f.anonMB, f.fileMB = anon/float64(samples), file/float64(samples)
	f.rssMB = f.anonMB + f.fileMB
}

// slope is the RSS an operator added per cluster from the first measured count to the last,
// in MB (0 with fewer than two counts measured).
func slope(fs []footprint) float64 {
	if len(fs) < 2 {
		return 0
	}
	first, last := fs[0], fs[len(fs)-1]
	return (last.rssMB - first.rssMB) / float64(last.n-first.n)
}

// slopeLine is the per-cluster slope of RSS and of its anonymous part, or a note that the
// operator's run ended early.
func slopeLine(name string, fs []footprint, want int) string {
	if len(fs) < want {
		return fmt.Sprintf("%s slope: not measured (%d of %d counts)", name, len(fs), want)
	}
	first, last := fs[0], fs[len(fs)-1]
	return fmt.Sprintf("%s slope n=%d..%d rss_mb_per_cluster=%.3f anon_mb_per_cluster=%.3f", name, first.n, last.n,
		slope(fs), (last.anonMB-first.anonMB)/float64(last.n-first.n))
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
		f.sampleMemory(t, op.pid, idle)
		f.idleCPUPerMin = (cpuSeconds(t, op.pid) - cpu0) / time.Since(at0).Minutes()
		saveHeapProfile(t, op, n)
		t.Logf("%s (the StatefulSets of the %d clusters created at this step)", f.line(op.name), n-prev(counts, n))
		out = append(out, f)
	}
	return out
}

// saveHeapProfile writes op's heap profile at n clusters to
// $DOLPHIN_BENCH_FOOTPRINT_PROFILES/<name>-<n>.heap when that directory and op's pprof address
// are set (Dolphin only: MOCO serves no pprof). Compare two with
// `go tool pprof -diff_base footprint-10.heap footprint-100.heap`.
func saveHeapProfile(t *testing.T, op benchOperator, n int) {
	dir := os.Getenv("DOLPHIN_BENCH_FOOTPRINT_PROFILES")
	if dir == "" || op.pprof == "" {
		return
	}
	b := pprofGet(t, op.pprof, "heap?gc=1")
	path := filepath.Join(dir, fmt.Sprintf("%s-%d.heap", op.name, n))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("heap profile at n=%d: %s", n, path)
	// The runtime's own account of the memory, to set beside RSS, right after the forced
	// collection above: the live heap (HeapAlloc), the spans that hold it (HeapInuse), freed
	// spans not yet returned to the OS (HeapIdle - HeapReleased), goroutine stacks, the
	// collector's metadata, the next collection's target.
	stats := map[string]float64{}
	for _, l := range strings.Split(string(pprofGet(t, op.pprof, "heap?debug=1")), "\n") {
		name, v, ok := strings.Cut(strings.TrimPrefix(l, "# "), " = ")
		if f := strings.Fields(v); ok && len(f) > 0 && strings.HasPrefix(l, "# ") {
			if x, err := strconv.ParseFloat(f[0], 64); err == nil {
				stats[name] = x / (1 << 20)
			}
		}
	}
	t.Logf("%s n=%d go_mb heap_alloc=%.1f heap_inuse=%.1f heap_retained_free=%.1f stacks=%.1f gc_meta=%.1f next_gc=%.1f", op.name, n,
		stats["HeapAlloc"], stats["HeapInuse"], stats["HeapIdle"]-stats["HeapReleased"], stats["Stack"], stats["GCSys"], stats["NextGC"])
}

// pprofGet reads /debug/pprof/<what> from addr.
func pprofGet(t *testing.T, addr, what string) []byte {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/debug/pprof/" + what)
	if err != nil {
		t.Fatalf("pprof %s: %v", what, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("pprof %s: %s, %v", what, resp.Status, err)
	}
	return b
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
	pprof := os.Getenv("DOLPHIN_BENCH_FOOTPRINT_PPROF")
	if pprof == "" && os.Getenv("DOLPHIN_BENCH_FOOTPRINT_PROFILES") != "" {
		pprof = testenv.FreeAddr(t)
	}
	if pprof != "" {
		args = append(args, "--pprof-bind-address="+pprof)
	}
	// More operator flags, to compare settings (e.g. --gc-percent=100, Go's default).
	args = append(args, strings.Fields(os.Getenv("DOLPHIN_BENCH_FOOTPRINT_ARGS"))...)
	cmd := exec.Command(bin, args...)
	// A soft memory limit for Dolphin only, to compare RSS with and without one (the operator
	// sets it from its container's limit; this bench runs it in no container).
	if limit := os.Getenv("DOLPHIN_BENCH_FOOTPRINT_GOMEMLIMIT"); limit != "" {
		cmd.Env = append(os.Environ(), "GOMEMLIMIT="+limit)
	}
	return benchOperator{
		name:   "footprint",
		pid:    startBenchProcess(t, cmd),
		pprof:  pprof,
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
