package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestBenchLocal measures, on `dolphin local`, the time from creating a 3-instance cluster to
// Ready, and over K rounds the failover time a client sees through the primary Service: the
// primary is hung (SIGSTOP — a kill -9 is restarted by the node before detection, so it would
// not measure a failover), a writer through the Service records every acknowledged write, and
// the round ends at the first write acknowledged by the new primary. Between rounds the hung
// old primary is killed; restarted by the node it must rejoin as a replica by itself. `make bench-local` runs it with
// DOLPHIN_BENCH_LOCAL_ROUNDS=K; the summary line is written to DOLPHIN_BENCH_OUT.
func TestBenchLocal(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("DOLPHIN_BENCH_LOCAL_ROUNDS"))
	if rounds <= 0 {
		t.Skip("set DOLPHIN_BENCH_LOCAL_ROUNDS (make bench-local)")
	}
	s := upStack(t)
	cluster := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "bench"},
		Spec: dolphinv1.MySQLClusterSpec{Instances: 3, Storage: dolphinv1.StorageSpec{DeletePolicy: dolphinv1.VolumeDelete}}}
	applied := time.Now()
	if err := s.c.Create(s.ctx, cluster); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(cluster)
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
	testenv.Eventually(t, 180*time.Second, "cluster Ready", ready)
	applyToReady := time.Since(applied)

	primary := s.primaryWithTable("bench")
	var mu sync.Mutex
	acked := map[int64]bool{}
	var lastAck time.Time
	var paused atomic.Bool // no writes while the cluster recovers between rounds
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for id := int64(1); ; id++ {
			select {
			case <-stop:
				return
			default:
			}
			if paused.Load() {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			if _, err := primary.Exec("INSERT INTO app.rows VALUES (?)", id); err == nil {
				mu.Lock()
				acked[id], lastAck = true, time.Now()
				mu.Unlock()
			} else {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()
	defer func() { close(stop); <-done }()

	var outages []time.Duration
	for r := 1; r <= rounds; r++ {
		paused.Store(false)
		time.Sleep(time.Second)
		if err := s.c.Get(s.ctx, key, cluster); err != nil {
			t.Fatal(err)
		}
		old := cluster.Status.CurrentPrimary
		pid := s.serverPID(old)
		hung := time.Now()
		if err := exec.Command("kill", "-STOP", strconv.Itoa(pid)).Run(); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 120*time.Second, "failover and a write acknowledged after it", func() error {
			if err := s.c.Get(s.ctx, key, cluster); err != nil {
				return err
			}
			lp := cluster.Status.Topology.LastPromotion
			mu.Lock()
			defer mu.Unlock()
			if lp == nil || lp.From != old || lp.Time.Time.Before(hung) || !lastAck.After(lp.Time.Time) {
				return fmt.Errorf("not yet: %+v", lp)
			}
			return nil
		})
		mu.Lock()
		outage := lastAck.Sub(hung)
		mu.Unlock()
		outages = append(outages, outage)
		t.Logf("round %d: %s -> %s, client-view failover %.2fs", r, old, cluster.Status.Topology.LastPromotion.To, outage.Seconds())
		// The hung old primary is killed; the node restarts it, and MariaDB started with
		// --init-rpl-role=SLAVE rolls back the tail nobody acknowledged, so it rejoins the new
		// primary as a replica by itself — never errant, no re-clone.
		_ = exec.Command("kill", "-KILL", strconv.Itoa(pid)).Run()
		paused.Store(true)
		rejoinStart := time.Now()
		testenv.Eventually(t, 240*time.Second, "three healthy instances again", func() error {
			if err := s.c.Get(s.ctx, key, cluster); err != nil {
				return err
			}
			if tp := cluster.Status.Topology; tp != nil && slices.Contains(tp.ErrantInstances, old) {
				t.Fatalf("round %d: the restarted old primary %s is errant: %s", r, old, tp.Message)
			}
			// MariaDB leaves asynchronous mode only when a replica acknowledges a new
			// transaction: one marker write lets it (it is not counted as acknowledged).
			_, _ = primary.Exec("REPLACE INTO app.rows VALUES (-1)")
			return ready()
		})
		t.Logf("round %d: %s restarted and rejoined as a replica in %.2fs", r, old, time.Since(rejoinStart).Seconds())
	}

	// Every acknowledged write is on the primary.
	mu.Lock()
	ids := make([]int64, 0, len(acked))
	for id := range acked {
		ids = append(ids, id)
	}
	mu.Unlock()
	lost := 0
	for _, id := range ids {
		var n int
		if err := primary.QueryRow("SELECT COUNT(*) FROM app.rows WHERE id=?", id).Scan(&n); err != nil || n != 1 {
			lost++
		}
	}
	slices.Sort(outages)
	pct := func(p int) float64 { return outages[max(0, min((p*len(outages)+99)/100-1, len(outages)-1))].Seconds() }
	line := fmt.Sprintf("local apply_to_ready=%.2fs failover_client_p50=%.2fs p95=%.2fs rounds=%d lost_acked_writes=%d",
		applyToReady.Seconds(), pct(50), pct(95), rounds, lost)
	t.Log(line)
	if out := os.Getenv("DOLPHIN_BENCH_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(line+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if lost > 0 {
		t.Errorf("%d acknowledged writes lost", lost)
	}
}
