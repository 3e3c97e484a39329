package topology

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
)

// TestBenchFailover measures failover on real servers: `make bench-failover` runs it with
// DOLPHIN_BENCH_FAILOVER_ROUNDS=K. Each round kills the primary (kill -9) of a 3-instance
// cluster under a writer that records every acknowledged write (or, with
// DOLPHIN_BENCH_FAILOVER_KIND=hung, hangs it with SIGSTOP), with the default detection
// settings (1s × 3), measures
//   - detection: kill → the engine starts fencing,
//   - promotion: fencing → the new primary is writable,
//   - total: kill → the first write acknowledged by the new primary,
//
// restarts the old primary (it rejoins as a replica) and checks that no acknowledged write is
// missing. It writes the summary line to DOLPHIN_BENCH_OUT when set.
func TestBenchFailover(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("DOLPHIN_BENCH_FAILOVER_ROUNDS"))
	if rounds <= 0 {
		t.Skip("set DOLPHIN_BENCH_FAILOVER_ROUNDS (make bench-failover)")
	}
	kind := os.Getenv("DOLPHIN_BENCH_FAILOVER_KIND")
	if kind == "" {
		kind = "killed"
	}
	if kind != "killed" && kind != "hung" {
		t.Fatalf("DOLPHIN_BENCH_FAILOVER_KIND=%q: want killed or hung", kind)
	}
	rec := &phaseRecorder{}
	trace := &engineTrace{}
	// The default detection settings of a MySQLCluster (interval 1s, attempts 3) and the
	// engine's default probe deadline, as users get them.
	h := runningClusterWith(t, func(c *Config) {
		c.Interval, c.Settings.DetectionAttempts = time.Second, 3
		c.Log = funcr.New(trace.add, funcr.Options{Verbosity: 1})
	}, rec)
	// An application account: read_only stops it, unlike Dolphin's own (DESIGN.md).
	h.createAppAccount()
	// DOLPHIN_BENCH_FAILOVER_WATCH=1 adds what the servers show of each round (watch lines).
	watch := os.Getenv("DOLPHIN_BENCH_FAILOVER_WATCH") != ""
	w := startWriterAs(h, appAccount)
	defer w.finish()

	var detect, promote, total []time.Duration
	lost := 0
	for r := 1; r <= rounds; r++ {
		time.Sleep(500 * time.Millisecond) // steady write load before the kill
		old := h.e.Primary()
		oldIdx := h.index(old)
		if st, err := statusOf(h, oldIdx); err == nil {
			// How many replicas acknowledge (a receiver started as semi-sync stops slower on a
			// hung source: it connects back to kill its dump thread, docs/design/0035).
			t.Logf("round %d: before the fault, %s has %d semi-sync replicas (active %t)", r, old, st.SemiSync.Clients, st.SemiSync.SourceActive)
		}
		var logSizes []int64
		if watch {
			logSizes = errorLogSizes(h)
		}
		rec.reset()
		ackedBefore := w.n.Load()
		killed := time.Now()
		trace.reset(killed)
		pid := h.db.Instances[oldIdx].PID()
		if kind == "hung" {
			// Hung, not dead: the server keeps its sockets, so connects succeed and
			// queries never answer; replicas' receivers show as running.
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
		} else {
			h.db.Instances[oldIdx].Kill(t)
		}
		stopWatching := func() {}
		if watch {
			stopWatching = watchListenQueue(t, r, old, h.db.Instances[oldIdx].Addr(), killed)
		}
		var newPrimary string
		for {
			if p := h.e.Primary(); p != old {
				newPrimary = p
				break
			}
			if time.Since(killed) > 60*time.Second {
				t.Fatalf("round %d: no failover within 60 s", r)
			}
			time.Sleep(5 * time.Millisecond)
		}
		stopWatching()
		if watch {
			watchNewPrimary(t, h, r, oldIdx, killed)
		}
		// The first acknowledged write after the promotion.
		for w.n.Load() == ackedBefore || w.lastAck().Before(killed) || w.lastAckOn() != newPrimary {
			if time.Since(killed) > 60*time.Second {
				t.Fatalf("round %d: writes did not resume", r)
			}
			time.Sleep(2 * time.Millisecond)
		}
		fenced, promoted := rec.times()
		tot := w.lastAck().Sub(killed)
		detect, promote, total = append(detect, fenced.Sub(killed)), append(promote, promoted.Sub(fenced)), append(total, tot)
		missing, acked := w.missingOn(h.index(newPrimary))
		lost += missing
		t.Logf("round %d: %s -> %s detection=%s promotion=%s total=%s acked=%d missing=%d",
			r, old, newPrimary, fenced.Sub(killed).Round(time.Millisecond), promoted.Sub(fenced).Round(time.Millisecond), tot.Round(time.Millisecond), acked, missing)
		// The engine's own account of the round, in milliseconds from the fault: each cycle's
		// observe/act/report times and plans (where a slow round spent its time).
		for _, l := range trace.until(promoted.Add(time.Second)) {
			t.Logf("round %d trace: %s", r, l)
		}

		if watch {
			logErrorLogsSince(t, h, r, oldIdx, logSizes)
		}
		if kind == "hung" {
			// What Dolphin does to a replaced primary that does not answer: kill it.
			h.db.Instances[oldIdx].Kill(t)
		}
		h.db.Instances[oldIdx].Start(t, "--init-rpl-role=SLAVE")
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			st, err := statusOf(h, oldIdx)
			if err == nil && st.Replica != nil && st.Replica.IORunning && st.Replica.SQLRunning {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %s did not rejoin", r, old)
			}
		}
	}
	line := fmt.Sprintf("failover kind=%s rounds=%d p50=%.2fs p95=%.2fs max=%.2fs lost_acked_writes=%d", kind, rounds,
		pct(total, 50), pct(total, 95), pct(total, 100), lost)
	t.Logf("detection p50=%.2fs p95=%.2fs max=%.2fs (interval 1s × 3 attempts)", pct(detect, 50), pct(detect, 95), pct(detect, 100))
	t.Logf("promotion p50=%.2fs p95=%.2fs max=%.2fs", pct(promote, 50), pct(promote, 95), pct(promote, 100))
	t.Log(line)
	if out := os.Getenv("DOLPHIN_BENCH_OUT"); out != "" {
		summary := fmt.Sprintf("detection p50=%.2fs p95=%.2fs max=%.2fs\npromotion p50=%.2fs p95=%.2fs max=%.2fs\n%s\n",
			pct(detect, 50), pct(detect, 95), pct(detect, 100), pct(promote, 50), pct(promote, 95), pct(promote, 100), line)
		if err := os.WriteFile(out, []byte(summary), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if lost > 0 {
		t.Errorf("%d acknowledged writes lost", lost)
	}
}

// pct returns the p-th percentile (nearest rank) in seconds.
func pct(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return s[max(0, min(i, len(s)-1))].Seconds()
}

// phaseRecorder notes when a failover started fencing and when it promoted.
type phaseRecorder struct {
	mu               sync.Mutex
	fenced, promoted time.Time
}

func (p *phaseRecorder) Report(_ context.Context, r Report) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.Decision.State == StateFailover && p.fenced.IsZero() {
		p.fenced = time.Now()
	}
	if r.Promotion != nil && p.promoted.IsZero() {
		p.promoted = time.Now()
	}
}
func (p *phaseRecorder) reset() {
	p.mu.Lock()
	p.fenced, p.promoted = time.Time{}, time.Time{}
	p.mu.Unlock()
}
func (p *phaseRecorder) times() (time.Time, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fenced, p.promoted
}

type multiReporter []Reporter

func (m multiReporter) Report(ctx context.Context, r Report) {
	for _, x := range m {
		x.Report(ctx, r)
	}
}

// engineTrace keeps the engine's log lines of one round with their time from the fault.
type engineTrace struct {
	mu    sync.Mutex
	start time.Time
	lines []traceLine
}

type traceLine struct {
	at   time.Time
	text string
}

func (e *engineTrace) add(prefix, args string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.start.IsZero() {
		now := time.Now()
		e.lines = append(e.lines, traceLine{now, fmt.Sprintf("+%5dms %s %s", now.Sub(e.start).Milliseconds(), prefix, args)})
	}
}

func (e *engineTrace) reset(start time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.start, e.lines = start, nil
}

// until returns the lines logged up to t.
func (e *engineTrace) until(t time.Time) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, l := range e.lines {
		if !l.at.After(t) {
			out = append(out, l.text)
		}
	}
	return out
}

// watchListenQueue logs the hung server's listen queue whenever it changes (Recv-Q:
// connections the kernel accepted that the stopped server never took; Send-Q: the backlog)
// until the returned function is called.
func watchListenQueue(t *testing.T, round int, name, addr string, since time.Time) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		last := ""
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			out, err := exec.Command("ss", "-ltnH", "src", addr).Output()
			if l := strings.Join(strings.Fields(string(out)), " "); err == nil && l != last {
				t.Logf("round %d watch: +%dms listen queue of %s: %s", round, time.Since(since).Milliseconds(), name, l)
				last = l
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// watchNewPrimary polls the instances other than the old primary for 1.5 s: how soon the new
// primary has a semi-sync replica again (its first commits wait for one).
func watchNewPrimary(t *testing.T, h *harness, round, oldIdx int, since time.Time) {
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		line := fmt.Sprintf("+%dms", time.Since(since).Milliseconds())
		for i := range 3 {
			if i == oldIdx {
				continue
			}
			if st, err := statusOf(h, i); err == nil && st.Replica != nil {
				line += fmt.Sprintf(" db-%d io=%t sql=%t ioerr=%d %q", i, st.Replica.IORunning, st.Replica.SQLRunning, st.Replica.LastIOErrno, st.Replica.LastIOError)
			} else if err == nil {
				line += fmt.Sprintf(" db-%d primary clients=%d", i, st.SemiSync.Clients)
			}
		}
		t.Logf("round %d watch: %s", round, line)
	}
}

// errorLogSizes is where each server's error log ends now.
func errorLogSizes(h *harness) []int64 {
	sizes := make([]int64, len(h.db.Instances))
	for i, in := range h.db.Instances {
		if fi, err := os.Stat(in.ErrorLog); err == nil {
			sizes[i] = fi.Size()
		}
	}
	return sizes
}

// logErrorLogsSince logs what the servers other than the old primary wrote to their error logs
// since sizes (how a semi-sync receiver ended on the hung source).
func logErrorLogsSince(t *testing.T, h *harness, round, oldIdx int, sizes []int64) {
	for i, in := range h.db.Instances {
		b, err := os.ReadFile(in.ErrorLog)
		if i == oldIdx || err != nil || int64(len(b)) < sizes[i] {
			continue
		}
		for _, l := range strings.Split(string(b[sizes[i]:]), "\n") {
			if l != "" {
				t.Logf("round %d watch: db-%d log: %s", round, i, l)
			}
		}
	}
}
