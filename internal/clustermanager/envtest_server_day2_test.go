package clustermanager

import (
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	mysqlcontroller "github.com/dolphin-operator/dolphin/internal/controller"
	"github.com/dolphin-operator/dolphin/internal/metrics"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/testenv"
	"github.com/dolphin-operator/dolphin/internal/topology"
)

// unreachableFor makes one instance look unreachable (no address) until a deadline.
type unreachableFor struct {
	loopback
	ordinal int
	mu      sync.Mutex
	until   time.Time
}

func (u *unreachableFor) Member(c *dolphinv1.MySQLCluster, i int) topology.Member {
	m := u.loopback.Member(c, i)
	u.mu.Lock()
	defer u.mu.Unlock()
	if i == u.ordinal && time.Now().Before(u.until) {
		m.Host = ""
	}
	return m
}

func (u *unreachableFor) drop(d time.Duration) {
	u.mu.Lock()
	u.until = time.Now().Add(d)
	u.mu.Unlock()
}

// labelWatch records every moment the primary pod was seen without the primary label.
type labelWatch struct {
	lost   atomic.Int32
	events atomic.Int32
	stop   func()
}

func watchPrimaryLabel(t *testing.T, o *operatorEnv, pod string) *labelWatch {
	t.Helper()
	w, err := o.c.Watch(o.ctx, &corev1.PodList{}, client.InNamespace(o.ns))
	if err != nil {
		t.Fatal(err)
	}
	lw := &labelWatch{stop: w.Stop}
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || p.Name != pod {
				continue
			}
			lw.events.Add(1)
			if ev.Type == watch.Deleted || p.Labels[resources.RoleLabel] != "primary" {
				lw.lost.Add(1)
				t.Logf("primary pod %s seen without the primary label: %s %v", pod, ev.Type, p.Labels)
			}
		}
	}()
	t.Cleanup(w.Stop)
	return lw
}

// TestEnvtestServerDay2: the primary's label survives detection.attempts-1 missed
// observations, and rotating each password of the credentials Secret is applied to every
// instance without the primary ever losing its label or an application write failing;
// normal operation counts no reconcile error.
func TestEnvtestServerDay2(t *testing.T) {
	var flaky *unreachableFor
	interval, attempts := 500*time.Millisecond, int32(5)
	o := startOperator(t, "day2", dolphinv1.FailoverSpec{Detection: dolphinv1.DetectionSpec{Interval: &metav1.Duration{Duration: interval}, Attempts: attempts}},
		func(l loopback) Addresser { flaky = &unreachableFor{loopback: l}; return flaky })
	errorsBefore := testutil.ToFloat64(metrics.ReconcileTotal.WithLabelValues(metrics.ResultError))
	o.waitReady(t)
	if h := testutil.ToFloat64(metrics.ClusterHealth.WithLabelValues(o.ns, "shop")); h != 1 {
		t.Errorf("mysql_cluster_health_status = %v for a Ready cluster, want 1", h)
	}
	lw := watchPrimaryLabel(t, o, "shop-0")

	// Misses below detection.attempts: a primary that missed a probe is probed every half
	// interval, and misses count at most once per 0.9 × interval/2, so a window of
	// (attempts-2) × 0.9 × interval/2 holds at most attempts-1 of them however slowly the
	// machine runs.
	window := time.Duration(attempts-2) * interval / 2 * 9 / 10
	var states sync.Map
	stopStates := watchTopologyStates(t, o, &states)
	flaky.drop(window)
	time.Sleep(window + 3*interval)
	stopStates()
	if _, ok := states.Load(string(topology.StatePrimarySuspect)); !ok {
		t.Fatalf("the dropped observations were never seen (states %v): the test proves nothing", keys(&states))
	}
	if err := o.c.Get(o.ctx, o.key, o.cluster); err != nil {
		t.Fatal(err)
	}
	if lp := o.cluster.Status.Topology.LastPromotion; lp != nil || o.cluster.Status.Topology.Primary != "shop-0" {
		t.Fatalf("missed observations below detection.attempts changed the primary: %+v", lp)
	}

	// An application account and a writer straight to the primary (envtest has no Service).
	secret := func() *corev1.Secret {
		var s corev1.Secret
		if err := o.c.Get(o.ctx, client.ObjectKey{Namespace: o.ns, Name: "shop-credentials"}, &s); err != nil {
			t.Fatal(err)
		}
		return &s
	}
	o.declareAppAccount(t)
	app, err := sql.Open("mysql", fmt.Sprintf("%s:%s@tcp(%s)/?timeout=2s&readTimeout=10s", appUser, appPassword, o.db.Instances[0].Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	var acked, failed atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for id := 1; ; id++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := app.Exec("INSERT INTO app.rows VALUES (?)", id); err != nil {
				failed.Add(1)
			} else {
				acked.Add(1)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-done
	}()

	for _, k := range []string{resources.OperatorPasswordKey, resources.ReplicationPasswordKey, resources.MonitorPasswordKey} {
		s := secret()
		patch := client.MergeFrom(s.DeepCopy())
		s.Data[k] = []byte("Rotated-" + k + "-" + resources.NewPassword())
		if err := o.c.Patch(o.ctx, s, patch); err != nil {
			t.Fatal(err)
		}
		gen := resources.CredentialsGeneration(s.Data)
		testenv.Eventually(t, 60*time.Second, "rotation of "+k+" applied", func() error {
			if err := o.c.Get(o.ctx, o.key, o.cluster); err != nil {
				return err
			}
			st := o.cluster.Status
			if st.Topology == nil || st.Topology.CredentialsGeneration != gen {
				return fmt.Errorf("engine not on generation %s yet: %+v", gen, st.Topology)
			}
			for _, in := range st.Topology.Instances {
				if in.CredentialsGeneration != gen || (in.Name != "shop-0" && in.ReplicationCredentialsGeneration != gen) {
					return fmt.Errorf("%s at %s/%s", in.Name, in.CredentialsGeneration, in.ReplicationCredentialsGeneration)
				}
			}
			if c := meta.FindStatusCondition(st.Conditions, mysqlcontroller.ConditionCredentialsApplied); c == nil || c.Status != metav1.ConditionTrue {
				return fmt.Errorf("condition %s: %+v", mysqlcontroller.ConditionCredentialsApplied, c)
			}
			if !meta.IsStatusConditionTrue(st.Conditions, dolphinv1.ConditionReady) || st.CurrentPrimary != "shop-0" {
				return fmt.Errorf("not Ready on shop-0: %s %+v", st.CurrentPrimary, st.Conditions)
			}
			return nil
		})
	}
	testenv.Eventually(t, 30*time.Second, "history pruned to the current generation", func() error {
		var h corev1.Secret
		if err := o.c.Get(o.ctx, client.ObjectKey{Namespace: o.ns, Name: "shop-credentials-history"}, &h); err != nil {
			return err
		}
		if gens := resources.ReadCredentialHistory(&h).Generations; len(gens) != 1 || gens[0] != resources.CredentialsGeneration(secret().Data) {
			return fmt.Errorf("history holds %v", gens)
		}
		return nil
	})
	close(stop)
	<-done
	if failed.Load() > 0 || acked.Load() == 0 {
		t.Errorf("application writes during the rotations: %d acknowledged, %d failed", acked.Load(), failed.Load())
	}
	if lw.events.Load() == 0 {
		t.Fatal("the label watch saw no event for shop-0: it proves nothing")
	}
	if n := lw.lost.Load(); n > 0 {
		t.Errorf("the primary pod lost its label %d times (the primary Service would have had no endpoint)", n)
	}
	if d := testutil.ToFloat64(metrics.ReconcileTotal.WithLabelValues(metrics.ResultError)) - errorsBefore; d != 0 {
		t.Errorf("%v reconcile errors during normal operation, want 0", d)
	}
	t.Logf("3 rotations under an application writer: %d writes acknowledged, %d failed; primary label removed %d times", acked.Load(), failed.Load(), lw.lost.Load())
}

// watchTopologyStates records every status.topology.state the cluster goes through.
func watchTopologyStates(t *testing.T, o *operatorEnv, states *sync.Map) func() {
	t.Helper()
	w, err := o.c.Watch(o.ctx, &dolphinv1.MySQLClusterList{}, client.InNamespace(o.ns))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if c, ok := ev.Object.(*dolphinv1.MySQLCluster); ok && c.Status.Topology != nil {
				states.Store(c.Status.Topology.State, true)
			}
		}
	}()
	return func() { w.Stop(); <-done }
}

func keys(m *sync.Map) []string {
	var out []string
	m.Range(func(k, _ any) bool { out = append(out, k.(string)); return true })
	return out
}
