package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/binlog"
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

// recloneFixture is a 3-instance cluster whose pods run and whose engine record shows db-2
// errant (position 0-1002-12 beyond the primary's 0-1000-10); replaced names former primaries.
func recloneFixture(t *testing.T, fake *fakeAgent, replaced ...string) (client.Client, types.NamespacedName, *MySQLClusterReconciler) {
	t.Helper()
	ctx := context.Background()
	c := directClient(t, nil)
	ns := newNamespace(t)
	key := createCluster(t, c, ns, "db", dolphinv1.MySQLClusterSpec{Instances: 3})
	cl := getCluster(t, c, key)
	r := &MySQLClusterReconciler{Client: c, Scheme: envScheme, Agents: fake, RecloneConfirmation: 300 * time.Millisecond}
	for i, name := range []string{"db-0", "db-1", "db-2"} {
		labels := resources.CommonLabels(cl)
		if name == "db-0" {
			labels[resources.RoleLabel] = string(dolphinv1.RolePrimary)
		}
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "mysqld", Image: "mariadb"}}}}
		mustCreate(t, c, p)
		p.Status.PodIP = "10.0.0." + string(rune('1'+i))
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: resources.ContainerMySQLD, Ready: true}, {Name: resources.ContainerAgent, Ready: true}}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		if err := c.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	cl.Status.Topology = &dolphinv1.TopologyStatus{Primary: "db-0", ErrantInstances: []string{"db-2"}, ReplacedPrimaries: replaced,
		Instances: []dolphinv1.InstanceTopology{
			{Name: "db-0", Reachable: true, GTIDExecuted: "0-1000-10"},
			{Name: "db-1", Reachable: true, Replicating: true, ReplicationLagSeconds: new(int64), GTIDExecuted: "0-1000-10"},
			{Name: "db-2", Reachable: true, GTIDExecuted: "0-1002-12"}}}
	if err := c.Status().Update(ctx, cl); err != nil {
		t.Fatal(err)
	}
	return c, key, r
}

// reconcileTwice runs the re-clone's confirmation: one reconcile, a pause past it, another.
func reconcileTwice(t *testing.T, r *MySQLClusterReconciler, key types.NamespacedName) {
	t.Helper()
	ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
}

// TestEnvtestRecloneErrantReplica: an errant replica's agent first keeps a copy of what it
// holds beyond the primary (measured against the primary's GTID state), the copy is recorded
// in status.keptTransactions, then the instance is marked for re-seeding through its agent,
// recorded in status.lastReclone with what is discarded and the copy's name, and its pod
// deleted (the StatefulSet re-creates it and its seed container clones a healthy peer).
func TestEnvtestRecloneErrantReplica(t *testing.T) {
	needEnvtest(t)
	ctx := context.Background()
	first, last := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC), time.Date(2026, 12, 5, 1, 0, 9, 0, time.UTC)
	fake := &fakeAgent{keepResp: &agent.KeepResponse{Location: "file:///var/lib/mysql/dolphin-kept-x.binlog.zst",
		Copy: binlog.KeptCopy{GTIDs: "0-1002-11..12", Transactions: 2, FirstCommit: first, LastCommit: last, Created: last}}}
	c, key, r := recloneFixture(t, fake)
	// One observation is not enough: the first reconcile only starts the confirmation.
	if _, err := r.Reconcile(ctrl.LoggerInto(ctx, ctrl.Log), ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	if len(fake.reseeds) != 0 || len(fake.keeps) != 0 {
		t.Fatalf("re-cloned on the first errant observation: %q", fake.reseeds)
	}
	time.Sleep(400 * time.Millisecond)
	if _, err := r.Reconcile(ctrl.LoggerInto(ctx, ctrl.Log), ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	if len(fake.keeps) != 1 || fake.keeps[0].Instance != "db-2" || fake.keeps[0].Primary != "db-0" || fake.keeps[0].PrimaryState != "0-1000-10" {
		t.Fatalf("keep requests %+v: want one for db-2 against db-0's state", fake.keeps)
	}
	if len(fake.reseeds) != 1 || !strings.Contains(fake.reseeds[0], "errant") || !strings.Contains(fake.reseeds[0], "0-1002-12") ||
		!strings.Contains(fake.reseeds[0], "after keeping a copy of the 2 transactions") {
		t.Fatalf("reseed requests %q", fake.reseeds)
	}
	// The mark names the copy, so that the seed container makes it again with the server
	// stopped (restore.KeepAgain).
	if k := fake.reseedKeeps[0]; k == nil || k.Name != fake.keeps[0].Name || k.PrimaryState != "0-1000-10" || k.GTIDs != "0-1002-11..12" || k.Primary != "db-0" {
		t.Fatalf("reseed names the copy %+v", k)
	}
	cl := getCluster(t, c, key)
	if lr := cl.Status.LastReclone; lr == nil || lr.Instance != "db-2" || !strings.Contains(lr.Discarded, "0-1002-12 beyond the primary's 0-1000-10") ||
		lr.Kept != fake.keeps[0].Name {
		t.Fatalf("status.lastReclone %+v", cl.Status.LastReclone)
	}
	if k := cl.Status.KeptTransactions; len(k) != 1 || k[0].Name != fake.keeps[0].Name || k[0].GTIDs != "0-1002-11..12" || k[0].Transactions != 2 ||
		k[0].Location != fake.keepResp.Location || k[0].FirstCommit == nil || !k[0].FirstCommit.Time.Equal(first) {
		t.Fatalf("status.keptTransactions %+v", cl.Status.KeptTransactions)
	}
	var p corev1.Pod
	if err := c.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: "db-2"}, &p); !apierrors.IsNotFound(err) {
		t.Fatalf("the errant instance's pod was not deleted: %v", err)
	}
	for _, name := range []string{"db-0", "db-1"} {
		if err := c.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: name}, &p); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// TestEnvtestRecloneWaitsWithoutACopy: when no copy can be kept (the instance's binary logs
// that held what the primary lacks are purged), nothing is discarded: the pod stays, Ready
// says why (RecloneWaits) and names the annotation; with the annotation the re-clone goes
// ahead without a copy, and the annotation is removed.
func TestEnvtestRecloneWaitsWithoutACopy(t *testing.T) {
	needEnvtest(t)
	ctx := context.Background()
	fake := &fakeAgent{keepErr: fmt.Errorf("agent: %w: the oldest starts after 0-1002-11", binlog.ErrBinlogsPurged)}
	c, key, r := recloneFixture(t, fake)
	reconcileTwice(t, r, key)
	if len(fake.keeps) == 0 || len(fake.reseeds) != 0 {
		t.Fatalf("keeps %d, reseeds %q: want a copy tried and nothing discarded", len(fake.keeps), fake.reseeds)
	}
	var p corev1.Pod
	if err := c.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: "db-2"}, &p); err != nil || p.DeletionTimestamp != nil {
		t.Fatalf("db-2's pod: %v %v", err, p.DeletionTimestamp)
	}
	cl := getCluster(t, c, key)
	ready := meta.FindStatusCondition(cl.Status.Conditions, dolphinv1.ConditionReady)
	if ready == nil || ready.Reason != "RecloneWaits" || !strings.Contains(ready.Message, "purged") ||
		!strings.Contains(ready.Message, RecloneApprovedAnnotation+"=db-2") {
		t.Fatalf("Ready %+v: want RecloneWaits naming the purge and the annotation", ready)
	}
	cl.Annotations = map[string]string{RecloneApprovedAnnotation: "db-2"}
	if err := c.Update(ctx, cl); err != nil {
		t.Fatal(err)
	}
	reconcileTwice(t, r, key)
	if len(fake.reseeds) != 1 || !strings.Contains(fake.reseeds[0], "without a copy") {
		t.Fatalf("reseeds %q: want one without a copy, as consented", fake.reseeds)
	}
	cl = getCluster(t, c, key)
	if _, ok := cl.Annotations[RecloneApprovedAnnotation]; ok || len(cl.Status.KeptTransactions) != 0 {
		t.Fatalf("annotations %v, kept %+v: want the consent used up and no copy recorded", cl.Annotations, cl.Status.KeptTransactions)
	}
}

// TestEnvtestRecloneFormerPrimaryAfterCopy: spec.failover.errantFormerPrimary
// RecloneAfterCopy lets Dolphin re-clone an errant former primary without the annotation,
// only once a copy is kept; Hold (the default) never does.
func TestEnvtestRecloneFormerPrimaryAfterCopy(t *testing.T) {
	needEnvtest(t)
	ctx := context.Background()
	fake := &fakeAgent{keepResp: &agent.KeepResponse{Location: "file:///x", Copy: binlog.KeptCopy{GTIDs: "0-1002-11..12", Transactions: 2}}}
	c, key, r := recloneFixture(t, fake, "db-2")
	reconcileTwice(t, r, key)
	if len(fake.keeps) != 0 || len(fake.reseeds) != 0 {
		t.Fatalf("a held former primary: keeps %d, reseeds %q", len(fake.keeps), fake.reseeds)
	}
	cl := getCluster(t, c, key)
	cl.Spec.Failover.ErrantFormerPrimary = dolphinv1.ErrantFormerPrimaryRecloneAfterCopy
	if err := c.Update(ctx, cl); err != nil {
		t.Fatal(err)
	}
	reconcileTwice(t, r, key)
	if len(fake.keeps) != 1 || len(fake.reseeds) != 1 || !strings.Contains(fake.reseeds[0], "after keeping a copy") {
		t.Fatalf("keeps %d, reseeds %q: want the copy, then the re-clone", len(fake.keeps), fake.reseeds)
	}
}
