package controller

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/metrics"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// TestEnvtestFailingStepKeepsReadyFalse: a step that fails makes a Ready cluster not Ready,
// with the step's error in the condition, keeps it Progressing, does not advance
// observedGeneration and counts as result="error"; the next successful reconcile recovers.
func TestEnvtestFailingStepKeepsReadyFalse(t *testing.T) {
	needEnvtest(t)
	ctx := context.Background()
	c := directClient(t, nil)
	ns := newNamespace(t)
	key := createCluster(t, c, ns, "steps", dolphinv1.MySQLClusterSpec{Instances: 1})
	// Stand in for the StatefulSet controller and the engine: a ready pod labeled primary.
	cluster := getCluster(t, c, key)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "steps-0",
		Labels: map[string]string{resources.RoleLabel: "primary"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "mysqld", Image: "mariadb"}}}}
	for k, v := range resources.CommonLabels(cluster) {
		pod.Labels[k] = v
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	ready := client.MergeFrom(pod.DeepCopy())
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if err := c.Status().Patch(ctx, pod, ready); err != nil {
		t.Fatal(err)
	}
	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatal(err)
	}
	cluster = getCluster(t, c, key)
	if !meta.IsStatusConditionTrue(cluster.Status.Conditions, dolphinv1.ConditionReady) || cluster.Status.ObservedGeneration != cluster.Generation {
		t.Fatalf("before the failure: not Ready or not observed: gen %d/%d %+v", cluster.Status.ObservedGeneration, cluster.Generation, cluster.Status.Conditions)
	}
	observed := cluster.Status.ObservedGeneration

	// A spec change whose StatefulSet apply fails.
	cluster.Spec.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}
	if err := c.Update(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	injected := errors.New("injected: admission webhook denied the StatefulSet")
	failing := interceptor.NewClient(c, interceptor.Funcs{
		Apply: func(ctx context.Context, cl client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			if k, ok := obj.(interface{ GetKind() *string }); ok && k.GetKind() != nil && *k.GetKind() == "StatefulSet" {
				return injected
			}
			return cl.Apply(ctx, obj, opts...)
		},
	})
	errorsBefore := testutil.ToFloat64(metrics.ReconcileTotal.WithLabelValues(metrics.ResultError))
	if err := reconcileOnce(t, failing, key); !errors.Is(err, injected) {
		t.Fatalf("reconcile error %v, want the injected one", err)
	}
	if d := testutil.ToFloat64(metrics.ReconcileTotal.WithLabelValues(metrics.ResultError)) - errorsBefore; d != 1 {
		t.Errorf("result=error counted %v times, want 1", d)
	}
	cluster = getCluster(t, c, key)
	cond := meta.FindStatusCondition(cluster.Status.Conditions, dolphinv1.ConditionReady)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != "ReconcileError" || !strings.Contains(cond.Message, injected.Error()) {
		t.Errorf("Ready after a failed step: %+v, want False/ReconcileError with the step's message", cond)
	}
	if p := meta.FindStatusCondition(cluster.Status.Conditions, dolphinv1.ConditionProgressing); p == nil || p.Status != metav1.ConditionTrue || !strings.Contains(p.Message, "statefulset") {
		t.Errorf("Progressing after a failed step: %+v, want True naming the step", p)
	}
	if cluster.Status.ObservedGeneration != observed || cluster.Generation == observed {
		t.Errorf("observedGeneration %d (generation %d): a failed step must leave it at %d", cluster.Status.ObservedGeneration, cluster.Generation, observed)
	}
	if cluster.Status.Phase == dolphinv1.PhaseRunning {
		t.Errorf("phase Running with a failing step")
	}

	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatal(err)
	}
	cluster = getCluster(t, c, key)
	if !meta.IsStatusConditionTrue(cluster.Status.Conditions, dolphinv1.ConditionReady) || cluster.Status.ObservedGeneration != cluster.Generation {
		t.Errorf("after the step succeeds: Ready %v, observedGeneration %d/%d", meta.IsStatusConditionTrue(cluster.Status.Conditions, dolphinv1.ConditionReady),
			cluster.Status.ObservedGeneration, cluster.Generation)
	}
}
