package controller

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// TestEnvtestOperatorUpgradeKeepsTheAgentImage: an operator with a new agent image (a new
// release) reconciles a cluster made by the previous one without changing its pod template
// (no database restarts), and the new image reaches the template only with a change the spec
// makes anyway.
func TestEnvtestOperatorUpgradeKeepsTheAgentImage(t *testing.T) {
	needEnvtest(t)
	c := directClient(t, nil)
	ctx := context.Background()
	key := createCluster(t, c, newNamespace(t), "upg", dolphinv1.MySQLClusterSpec{})
	reconcileWith := func(image string) {
		t.Helper()
		r := &MySQLClusterReconciler{Client: c, Scheme: envScheme, Build: resources.BuildOptions{AgentImage: image}}
		if _, err := r.Reconcile(ctrl.LoggerInto(ctx, ctrl.Log), ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatalf("reconcile with agent image %s: %v", image, err)
		}
	}
	sts := func() *appsv1.StatefulSet {
		t.Helper()
		var s appsv1.StatefulSet
		if err := c.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: key.Name}, &s); err != nil {
			t.Fatal(err)
		}
		return &s
	}
	agentImage := func(s *appsv1.StatefulSet) string {
		for _, ic := range s.Spec.Template.Spec.InitContainers {
			if ic.Name == resources.ContainerAgentTools {
				return ic.Image
			}
		}
		return ""
	}

	reconcileWith("dolphin:v1")
	before := sts()
	if agentImage(before) != "dolphin:v1" || before.Annotations[resources.SpecTemplateHashAnnotation] == "" {
		t.Fatalf("first StatefulSet: agent image %q, annotations %v", agentImage(before), before.Annotations)
	}

	reconcileWith("dolphin:v2")
	after := sts()
	if agentImage(after) != "dolphin:v1" || after.Generation != before.Generation {
		t.Errorf("after the operator upgrade: agent image %q, generation %d -> %d; want dolphin:v1 and the template untouched",
			agentImage(after), before.Generation, after.Generation)
	}

	cluster := getCluster(t, c, key)
	patch := client.MergeFrom(cluster.DeepCopy())
	cluster.Spec.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("300Mi")}}
	if err := c.Patch(ctx, cluster, patch); err != nil {
		t.Fatal(err)
	}
	reconcileWith("dolphin:v2")
	if img := agentImage(sts()); img != "dolphin:v2" {
		t.Errorf("after a spec change that restarts the pods anyway: agent image %q, want dolphin:v2", img)
	}
}
