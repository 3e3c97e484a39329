package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestBenchDay2 measures, on `dolphin local`, what the weekly changes cost a client that
// writes through the primary Service as an application account, over K rounds: rotating a
// password (each round the next of operator, replication, monitor), a run-time setting
// (max_connections), and a setting that needs a restart (performance_schema toggled: replicas
// restart first, then a switchover, then the old primary). For comparison in the same run it
// then restarts the primary in place, as a StatefulSet rolling update would. `make bench-day2`
// runs it with DOLPHIN_BENCH_DAY2_ROUNDS=K; the summary line goes to DOLPHIN_BENCH_OUT.
func TestBenchDay2(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("DOLPHIN_BENCH_DAY2_ROUNDS"))
	if rounds <= 0 {
		t.Skip("set DOLPHIN_BENCH_DAY2_ROUNDS (make bench-day2)")
	}
	s := upStack(t)
	const name = "bench"
	cluster, key := s.healthyAppCluster(name)
	w := s.startSteadyAppWriter(name)

	var rotationGap, dynamicGap, restartPause time.Duration
	keys := []string{resources.OperatorPasswordKey, resources.ReplicationPasswordKey, resources.MonitorPasswordKey}
	// performance_schema is static: each round toggles it (MariaDB's default is OFF).
	perfSchema := "OFF"
	config := func(maxConn string) map[string]string {
		return map[string]string{"innodb_buffer_pool_size": "32M", "max_connections": maxConn, "performance_schema": perfSchema}
	}
	// performance_schema=OFF (the default) in the spec from the start: adding the key is a
	// template change, rolled once before measuring.
	before := s.servers(name, 3)
	s.setConfig(cluster, config("200"))
	s.waitRolled(key, name, before)
	w.takeGap()
	for r := 1; r <= rounds; r++ {
		gen := s.rotate(name, keys[(r-1)%len(keys)])
		testenv.Eventually(t, 120*time.Second, "rotation applied", func() error { return s.credentialsApplied(key, gen) })
		rot := w.takeGap()

		maxConn := strconv.Itoa(200 + r)
		s.setConfig(cluster, config(maxConn))
		s.waitConfigApplied(key, "max_connections", maxConn)
		dyn := w.takeGap()

		before := s.servers(name, 3)
		perfSchema = map[string]string{"OFF": "ON", "ON": "OFF"}[perfSchema]
		s.setConfig(cluster, config(maxConn))
		s.waitRolled(key, name, before)
		s.waitConfigApplied(key, "performance_schema", perfSchema)
		pause := w.takeGap()
		t.Logf("round %d: rotation_gap=%.3fs dynamic_gap=%.3fs restart_change_pause=%.3fs", r, rot.Seconds(), dyn.Seconds(), pause.Seconds())
		rotationGap, dynamicGap, restartPause = max(rotationGap, rot), max(dynamicGap, dyn), max(restartPause, pause)
	}

	// Baseline in the same run: the primary restarted in place, as a StatefulSet rolling
	// update restarts it (a graceful stop, then the same pod on its volume).
	if err := s.c.Get(s.ctx, key, cluster); err != nil {
		t.Fatal(err)
	}
	old := cluster.Status.Topology.Primary
	before = s.servers(name, 3)
	w.takeGap()
	if err := s.c.Delete(s.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: old}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 180*time.Second, "primary restarted in place and the cluster healthy", func() error {
		var p corev1.Pod
		if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: old}, &p); err != nil {
			return err
		}
		if p.UID == before[old].uid {
			return fmt.Errorf("not replaced yet")
		}
		return s.healthy(key)
	})
	inPlace := w.takeGap()

	w.finish()
	acked, failed := w.ackedIDs()
	s.waitAllInstances(key, 3, len(acked))
	if err := s.c.Get(s.ctx, key, cluster); err != nil {
		t.Fatal(err)
	}
	lost := lostOn(t, s.sqlDB(s.podAddr(cluster.Status.Topology.Primary)), acked)
	if lost > 0 {
		t.Errorf("%d acknowledged writes lost", lost)
	}
	t.Logf("%d writes acknowledged, %d failed", len(acked), failed)
	out := fmt.Sprintf("baseline in_place_primary_restart_gap=%.2fs restart_change_pause/in_place=%.2f\n"+
		"day2 rotation_gap=%.2fs dynamic_gap=%.2fs restart_change_pause=%.2fs rounds=%d lost_acked_writes=%d\n",
		inPlace.Seconds(), restartPause.Seconds()/max(inPlace.Seconds(), 0.001),
		rotationGap.Seconds(), dynamicGap.Seconds(), restartPause.Seconds(), rounds, lost)
	fmt.Print(out)
	if f := os.Getenv("DOLPHIN_BENCH_OUT"); f != "" {
		if err := os.WriteFile(f, []byte(out), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// setConfig replaces spec.mysqlConfig.
func (s *stack) setConfig(c *dolphinv1.MySQLCluster, cfg map[string]string) {
	s.t.Helper()
	// A merge patch replaces only the keys it names: null out the others.
	var cur dolphinv1.MySQLCluster
	if err := s.c.Get(s.ctx, client.ObjectKeyFromObject(c), &cur); err != nil {
		s.t.Fatal(err)
	}
	full := map[string]any{}
	for k := range cur.Spec.MySQLConfig {
		full[k] = nil
	}
	for k, v := range cfg {
		full[k] = v
	}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"mysqlConfig": full}})
	if err := s.c.Patch(s.ctx, c, client.RawPatch(types.MergePatchType, patch)); err != nil {
		s.t.Fatal(err)
	}
}

// waitConfigApplied waits until every instance reports variable = value.
func (s *stack) waitConfigApplied(key client.ObjectKey, variable, value string) {
	s.t.Helper()
	testenv.Eventually(s.t, 300*time.Second, variable+"="+value+" on every instance", func() error {
		for i := range 3 {
			var v string
			db := s.sqlDB(s.podAddr(fmt.Sprintf("%s-%d", key.Name, i)))
			if err := db.QueryRow("SHOW GLOBAL VARIABLES LIKE '"+variable+"'").Scan(new(string), &v); err != nil {
				return err
			}
			if !strings.EqualFold(v, value) {
				return fmt.Errorf("%s-%d: %s=%s", key.Name, i, variable, v)
			}
		}
		return nil
	})
}

// waitRolled waits until every pod of the cluster runs the StatefulSet's update revision
// with a new server, and the cluster is healthy again.
func (s *stack) waitRolled(key client.ObjectKey, cluster string, before map[string]server) {
	s.t.Helper()
	testenv.Eventually(s.t, 300*time.Second, "every instance restarted with the new template", func() error {
		var sts appsv1.StatefulSet
		if err := s.c.Get(s.ctx, key, &sts); err != nil {
			return err
		}
		for i := range 3 {
			n := fmt.Sprintf("%s-%d", cluster, i)
			var p corev1.Pod
			if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: n}, &p); err != nil {
				return err
			}
			if p.Labels[appsv1.ControllerRevisionHashLabelKey] != sts.Status.UpdateRevision {
				return fmt.Errorf("%s at revision %s, want %s", n, p.Labels[appsv1.ControllerRevisionHashLabelKey], sts.Status.UpdateRevision)
			}
			if len(p.Status.ContainerStatuses) == 0 || p.UID == before[n].uid && p.Status.ContainerStatuses[0].RestartCount == before[n].restarts {
				return fmt.Errorf("%s not restarted yet", n)
			}
		}
		return s.healthy(key)
	})
}

// healthy says why the cluster is not Ready with a healthy topology.
func (s *stack) healthy(key client.ObjectKey) error {
	var c dolphinv1.MySQLCluster
	if err := s.c.Get(s.ctx, key, &c); err != nil {
		return err
	}
	if c.Status.Topology == nil || c.Status.Topology.State != "Healthy" || c.Status.Phase != dolphinv1.PhaseRunning {
		return fmt.Errorf("phase %s topology %+v", c.Status.Phase, c.Status.Topology)
	}
	return nil
}
