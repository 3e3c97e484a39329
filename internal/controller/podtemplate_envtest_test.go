package controller

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// The pod template a production team sets — pull secret and policy, its own service account,
// server environment, resources on every container — is admitted by the API server and merged
// into the StatefulSet the reconciler applies, beside everything Dolphin sets.
func TestEnvtestPodTemplateIsMerged(t *testing.T) {
	needEnvtest(t)
	c := directClient(t, nil)
	ns := newNamespace(t)
	l := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}
	key := createCluster(t, c, ns, "prod", dolphinv1.MySQLClusterSpec{Instances: 3,
		Resources: corev1.ResourceRequirements{Requests: l, Limits: l},
		PodTemplate: dolphinv1.PodTemplateOverrides{
			ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry-creds"}}, ImagePullPolicy: corev1.PullAlways,
			ServiceAccountName: "prod-db", Env: []corev1.EnvVar{{Name: "TZ", Value: "UTC"}},
			AgentResources: ptr.To(corev1.ResourceRequirements{Requests: l, Limits: l}),
		}})
	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatal(err)
	}
	var sts appsv1.StatefulSet
	if err := c.Get(context.Background(), key, &sts); err != nil {
		t.Fatal(err)
	}
	spec := sts.Spec.Template.Spec
	if spec.ServiceAccountName != "prod-db" || len(spec.ImagePullSecrets) != 1 || spec.ImagePullSecrets[0].Name != "registry-creds" {
		t.Fatalf("service account %q, pull secrets %v", spec.ServiceAccountName, spec.ImagePullSecrets)
	}
	for _, ctr := range append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...) {
		if ctr.ImagePullPolicy != corev1.PullAlways || !equality.Semantic.DeepEqual(ctr.Resources.Limits, l) || !equality.Semantic.DeepEqual(ctr.Resources.Requests, l) {
			t.Errorf("container %s: pull policy %s, resources %+v", ctr.Name, ctr.ImagePullPolicy, ctr.Resources)
		}
		if ctr.Name == "mysqld" {
			found := false
			for _, e := range ctr.Env {
				found = found || (e.Name == "TZ" && e.Value == "UTC")
			}
			if !found || len(ctr.Env) < 4 {
				t.Errorf("server env %+v: want Dolphin's and TZ", ctr.Env)
			}
		}
	}
}
