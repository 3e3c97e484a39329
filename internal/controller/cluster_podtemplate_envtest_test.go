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
// server environment and volumes, a sidecar and an init container, resources on every
// container, the user, group, SELinux level and seccomp profile its platform assigns — is
// admitted by the API server and merged into the StatefulSet the reconciler applies, after
// everything Dolphin sets, and applying it again changes nothing.
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
			Volumes:        []dolphinv1.ExtraVolume{{Name: "plugins", ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "plugins"}}}},
			VolumeMounts:   []corev1.VolumeMount{{Name: "plugins", MountPath: "/etc/mysql/plugins.d", ReadOnly: true}},
			Sidecars: []dolphinv1.ExtraContainer{{Name: "exporter", Image: "registry.example/exporter:1",
				Resources: ptr.To(corev1.ResourceRequirements{Requests: l, Limits: l})}},
			InitContainers: []dolphinv1.ExtraContainer{{Name: "fetch", Image: "registry.example/fetch:1",
				Resources: ptr.To(corev1.ResourceRequirements{Requests: l, Limits: l})}},
			// Partly set, as OpenShift's restricted SCC does (a level only).
			SecurityContext: &dolphinv1.PodSecurity{RunAsUser: ptr.To[int64](1000650000), RunAsGroup: ptr.To[int64](0),
				SELinuxOptions: &corev1.SELinuxOptions{Level: "s0:c26,c5"},
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("profiles/mariadb.json")}},
		}})
	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatal(err)
	}
	// What the API server stored is what the reconciler applies: the next reconciles write
	// nothing (an empty field sent and dropped would make every reconcile apply again).
	var again writeCounter
	for range 2 {
		if err := reconcileOnce(t, directClient(t, &again), key); err != nil {
			t.Fatal(err)
		}
	}
	if n := again.n.Load(); n != 0 {
		t.Errorf("reconciles without a change made %d write requests, want 0", n)
	}
	var sts appsv1.StatefulSet
	if err := c.Get(context.Background(), key, &sts); err != nil {
		t.Fatal(err)
	}
	spec := sts.Spec.Template.Spec
	if sc := spec.SecurityContext; sc == nil || *sc.RunAsUser != 1000650000 || *sc.RunAsGroup != 0 || *sc.FSGroup != 999 ||
		sc.SELinuxOptions == nil || sc.SELinuxOptions.Level != "s0:c26,c5" || sc.SeccompProfile.Type != corev1.SeccompProfileTypeLocalhost {
		t.Errorf("pod security context %+v", sc)
	}
	if spec.ServiceAccountName != "prod-db" || len(spec.ImagePullSecrets) != 1 || spec.ImagePullSecrets[0].Name != "registry-creds" {
		t.Fatalf("service account %q, pull secrets %v", spec.ServiceAccountName, spec.ImagePullSecrets)
	}
	if last := spec.Containers[len(spec.Containers)-1]; last.Name != "exporter" {
		t.Errorf("last container %s, want the sidecar after Dolphin's", last.Name)
	}
	if last := spec.InitContainers[len(spec.InitContainers)-1]; last.Name != "fetch" {
		t.Errorf("last init container %s, want the user's after Dolphin's", last.Name)
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
			mounted := false
			for _, m := range ctr.VolumeMounts {
				mounted = mounted || (m.Name == "plugins" && m.MountPath == "/etc/mysql/plugins.d")
			}
			if !mounted {
				t.Errorf("server mounts %+v: want plugins", ctr.VolumeMounts)
			}
		}
	}
}
