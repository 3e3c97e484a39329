package clustermanager

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	mysqlcontroller "github.com/dolphin-operator/dolphin/internal/controller"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/metrics"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/testenv"
	"github.com/dolphin-operator/dolphin/internal/topology"
)

// loopback maps instance ordinals to real mariadbd servers on loopback addresses.
type loopback struct{ db *dbtest.Cluster }

func (l loopback) Member(c *dolphinv1.MySQLCluster, i int) topology.Member {
	in := l.db.Instances[i]
	return topology.Member{Name: resources.PodName(c, i), Host: in.Host, Port: in.Port}
}

// sqlResync is how often the test operator compares users and databases with the servers.
const sqlResync = 2 * time.Second

// operatorEnv is a real API server, the reconciler and the topology engines in one
// manager, and real MariaDB servers; pods are created by the test (no StatefulSet
// controller or kubelet runs in envtest).
type operatorEnv struct {
	ctx     context.Context
	c       client.WithWatch
	db      *dbtest.Cluster
	engines *Manager
	cluster *dolphinv1.MySQLCluster
	key     client.ObjectKey
	ns      string
}

// startOperator runs the operator for one 3-instance cluster named shop in namespace ns,
// reaching its instances through addresser (nil: straight to the loopback servers).
func startOperator(t *testing.T, ns string, failover dolphinv1.FailoverSpec, addresser func(loopback) Addresser) *operatorEnv {
	env := testenv.StartForTest(t)
	db := dbtest.Start(t, dbtest.Options{Instances: 3})
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = dolphinv1.AddToScheme(scheme)
	// The operator's restricted cache (only Dolphin's own Secrets, pods, claims …).
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: cache.Options{ByObject: mysqlcontroller.CacheByObject()}})
	if err != nil {
		t.Fatal(err)
	}
	var addr Addresser = loopback{db}
	if addresser != nil {
		addr = addresser(loopback{db})
	}
	engines := &Manager{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("dolphin-operator"), Addresser: addr, Log: testr.New(t)}
	if err := mgr.Add(engines); err != nil {
		t.Fatal(err)
	}
	r := &mysqlcontroller.MySQLClusterReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: scheme, Recorder: mgr.GetEventRecorder("dolphin-operator"), Topology: engines}
	if err := r.SetupWithManager(mgr, controller.Options{SkipNameValidation: ptr.To(true)}); err != nil {
		t.Fatal(err)
	}
	// Application users and databases, checked against the servers every 2 s.
	users := &mysqlcontroller.MySQLUserReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Recorder: mgr.GetEventRecorder("dolphin-operator"), SQL: engines, ResyncInterval: sqlResync}
	if err := users.SetupWithManager(mgr, controller.Options{SkipNameValidation: ptr.To(true)}); err != nil {
		t.Fatal(err)
	}
	dbs := &mysqlcontroller.MySQLDatabaseReconciler{Client: mgr.GetClient(),
		Recorder: mgr.GetEventRecorder("dolphin-operator"), SQL: engines, ResyncInterval: sqlResync}
	if err := dbs.SetupWithManager(mgr, controller.Options{SkipNameValidation: ptr.To(true)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	c, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	cluster := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shop"},
		Spec: dolphinv1.MySQLClusterSpec{Instances: 3, Failover: failover}}
	if err := c.Create(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	// Stand in for the StatefulSet controller and the kubelet: three ready pods.
	for i := 0; i < 3; i++ {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: resources.PodName(cluster, i), Labels: resources.CommonLabels(cluster)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "mysqld", Image: "mariadb"}}}}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		ready := client.MergeFrom(p.DeepCopy()) // the reporter may label the pod meanwhile
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		if err := c.Status().Patch(ctx, p, ready); err != nil {
			t.Fatal(err)
		}
	}
	return &operatorEnv{ctx: ctx, c: c, db: db, engines: engines, cluster: cluster, key: client.ObjectKeyFromObject(cluster), ns: ns}
}

// roleOf is the role label of a pod.
func (o *operatorEnv) roleOf(name string) string {
	var p corev1.Pod
	if err := o.c.Get(o.ctx, client.ObjectKey{Namespace: o.ns, Name: name}, &p); err != nil {
		return "error: " + err.Error()
	}
	return p.Labels[resources.RoleLabel]
}

// waitReady waits until the cluster is bootstrapped with shop-0 as primary, labeled and Ready.
func (o *operatorEnv) waitReady(t *testing.T) {
	t.Helper()
	c, cluster, key, roleOf := o.c, o.cluster, o.key, o.roleOf
	ctx := o.ctx
	testenv.Eventually(t, 60*time.Second, "bootstrapped, labeled and Ready", func() error {
		if err := c.Get(ctx, key, cluster); err != nil {
			return err
		}
		st := cluster.Status
		if st.Topology == nil || st.Topology.State != "Healthy" || st.Topology.Primary != "shop-0" {
			return fmt.Errorf("topology %+v", st.Topology)
		}
		if roleOf("shop-0") != "primary" || roleOf("shop-1") != "replica" || roleOf("shop-2") != "replica" {
			return fmt.Errorf("roles %s %s %s", roleOf("shop-0"), roleOf("shop-1"), roleOf("shop-2"))
		}
		if st.CurrentPrimary != "shop-0" || st.Phase != dolphinv1.PhaseRunning || !meta.IsStatusConditionTrue(st.Conditions, "Ready") {
			return fmt.Errorf("phase %s primary %q conditions %+v", st.Phase, st.CurrentPrimary, st.Conditions)
		}
		// What runs is recorded, whatever the image tag says.
		for _, in := range st.Topology.Instances {
			if !strings.Contains(in.Version, "MariaDB") {
				return fmt.Errorf("%s: version %q", in.Name, in.Version)
			}
		}
		return nil
	})
}

// TestEnvtestServerOperatorRunsTheTopology: bootstrap, a switchover by annotation, scaling
// down past the primary, a failover, deletion.
// primaryServiceSelects checks that the primary Service selects pod by name, with a selector
// only the topology reporter owns (the reconciler, running all along, must not take it back).
func primaryServiceSelects(ctx context.Context, c client.Client, ns, pod string) error {
	var svc corev1.Service
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shop-primary"}, &svc); err != nil {
		return err
	}
	if got, ok := resources.SelectsOnePod(svc.Spec.Selector); !ok || got != pod {
		return fmt.Errorf("primary Service selector %v, want pod %s by name", svc.Spec.Selector, pod)
	}
	for _, f := range svc.ManagedFields {
		if f.FieldsV1 != nil && strings.Contains(string(f.FieldsV1.Raw), `"f:selector"`) && f.Manager != resources.TopologyFieldManager {
			return fmt.Errorf("primary Service's selector is also owned by field manager %q", f.Manager)
		}
	}
	return nil
}

func TestEnvtestServerOperatorRunsTheTopology(t *testing.T) {
	o := startOperator(t, "topo", dolphinv1.FailoverSpec{
		Detection: dolphinv1.DetectionSpec{Interval: &metav1.Duration{Duration: 200 * time.Millisecond}, Attempts: 2}}, nil)
	o.waitReady(t)
	ctx, c, db, engines, cluster, key, ns, roleOf := o.ctx, o.c, o.db, o.engines, o.cluster, o.key, o.ns, o.roleOf

	// A planned switchover requested with the annotation.
	for _, to := range []string{"shop-2"} {
		if err := c.Get(ctx, key, cluster); err != nil {
			t.Fatal(err)
		}
		from := cluster.Status.Topology.Primary
		patch := client.MergeFrom(cluster.DeepCopy())
		cluster.Annotations = map[string]string{mysqlcontroller.SwitchoverAnnotation: to}
		if err := c.Patch(ctx, cluster, patch); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 60*time.Second, "switchover to "+to, func() error {
			if err := c.Get(ctx, key, cluster); err != nil {
				return err
			}
			lp := cluster.Status.Topology.LastPromotion
			if lp == nil || !lp.Planned || lp.From != from || lp.To != to || cluster.Status.Topology.State != "Healthy" {
				return fmt.Errorf("lastPromotion %+v state %s", lp, cluster.Status.Topology.State)
			}
			if roleOf(to) != "primary" || roleOf(from) != "replica" {
				return fmt.Errorf("roles %s=%q %s=%q", to, roleOf(to), from, roleOf(from))
			}
			if err := primaryServiceSelects(ctx, c, ns, to); err != nil {
				return err
			}
			if _, still := cluster.Annotations[mysqlcontroller.SwitchoverAnnotation]; still {
				return fmt.Errorf("annotation not removed")
			}
			if _, still := cluster.Annotations[mysqlcontroller.SwitchoverAcceptedAnnotation]; still {
				return fmt.Errorf("accepted annotation not removed")
			}
			if sw := cluster.Status.Topology.SwitchoverInProgress; sw != nil {
				return fmt.Errorf("switchoverInProgress %+v after the switchover", sw)
			}
			if cluster.Status.Topology.LastSwitchoverRequest == "" {
				return fmt.Errorf("status.topology.lastSwitchoverRequest not recorded")
			}
			return nil
		})
	}

	// An operator stopped between handing the request over and removing the accepted
	// annotation leaves it behind: found again, it must not start a second switchover.
	if err := c.Get(ctx, key, cluster); err != nil {
		t.Fatal(err)
	}
	done := cluster.Status.Topology.LastPromotion.DeepCopy()
	again := client.MergeFrom(cluster.DeepCopy())
	cluster.Annotations = map[string]string{mysqlcontroller.SwitchoverAcceptedAnnotation: cluster.Status.Topology.LastSwitchoverRequest + "/auto"}
	if err := c.Patch(ctx, cluster, again); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the accepted request found again is dropped", func() error {
		if err := c.Get(ctx, key, cluster); err != nil {
			return err
		}
		if _, still := cluster.Annotations[mysqlcontroller.SwitchoverAcceptedAnnotation]; still {
			return fmt.Errorf("accepted annotation still there")
		}
		return nil
	})
	time.Sleep(2 * time.Second) // a switchover, had it started, takes less
	if err := c.Get(ctx, key, cluster); err != nil {
		t.Fatal(err)
	}
	if t2 := cluster.Status.Topology; t2.Primary != done.To || !equality.Semantic.DeepEqual(t2.LastPromotion, done) || t2.SwitchoverInProgress != nil {
		t.Fatalf("a switchover request delivered twice was carried out again: primary %s, lastPromotion %+v (was %+v), pending %+v",
			t2.Primary, t2.LastPromotion, done, t2.SwitchoverInProgress)
	}

	// Scaling down past the primary (shop-2) first hands the primary role to shop-0.
	// A merge patch: the controller may be writing the object at the same moment.
	if err := c.Get(ctx, key, cluster); err != nil {
		t.Fatal(err)
	}
	scale := client.MergeFrom(cluster.DeepCopy())
	cluster.Spec.Instances = 2
	if err := c.Patch(ctx, cluster, scale); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "switchover to shop-0, then the StatefulSet scaled to 2", func() error {
		if err := c.Get(ctx, key, cluster); err != nil {
			return err
		}
		if p := cluster.Status.Topology.Primary; p != "shop-0" {
			return fmt.Errorf("primary %s", p)
		}
		var sts appsv1.StatefulSet
		if err := c.Get(ctx, key, &sts); err != nil {
			return err
		}
		if *sts.Spec.Replicas != 2 {
			return fmt.Errorf("StatefulSet replicas %d", *sts.Spec.Replicas)
		}
		return nil
	})
	// Stand in for the StatefulSet controller: shop-2 goes away.
	db.Instances[2].Stop(t)
	if err := c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shop-2"}}); err != nil {
		t.Fatal(err)
	}

	db.Instances[0].Kill(t)
	var newPrimary string
	testenv.Eventually(t, 60*time.Second, "failover recorded in status, labels and events", func() error {
		if err := c.Get(ctx, key, cluster); err != nil {
			return err
		}
		lp := cluster.Status.Topology.LastPromotion
		if lp == nil || lp.From != "shop-0" || lp.Planned || lp.Duration.Duration <= 0 {
			return fmt.Errorf("lastPromotion %+v", lp)
		}
		newPrimary = lp.To
		if roleOf(newPrimary) != "primary" {
			return fmt.Errorf("roles: %s=%q", newPrimary, roleOf(newPrimary))
		}
		if err := primaryServiceSelects(ctx, c, ns, newPrimary); err != nil {
			return err
		}
		// The replaced primary did not answer: its pod is deleted so that it restarts and
		// rejoins (this test's pods have no node, so the API server removes them at once).
		var old corev1.Pod
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "shop-0"}, &old); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod shop-0 of the replaced primary not deleted: %w", err)
		}
		if cluster.Status.CurrentPrimary != newPrimary {
			return fmt.Errorf("currentPrimary %q", cluster.Status.CurrentPrimary)
		}
		var evs eventsv1.EventList
		if err := c.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		reasons := map[string]bool{}
		for _, e := range evs.Items {
			if e.Regarding.Name == "shop" {
				reasons[e.Reason] = true
			}
		}
		if !reasons["Failover"] || !reasons["RestartedLostPrimary"] {
			return fmt.Errorf("events on the cluster: %v, want Failover and RestartedLostPrimary", reasons)
		}
		return nil
	})
	if n := testutil.ToFloat64(metrics.PromotionsTotal.WithLabelValues(ns, "shop", "failover")); n != 1 {
		t.Errorf("mysql_cluster_promotions_total{kind=failover} = %v, want 1", n)
	}
	t.Logf("failed over to %s in %s", newPrimary, cluster.Status.Topology.LastPromotion.Duration.Duration)

	// Deleting the cluster stops its engine before the finalizer is removed.
	if err := c.Delete(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "cluster deleted and engine stopped", func() error {
		if err := c.Get(ctx, key, &dolphinv1.MySQLCluster{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there: %w", err)
		}
		if n := engines.Running(); n != 0 {
			return fmt.Errorf("%d engines still running", n)
		}
		return nil
	})
}
