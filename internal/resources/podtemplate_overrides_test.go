package resources

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// With spec.resources and agentResources set, every container of an instance pod — init
// containers included — has requests equal to its limits: the pod is Guaranteed, and a quota
// that requires limits admits it. The pull secret and policy reach every container, the
// service account replaces Dolphin's, and the server gets the extra environment after its own.
func TestPodOverridesReachEveryContainer(t *testing.T) {
	sts, err := StatefulSet(production(), BuildOptions{AgentImage: "ghcr.io/dolphin-operator/dolphin:test"})
	if err != nil {
		t.Fatal(err)
	}
	var spec corev1.PodSpec
	if err := convert(sts.Spec.Template.Spec, &spec); err != nil {
		t.Fatal(err)
	}
	if spec.ServiceAccountName != "ledger-db" || len(spec.ImagePullSecrets) != 1 || spec.ImagePullSecrets[0].Name != "registry-creds" {
		t.Fatalf("service account %q, pull secrets %v", spec.ServiceAccountName, spec.ImagePullSecrets)
	}
	all := append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...)
	if len(all) < 5 {
		t.Fatalf("%d containers: the test would prove little", len(all))
	}
	for _, ctr := range all {
		r := ctr.Resources
		if len(r.Limits) == 0 || !equality.Semantic.DeepEqual(r.Requests, r.Limits) {
			t.Errorf("container %s: requests %v, limits %v: not Guaranteed", ctr.Name, r.Requests, r.Limits)
		}
		if ctr.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("container %s: pull policy %q", ctr.Name, ctr.ImagePullPolicy)
		}
		if ctr.Name == ContainerMySQLD {
			var names []string
			for _, e := range ctr.Env {
				names = append(names, e.Name)
			}
			if got := strings.Join(names, ","); got != "POD_NAME,POD_NAMESPACE,POD_IP,TZ,LICENSE" {
				t.Errorf("server env %s", got)
			}
		}
	}

	c := production()
	c.Spec.PodTemplate.Env = append(c.Spec.PodTemplate.Env, corev1.EnvVar{Name: "POD_IP", Value: "1.2.3.4"})
	if _, err := StatefulSet(c, BuildOptions{AgentImage: "x"}); err == nil || !strings.Contains(err.Error(), "POD_IP is set by Dolphin") {
		t.Fatalf("a reserved name: %v", err)
	}
}
