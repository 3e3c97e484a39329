package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// TestEnvtestSeedInstructions: instances waiting in their seed container are told to start
// empty in a new cluster, and to clone a healthy replica once the cluster holds data.
func TestEnvtestSeedInstructions(t *testing.T) {
	needEnvtest(t)
	ctx := context.Background()
	c := directClient(t, nil)
	ns := newNamespace(t)
	key := createCluster(t, c, ns, "db", dolphinv1.MySQLClusterSpec{Instances: 3})
	cl := getCluster(t, c, key)
	fake := &fakeAgent{}
	r := &MySQLClusterReconciler{Client: c, Scheme: envScheme, Agents: fake}
	reconcile := func() {
		t.Helper()
		res, err := r.Reconcile(ctrl.LoggerInto(ctx, ctrl.Log), ctrl.Request{NamespacedName: key})
		if err != nil {
			t.Fatal(err)
		}
		if res.RequeueAfter == 0 || res.RequeueAfter > seedRetryInterval {
			t.Fatalf("requeue after %s while an instance waits to be seeded, want ≤ %s", res.RequeueAfter, seedRetryInterval)
		}
	}
	mkPod := func(name, ip string, seeding bool) {
		t.Helper()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: resources.CommonLabels(cl)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "mysqld", Image: "mariadb"}}}}
		mustCreate(t, c, p)
		p.Status.PodIP = ip
		if seeding {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: resources.ContainerSeed,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
		} else {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: resources.ContainerMySQLD, Ready: true}, {Name: resources.ContainerAgent, Ready: true}}
		}
		if err := c.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	// A new cluster: every instance starts empty.
	mkPod("db-0", "10.0.0.10", true)
	mkPod("db-1", "10.0.0.11", true)
	reconcile()
	if len(fake.seeds) != 2 || fake.seeds[0].Mode != agent.SeedModeEmpty || fake.seeds[1].Mode != agent.SeedModeEmpty {
		t.Fatalf("seed instructions %+v, want empty for both", fake.seeds)
	}
	// The cluster now holds data; a new instance clones the healthy replica.
	for _, name := range []string{"db-0", "db-1"} {
		if err := c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	mkPod("db-0", "10.0.0.10", false)
	mkPod("db-1", "10.0.0.11", false)
	cl = getCluster(t, c, key)
	cl.Status.Topology = &dolphinv1.TopologyStatus{Primary: "db-0", Instances: []dolphinv1.InstanceTopology{
		{Name: "db-0", Reachable: true}, {Name: "db-1", Reachable: true, Replicating: true, ReplicationLagSeconds: new(int64)}}}
	if err := c.Status().Update(ctx, cl); err != nil {
		t.Fatal(err)
	}
	mkPod("db-2", "10.0.0.12", true)
	fake.seeds = nil
	reconcile()
	if len(fake.seeds) != 1 {
		t.Fatalf("seed instructions %+v, want one for db-2", fake.seeds)
	}
	got := fake.seeds[0]
	if got.Mode != agent.SeedModeClone || got.Clone == nil || got.Clone.URL != "https://10.0.0.11:9443" ||
		got.Clone.ServerName != agent.AgentServerName("db", ns) || got.SourceDB.User != resources.OperatorUser || got.SourceDB.Password == "" {
		t.Fatalf("instruction %+v (clone %+v), want a clone of db-1 as the operator", got, got.Clone)
	}
}

// TestEnvtestRecloneErrantReplica: an errant replica is marked for re-seeding through its
// agent, recorded in status.lastReclone with what is discarded, and its pod deleted (the
// StatefulSet re-creates it, and its seed container clones a peer).
func TestEnvtestRecloneErrantReplica(t *testing.T) {
	needEnvtest(t)
	ctx := context.Background()
	c := directClient(t, nil)
	ns := newNamespace(t)
	key := createCluster(t, c, ns, "db", dolphinv1.MySQLClusterSpec{Instances: 3})
	cl := getCluster(t, c, key)
	fake := &fakeAgent{}
	r := &MySQLClusterReconciler{Client: c, Scheme: envScheme, Agents: fake, RecloneConfirmation: 300 * time.Millisecond}
	for i, name := range []string{"db-0", "db-1", "db-2"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: resources.CommonLabels(cl)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "mysqld", Image: "mariadb"}}}}
		mustCreate(t, c, p)
		p.Status.PodIP = "10.0.0." + string(rune('1'+i))
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: resources.ContainerMySQLD, Ready: true}, {Name: resources.ContainerAgent, Ready: true}}
		if err := c.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	cl.Status.Topology = &dolphinv1.TopologyStatus{Primary: "db-0", ErrantInstances: []string{"db-2"}, Instances: []dolphinv1.InstanceTopology{
		{Name: "db-0", Reachable: true, GTIDExecuted: "0-1000-10"},
		{Name: "db-1", Reachable: true, Replicating: true, ReplicationLagSeconds: new(int64), GTIDExecuted: "0-1000-10"},
		{Name: "db-2", Reachable: true, GTIDExecuted: "0-1002-12"}}}
	if err := c.Status().Update(ctx, cl); err != nil {
		t.Fatal(err)
	}
	// One observation is not enough: the first reconcile only starts the confirmation.
	if _, err := r.Reconcile(ctrl.LoggerInto(ctx, ctrl.Log), ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	if len(fake.reseeds) != 0 {
		t.Fatalf("re-cloned on the first errant observation: %q", fake.reseeds)
	}
	time.Sleep(400 * time.Millisecond)
	if _, err := r.Reconcile(ctrl.LoggerInto(ctx, ctrl.Log), ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	if len(fake.reseeds) != 1 || !strings.Contains(fake.reseeds[0], "errant") || !strings.Contains(fake.reseeds[0], "0-1002-12") {
		t.Fatalf("reseed requests %q", fake.reseeds)
	}
	cl = getCluster(t, c, key)
	if lr := cl.Status.LastReclone; lr == nil || lr.Instance != "db-2" || !strings.Contains(lr.Discarded, "0-1002-12 beyond the primary's 0-1000-10") {
		t.Fatalf("status.lastReclone %+v", cl.Status.LastReclone)
	}
	var p corev1.Pod
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "db-2"}, &p); !apierrors.IsNotFound(err) {
		t.Fatalf("the errant instance's pod was not deleted: %v", err)
	}
	for _, name := range []string{"db-0", "db-1"} {
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &p); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}
