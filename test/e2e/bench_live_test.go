package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// liveCPUTarget is issue 35's bound on what one live instance costs the operator: 1 % of a
// core at the default 1 s detection interval.
const liveCPUTarget = 1.0

// TestBenchLive measures what live clusters cost the operator on `dolphin local` (real
// servers, default detection): its CPU and mean RSS over DOLPHIN_BENCH_LIVE_WINDOW (default
// 60s) with each count of DOLPHIN_BENCH_LIVE_CLUSTERS (cumulative, e.g. "1,5,10") 3-instance
// clusters Ready and left alone, after a settle of 30 s. One line per count:
// `live clusters=N operator_cpu_pct_per_instance=… rss_mb=… …`, the last written to
// DOLPHIN_BENCH_OUT with the others (`make bench-live`).
func TestBenchLive(t *testing.T) {
	spec := os.Getenv("DOLPHIN_BENCH_LIVE_CLUSTERS")
	if spec == "" {
		t.Skip("set DOLPHIN_BENCH_LIVE_CLUSTERS (make bench-live)")
	}
	counts, err := testenv.IncreasingCounts(spec)
	if err != nil {
		t.Fatalf("DOLPHIN_BENCH_LIVE_CLUSTERS=%v", err)
	}
	window := time.Minute
	if d, err := time.ParseDuration(os.Getenv("DOLPHIN_BENCH_LIVE_WINDOW")); err == nil && d > 0 {
		window = d
	}
	s := upStackOn(t, repoRoot(), e2eNode())

	var lines []string
	created := 0
	for _, n := range counts {
		var names []string
		for ; created < n; created++ {
			name := fmt.Sprintf("live-%02d", created)
			c := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name},
				Spec: dolphinv1.MySQLClusterSpec{Instances: 3, Storage: dolphinv1.StorageSpec{DeletePolicy: dolphinv1.VolumeDelete}}}
			if err := s.c.Create(s.ctx, c); err != nil {
				t.Fatal(err)
			}
			names = append(names, name)
		}
		s.waitAllReady(names, 10*time.Minute)
		time.Sleep(30 * time.Second) // the new clusters' first status writes and account checks
		l := measureLive(t, s.operatorPIDs(), window)
		line := fmt.Sprintf("live clusters=%d operator_cpu_pct_per_instance=%.3f rss_mb=%.1f instances=%d operator_cpu_pct=%.2f max_rss_mb=%.1f operator_processes=%d target_cpu_pct_per_instance=%.1f met=%t",
			n, l.cpuPct/float64(3*n), l.rssMB, 3*n, l.cpuPct, l.maxRSSMB, l.processes, liveCPUTarget, l.cpuPct/float64(3*n) <= liveCPUTarget)
		t.Log(line)
		lines = append(lines, line)
	}
	if out := os.Getenv("DOLPHIN_BENCH_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// liveCost is what the operator's processes used over a window.
type liveCost struct {
	cpuPct float64 // of one core, every operator process together
	// rssMB and maxRSSMB are the mean and largest RSS of the largest operator process (the
	// leader: a standby replica holds no clusters), sampled every 2 s.
	rssMB, maxRSSMB float64
	processes       int
}

// measureLive samples the CPU time and RSS of the operator processes pids over window.
func measureLive(t *testing.T, pids []int, window time.Duration) liveCost {
	t.Helper()
	cpu := func() (total time.Duration) {
		for _, pid := range pids {
			total += testenv.MustProcCPU(t, pid)
		}
		return total
	}
	cpu0, at0 := cpu(), time.Now()
	l := liveCost{processes: len(pids)}
	var sum float64
	samples := 0
	for end := at0.Add(window); ; {
		var rss float64
		for _, pid := range pids {
			rss = max(rss, float64(testenv.MustProcStatusKB(t, pid, "VmRSS"))/1024)
		}
		sum, samples, l.maxRSSMB = sum+rss, samples+1, max(l.maxRSSMB, rss)
		if time.Now().After(end) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	l.rssMB = sum / float64(samples)
	l.cpuPct = 100 * (cpu() - cpu0).Seconds() / time.Since(at0).Seconds()
	return l
}

// operatorPIDs are the host PIDs of the operator: the `dolphin local` process on the process
// node; on the real node, the processes of the operator Deployment's containers (leader and
// standby), found by their binary, /dolphin-operator (one `dolphin local` runs on this host
// at a time: the e2e suites and benches never run two stacks at once).
func (s *stack) operatorPIDs() []int {
	s.t.Helper()
	if s.node != nodeReal {
		return []int{s.process("operator").PID}
	}
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		s.t.Fatal(err)
	}
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue // gone since the listing
		}
		if argv0, _, _ := strings.Cut(string(cmdline), "\x00"); argv0 == "/dolphin-operator" {
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		s.t.Fatal("no /dolphin-operator process on this host")
	}
	return pids
}

// waitAllReady waits until every named cluster is Ready with a Healthy topology and no errant
// instance.
func (s *stack) waitAllReady(names []string, timeout time.Duration) {
	s.t.Helper()
	testenv.Eventually(s.t, timeout, fmt.Sprintf("%d clusters Ready", len(names)), func() error {
		for _, name := range names {
			if err := s.chaosHealthy(client.ObjectKey{Namespace: s.ns, Name: name}); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		return nil
	})
}
