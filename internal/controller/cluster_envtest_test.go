package controller

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/metrics"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// createCluster creates a MySQLCluster with the given spec and returns its key.
func createCluster(t *testing.T, c client.Client, ns, name string, spec dolphinv1.MySQLClusterSpec) types.NamespacedName {
	t.Helper()
	obj := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	if err := c.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating MySQLCluster: %v", err)
	}
	return client.ObjectKeyFromObject(obj)
}

func getCluster(t *testing.T, c client.Client, key types.NamespacedName) *dolphinv1.MySQLCluster {
	t.Helper()
	var obj dolphinv1.MySQLCluster
	if err := c.Get(context.Background(), key, &obj); err != nil {
		t.Fatalf("reading MySQLCluster: %v", err)
	}
	return &obj
}

// children returns every object the reconciler should own for a cluster.
func children(key types.NamespacedName) map[string]client.Object {
	cl := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Name: key.Name}}
	n := resources.NamesFor(cl)
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: key.Namespace, Name: name} }
	return map[string]client.Object{
		"Secret/" + n.GeneratedSecret:                  &corev1.Secret{ObjectMeta: meta(n.GeneratedSecret)},
		"Secret/" + resources.AgentSecretName(cl):      &corev1.Secret{ObjectMeta: meta(resources.AgentSecretName(cl))},
		"Secret/" + resources.MetricsSecretName(cl):    &corev1.Secret{ObjectMeta: meta(resources.MetricsSecretName(cl))},
		"ConfigMap/" + n.ConfigMap:                     &corev1.ConfigMap{ObjectMeta: meta(n.ConfigMap)},
		"ServiceAccount/" + n.ServiceAccount:           &corev1.ServiceAccount{ObjectMeta: meta(n.ServiceAccount)},
		"Service/" + n.HeadlessService:                 &corev1.Service{ObjectMeta: meta(n.HeadlessService)},
		"Service/" + n.PrimaryService:                  &corev1.Service{ObjectMeta: meta(n.PrimaryService)},
		"Service/" + n.ReplicaService:                  &corev1.Service{ObjectMeta: meta(n.ReplicaService)},
		"StatefulSet/" + n.StatefulSet:                 &appsv1.StatefulSet{ObjectMeta: meta(n.StatefulSet)},
		"PodDisruptionBudget/" + n.PodDisruptionBudget: &policyv1.PodDisruptionBudget{ObjectMeta: meta(n.PodDisruptionBudget)},
	}
}

// resourceVersions reads the cluster and every child and returns their resourceVersions.
func resourceVersions(t *testing.T, c client.Client, key types.NamespacedName) map[string]string {
	t.Helper()
	out := map[string]string{"MySQLCluster": getCluster(t, c, key).ResourceVersion}
	for name, obj := range children(key) {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Fatalf("reading %s: %v", name, err)
		}
		out[name] = obj.GetResourceVersion()
	}
	return out
}

func TestEnvtestCreateProducesChildrenAndStatus(t *testing.T) {
	needEnvtest(t)
	c := directClient(t, nil)
	key := createCluster(t, c, newNamespace(t), "orders", dolphinv1.MySQLClusterSpec{})
	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	cluster := getCluster(t, c, key)
	for name, obj := range children(key) {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		owner := metav1.GetControllerOf(obj)
		if owner == nil || owner.UID != cluster.UID || owner.Kind != "MySQLCluster" {
			t.Errorf("%s: controller owner %+v, want the MySQLCluster", name, owner)
		}
		if obj.GetLabels()[resources.LabelManagedBy] != "dolphin" {
			t.Errorf("%s: labels %v", name, obj.GetLabels())
		}
	}
	if !controllerutil.ContainsFinalizer(cluster, Finalizer) {
		t.Errorf("finalizer missing: %v", cluster.Finalizers)
	}
	st := cluster.Status
	if st.Phase != dolphinv1.PhasePending || st.ObservedGeneration != cluster.Generation {
		t.Errorf("status phase %q observedGeneration %d (generation %d)", st.Phase, st.ObservedGeneration, cluster.Generation)
	}
	for _, typ := range []string{"Ready", "Available", "Progressing", "Degraded"} {
		if meta.FindStatusCondition(st.Conditions, typ) == nil {
			t.Errorf("condition %s missing: %+v", typ, st.Conditions)
		}
	}
	if !meta.IsStatusConditionTrue(st.Conditions, "Progressing") || meta.IsStatusConditionTrue(st.Conditions, "Ready") {
		t.Errorf("a new cluster must be Progressing and not Ready: %+v", st.Conditions)
	}
}

func TestEnvtestSecondReconcileWritesNothing(t *testing.T) {
	needEnvtest(t)
	plain := directClient(t, nil)
	key := createCluster(t, plain, newNamespace(t), "quiet", dolphinv1.MySQLClusterSpec{
		Instances:   3,
		MySQLConfig: map[string]dolphinv1.MySQLConfigValue{"max_connections": "300"},
		Resources:   corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")}},
	})
	var first writeCounter
	if err := reconcileOnce(t, directClient(t, &first), key); err != nil {
		t.Fatal(err)
	}
	if first.n.Load() < 9 {
		t.Fatalf("first reconcile made %d writes; expected at least finalizer + 8 children + status", first.n.Load())
	}
	before := resourceVersions(t, plain, key)
	var second writeCounter
	for i := 0; i < 2; i++ {
		if err := reconcileOnce(t, directClient(t, &second), key); err != nil {
			t.Fatal(err)
		}
	}
	if n := second.n.Load(); n != 0 {
		t.Errorf("reconciles without a change made %d write requests, want 0", n)
	}
	after := resourceVersions(t, plain, key)
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s changed resourceVersion %s -> %s without a spec change", k, v, after[k])
		}
	}
}

func TestEnvtestSpecChangesUpdateStatefulSet(t *testing.T) {
	needEnvtest(t)
	c := directClient(t, nil)
	ctx := context.Background()
	key := createCluster(t, c, newNamespace(t), "grow", dolphinv1.MySQLClusterSpec{})
	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatal(err)
	}
	var sts appsv1.StatefulSet
	if err := c.Get(ctx, key, &sts); err != nil {
		t.Fatal(err)
	}
	hashBefore := sts.Spec.Template.Annotations[resources.ConfigHashAnnotation]

	cluster := getCluster(t, c, key)
	cluster.Spec.Instances = 5
	cluster.Spec.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
	}
	cluster.Spec.MySQLConfig = map[string]dolphinv1.MySQLConfigValue{"innodb_buffer_pool_size": "256M"}
	if err := c.Update(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key, &sts); err != nil {
		t.Fatal(err)
	}
	if *sts.Spec.Replicas != 5 {
		t.Errorf("StatefulSet replicas %d, want 5", *sts.Spec.Replicas)
	}
	res := sts.Spec.Template.Spec.Containers[0].Resources
	if res.Requests.Cpu().String() != "250m" || res.Limits.Memory().String() != "1Gi" {
		t.Errorf("container resources not updated: %+v", res)
	}
	if sts.Spec.Template.Annotations[resources.ConfigHashAnnotation] == hashBefore {
		t.Error("a mysqlConfig change must change the pod template's config hash (to restart the instances)")
	}
	var cm corev1.ConfigMap
	if err := c.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: "grow-config"}, &cm); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cm.Data[resources.MyCnfKey], "innodb_buffer_pool_size=256M") {
		t.Errorf("my.cnf not updated:\n%s", cm.Data[resources.MyCnfKey])
	}

	// Scale back down: the StatefulSet follows, and nothing else is written twice.
	cluster = getCluster(t, c, key)
	cluster.Spec.Instances = 3
	if err := c.Update(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key, &sts); err != nil || *sts.Spec.Replicas != 3 {
		t.Errorf("StatefulSet replicas after scale-down: %v %v", sts.Spec.Replicas, err)
	}
}

func TestEnvtestDeletionRunsFinalizer(t *testing.T) {
	needEnvtest(t)
	c := directClient(t, nil)
	ctx := context.Background()
	key := createCluster(t, c, newNamespace(t), "doomed", dolphinv1.MySQLClusterSpec{})
	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, getCluster(t, c, key)); err != nil {
		t.Fatal(err)
	}
	// The finalizer holds the object back until the reconciler has run.
	if cl := getCluster(t, c, key); cl.DeletionTimestamp.IsZero() {
		t.Fatal("cluster deleted without waiting for the finalizer")
	}
	var phases []dolphinv1.Phase
	recording := interceptorRecordingPhases(directClient(t, nil), &phases)
	if err := reconcileOnce(t, recording, key); err != nil {
		t.Fatal(err)
	}
	if len(phases) == 0 || phases[len(phases)-1] != dolphinv1.PhaseDeleting {
		t.Errorf("finalizer path did not report phase Deleting; status writes: %v", phases)
	}
	if err := c.Get(ctx, key, &dolphinv1.MySQLCluster{}); !apierrors.IsNotFound(err) {
		t.Errorf("cluster still present after the finalizer ran: %v", err)
	}
	if metrics.ClusterHealth.DeleteLabelValues(key.Namespace, key.Name) {
		t.Error("the cluster's health series outlived the cluster")
	}
}

func TestEnvtestStatusFollowsPods(t *testing.T) {
	needEnvtest(t)
	c := directClient(t, nil)
	ctx := context.Background()
	key := createCluster(t, c, newNamespace(t), "solo", dolphinv1.MySQLClusterSpec{Instances: 1})
	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatal(err)
	}
	cluster := getCluster(t, c, key)
	// Stand in for the kubelet and the topology engine: a ready pod labeled primary.
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: "solo-0",
			Labels: map[string]string{resources.RoleLabel: "primary"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "mysqld", Image: "mariadb"}}},
	}
	for k, v := range resources.CommonLabels(cluster) {
		p.Labels[k] = v
	}
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if err := c.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatal(err)
	}
	st := getCluster(t, c, key).Status
	if st.CurrentPrimary != "solo-0" || st.ReadyInstances != 1 || !meta.IsStatusConditionTrue(st.Conditions, "Available") {
		t.Errorf("status does not follow the ready primary pod: %+v", st)
	}
	if len(st.Instances) != 1 || st.Instances[0] != (dolphinv1.InstanceStatus{Name: "solo-0", Role: "primary", Ready: true}) {
		t.Errorf("instances %+v", st.Instances)
	}
}
