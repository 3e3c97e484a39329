package e2e

import (
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestBenchLocal measures, on `dolphin local` (the node DOLPHIN_E2E_NODE names: process by
// default, or real), the time from creating a 3-instance cluster to Ready
// (DOLPHIN_BENCH_READY_ROUNDS times, each phase of the way timed: applyToReady; then one
// instance added to the last cluster, scaleUpOne, and a new cluster restored from a backup of
// it, restoreToReady, timed the same way), and over K
// rounds per fault kind the write outage a client sees through the primary Service: the primary's server is hung (SIGSTOP) or killed (kill -9; the node restarts it) in
// turn while an application writer records every acknowledged write, and the outage of a
// round is the time from the fault to the acknowledgement of the first write sent after it.
// Debian's sysbench (oltp_read_write with a working reconnect, sysbenchScript) runs through the same
// Service the whole time and must commit again after every fault. Between rounds the cluster
// must be healthy again with no instance errant (a hung old primary is killed by Dolphin or,
// at the latest, by the test). `make bench-local` runs it with DOLPHIN_BENCH_LOCAL_ROUNDS=K
// and DOLPHIN_BENCH_READY_ROUNDS=R; the summary lines are written to DOLPHIN_BENCH_OUT.
func TestBenchLocal(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("DOLPHIN_BENCH_LOCAL_ROUNDS"))
	if rounds <= 0 {
		t.Skip("set DOLPHIN_BENCH_LOCAL_ROUNDS (make bench-local)")
	}
	readyRounds, _ := strconv.Atoi(os.Getenv("DOLPHIN_BENCH_READY_ROUNDS"))
	readyRounds = max(readyRounds, 1)
	s := upStackOn(t, repoRoot(), e2eNode())
	// apply → Ready: the first rounds' clusters are deleted once Ready, the last one's is
	// the cluster of the failover rounds.
	var readies []readyRound
	for i := 1; i <= readyRounds; i++ {
		name := "bench"
		if i < readyRounds {
			name = fmt.Sprintf("ready-%d", i)
		}
		r := s.applyToReady(name)
		t.Logf("ready round %d: %s", i, r)
		readies = append(readies, r)
		if i < readyRounds {
			s.deleteCluster(name)
		}
	}
	// One more instance for the kept cluster (cloned from a peer), timed the same way, then
	// removed again: the failover rounds run on three.
	scaleUp := s.scaleUpOne("bench")
	t.Logf("scale-up: %s", scaleUp)
	// A new cluster from a backup of the kept one, timed the same way, then deleted.
	restored, backup := s.restoreToReady("bench")
	t.Logf("restore: %s (%s)", restored, backup)
	totals := make([]time.Duration, len(readies))
	for i, r := range readies {
		totals[i] = r.total
	}
	cluster := &dolphinv1.MySQLCluster{}
	key := client.ObjectKey{Namespace: s.ns, Name: "bench"}
	ready := func() error {
		if err := s.c.Get(s.ctx, key, cluster); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(cluster.Status.Conditions, "Ready") || cluster.Status.Topology == nil ||
			len(cluster.Status.Topology.ErrantInstances) > 0 || cluster.Status.Topology.State != "Healthy" {
			return fmt.Errorf("phase %s topology %+v", cluster.Status.Phase, cluster.Status.Topology)
		}
		return nil
	}

	primary := s.primaryWithTable("bench")
	s.declareSysbenchAccount("bench")
	w := startTimedWriter(primary)
	defer w.finish()
	sb := s.startSysbench("bench", 4)

	outages := map[string][]time.Duration{}
	var recoveries []time.Duration
	timeline := s.watchPrimaryTimeline("bench")
	for r := 1; r <= rounds; r++ {
		for _, kind := range []string{"hung", "killed"} {
			time.Sleep(time.Second) // steady load before the fault
			if err := s.c.Get(s.ctx, key, cluster); err != nil {
				t.Fatal(err)
			}
			old := cluster.Status.CurrentPrimary
			pid := s.serverPID(old)
			oldIPs := s.podIPs(old)
			sig := syscall.SIGSTOP
			if kind == "killed" {
				sig = syscall.SIGKILL
			}
			// The fault's time is taken once the signal is sent: a write sent while a kill(1)
			// process was still starting could be acknowledged by the server before the
			// signal, and counted as an outage of milliseconds.
			if err := syscall.Kill(pid, sig); err != nil {
				t.Fatalf("%v to %s (pid %d): %v", sig, old, pid, err)
			}
			fault := time.Now()
			timeline.arm(old, oldIPs, fault)
			var outage time.Duration
			testenv.Eventually(t, 120*time.Second, "a write sent after the fault acknowledged", func() error {
				at, ok := w.firstAckOfWriteSentAfter(fault)
				if !ok {
					return fmt.Errorf("not yet (%s)", w.lastError())
				}
				outage = at.Sub(fault)
				return nil
			})
			outages[kind] = append(outages[kind], outage)
			rec, ok := sb.recovery(fault, 30*time.Second)
			if !ok {
				t.Fatalf("round %d (%s): sysbench did not commit again within 30 s of the fault (the writer did after %.2fs):\n%s",
					r, kind, outage.Seconds(), sb.lastLines(15))
			}
			recoveries = append(recoveries, rec)
			if err := s.c.Get(s.ctx, key, cluster); err != nil {
				t.Fatal(err)
			}
			// The fault's time, to the millisecond, lines the round up with the operator's log
			// (the steps of the failover: docs/design/0035's time budget).
			t.Logf("round %d: %s %s -> %s, client-view outage %.2fs (%s), sysbench committing again after %.0fs (fault at %s)",
				r, kind, old, cluster.Status.CurrentPrimary, outage.Seconds(), timeline, rec.Seconds(), fault.UTC().Format("15:04:05.000"))
			if kind == "hung" {
				// Dolphin deletes the pod of a replaced primary that does not answer; the test
				// makes sure the stopped process cannot resume either way. Restarted by the
				// node, MariaDB started with --init-rpl-role=SLAVE rolls back the tail nobody
				// acknowledged and rejoins the new primary as a replica by itself.
				_ = exec.Command("kill", "-KILL", strconv.Itoa(pid)).Run()
			}
			rejoinStart := time.Now()
			testenv.Eventually(t, 240*time.Second, "three healthy instances again", func() error {
				if err := s.c.Get(s.ctx, key, cluster); err != nil {
					return err
				}
				if tp := cluster.Status.Topology; tp != nil && slices.Contains(tp.ErrantInstances, old) {
					t.Fatalf("round %d (%s): the restarted old primary %s is errant: %s", r, kind, old, tp.Message)
				}
				return ready()
			})
			t.Logf("round %d: %s healthy again in %.2fs", r, kind, time.Since(rejoinStart).Seconds())
		}
	}
	w.finish()
	if at, ok := sb.firstCommitAfter(time.Now().Add(-5 * time.Second)); !ok {
		t.Errorf("sysbench is not committing at the end of the run (last at %v):\n%s", at, sb.lastLines(10))
	}

	lost := lostOn(t, primary, w.ackedIDs())
	readyLine := fmt.Sprintf("ready rounds=%d apply_to_ready_p50=%.2fs apply_to_ready_p99=%.2fs %s",
		len(totals), pctl(totals, 50), pctl(totals, 99), readySummary(readies))
	if pods, ok := s.kubeletVolumeBackoffs(); ok {
		readyLine += fmt.Sprintf(" kubelet_volume_backoffs=%d", len(pods))
		for pod, cause := range pods {
			t.Logf("the kubelet set %s aside for 10-15 s: %s", pod, cause)
		}
		retries := s.operatorKubeletRetries()
		readyLine += fmt.Sprintf(" operator_kubelet_retries=%d", len(retries))
		for pod, n := range retries {
			t.Logf("the operator asked the kubelet to sync %s again (%d time(s), docs/design/0069)", pod, n)
		}
	}
	line := fmt.Sprintf("local node="+s.node+" apply_to_ready=%.2fs apply_to_ready_p99=%.2fs ready_rounds=%d hung_p50=%.2fs hung_p99=%.2fs killed_p50=%.2fs killed_p99=%.2fs rounds=%d lost_acked_writes=%d",
		pctl(totals, 50), pctl(totals, 99), len(totals), pctl(outages["hung"], 50), pctl(outages["hung"], 99), pctl(outages["killed"], 50), pctl(outages["killed"], 99), rounds, lost)
	sysbenchLine := fmt.Sprintf("sysbench oltp_read_write threads=4 recovered=%d/%d recovery_p50=%.0fs recovery_max=%.0fs",
		len(recoveries), 2*rounds, pctl(recoveries, 50), pctl(recoveries, 100))
	scaleLine := "scale_up " + scaleUp.String()
	restoreLine := "restore " + restored.String() + " " + backup
	t.Log(readyLine)
	t.Log(scaleLine)
	t.Log(restoreLine)
	t.Log(sysbenchLine)
	t.Log(line)
	if out := os.Getenv("DOLPHIN_BENCH_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(readyLine+"\n"+scaleLine+"\n"+restoreLine+"\n"+sysbenchLine+"\n"+line+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if lost > 0 {
		t.Errorf("%d acknowledged writes lost", lost)
	}
}

// pctl is the p-th percentile (nearest rank) in seconds.
func pctl(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[max(0, min((p*len(s)+99)/100-1, len(s)-1))].Seconds()
}

// timedWriter inserts rows through db one after the other, recording for every
// acknowledged write when it was sent and when it was acknowledged.
type timedWriter struct {
	db         *sql.DB
	stop, done chan struct{}
	mu         sync.Mutex
	acks       []timedAck
	lastErr    error
}

type timedAck struct {
	id             int64
	sent, answered time.Time
}

func startTimedWriter(db *sql.DB) *timedWriter {
	w := &timedWriter{db: db, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for id := int64(1); ; id++ {
			select {
			case <-w.stop:
				return
			default:
			}
			sent := time.Now()
			_, err := db.Exec("INSERT INTO app.rows VALUES (?)", id)
			w.mu.Lock()
			if err == nil {
				w.acks = append(w.acks, timedAck{id: id, sent: sent, answered: time.Now()})
			} else {
				w.lastErr = err
			}
			w.mu.Unlock()
			if err != nil {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()
	return w
}

// firstAckOfWriteSentAfter is when the first write sent at or after t was acknowledged.
func (w *timedWriter) firstAckOfWriteSentAfter(t time.Time) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := len(w.acks) - 1; i >= 0 && !w.acks[i].sent.Before(t); i-- {
		if i == 0 || w.acks[i-1].sent.Before(t) {
			return w.acks[i].answered, true
		}
	}
	return time.Time{}, false
}

func (w *timedWriter) lastError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastErr
}

func (w *timedWriter) ackedIDs() map[int64]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[int64]bool, len(w.acks))
	for _, a := range w.acks {
		out[a.id] = true
	}
	return out
}

func (w *timedWriter) finish() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}
