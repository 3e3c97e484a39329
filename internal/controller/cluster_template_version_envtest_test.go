package controller

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
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

// TestEnvtestOperatorUpgradeKeepsThePodTemplate: an operator with a new agent image and a
// newer pod template generation (a new release) reconciles a cluster made by the previous
// one — agent image dolphin:v1, template generation 1 (the server stopped cleanly), no
// generation annotation — without changing its pod template (no database restarts); the new
// image and the crash-on-stop server command reach the template only with a change the spec
// makes anyway. A cluster the new operator creates gets them at once.
func TestEnvtestOperatorUpgradeKeepsThePodTemplate(t *testing.T) {
	needEnvtest(t)
	c := directClient(t, nil)
	ctx := context.Background()
	ns := newNamespace(t)
	key := createCluster(t, c, ns, "upg", dolphinv1.MySQLClusterSpec{})
	reconcileWith := func(key types.NamespacedName, build resources.BuildOptions) {
		t.Helper()
		r := &MySQLClusterReconciler{Client: c, Scheme: envScheme, Build: build}
		if _, err := r.Reconcile(ctrl.LoggerInto(ctx, ctrl.Log), ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatalf("reconcile with %+v: %v", build, err)
		}
	}
	sts := func(key types.NamespacedName) *appsv1.StatefulSet {
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
	// crashesOnStop: the server container's main process is the crash-on-stop supervisor.
	crashesOnStop := func(s *appsv1.StatefulSet) bool {
		for _, ctr := range s.Spec.Template.Spec.Containers {
			if ctr.Name == resources.ContainerMySQLD {
				return len(ctr.Command) > 3 && ctr.Command[0] == "/bin/sh" && slices.Contains(ctr.Command, "crash-on-stop")
			}
		}
		return false
	}
	template := func(s *appsv1.StatefulSet) string {
		b, err := json.Marshal(s.Spec.Template)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	// The previous release: its agent, the generation-1 template, no generation annotation.
	reconcileWith(key, resources.BuildOptions{AgentImage: "dolphin:v1", TemplateGeneration: 1})
	patch := []byte(`{"metadata":{"annotations":{"` + resources.TemplateGenerationAnnotation + `":null}}}`)
	if err := c.Patch(ctx, sts(key), client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	before := sts(key)
	if agentImage(before) != "dolphin:v1" || crashesOnStop(before) || before.Annotations[resources.SpecTemplateHashAnnotation] == "" {
		t.Fatalf("the previous release's StatefulSet: agent image %q, crash on stop %v, annotations %v", agentImage(before), crashesOnStop(before), before.Annotations)
	}
	if _, ok := before.Annotations[resources.TemplateGenerationAnnotation]; ok {
		t.Fatalf("the previous release's StatefulSet records a generation: %v", before.Annotations)
	}

	reconcileWith(key, resources.BuildOptions{AgentImage: "dolphin:v2"})
	after := sts(key)
	if after.Generation != before.Generation || template(after) != template(before) {
		t.Errorf("after the operator upgrade: generation %d -> %d, template changed %v; want the template untouched",
			before.Generation, after.Generation, template(after) != template(before))
	}
	if g := after.Annotations[resources.TemplateGenerationAnnotation]; g != "1" {
		t.Errorf("after the operator upgrade: template generation %q recorded, want 1", g)
	}

	cluster := getCluster(t, c, key)
	merge := client.MergeFrom(cluster.DeepCopy())
	cluster.Spec.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("300Mi")}}
	if err := c.Patch(ctx, cluster, merge); err != nil {
		t.Fatal(err)
	}
	reconcileWith(key, resources.BuildOptions{AgentImage: "dolphin:v2"})
	changed := sts(key)
	if agentImage(changed) != "dolphin:v2" || !crashesOnStop(changed) || changed.Annotations[resources.TemplateGenerationAnnotation] != strconv.Itoa(resources.TemplateGeneration) {
		t.Errorf("after a spec change that restarts the pods anyway: agent image %q, crash on stop %v, generation %q; want dolphin:v2, true, 2",
			agentImage(changed), crashesOnStop(changed), changed.Annotations[resources.TemplateGenerationAnnotation])
	}

	fresh := createCluster(t, c, ns, "new", dolphinv1.MySQLClusterSpec{})
	reconcileWith(fresh, resources.BuildOptions{AgentImage: "dolphin:v2"})
	if s := sts(fresh); !crashesOnStop(s) || !strings.Contains(template(s), "dolphin:v2") {
		t.Errorf("a new cluster: crash on stop %v, agent image %q; want true and dolphin:v2", crashesOnStop(s), agentImage(s))
	}
}
