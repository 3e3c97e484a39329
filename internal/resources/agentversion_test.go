package resources

import (
	"encoding/json"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// liveStatefulSet is the StatefulSet the API server would hold after applying c built with
// image, and the annotations AgentBuild gave.
func liveStatefulSet(t *testing.T, c *dolphinv1.MySQLCluster, image string, annotations map[string]string) *appsv1.StatefulSet {
	t.Helper()
	ac, err := StatefulSet(c, BuildOptions{AgentImage: image})
	if err != nil {
		t.Fatal(err)
	}
	ac.WithAnnotations(annotations)
	b, err := json.Marshal(ac)
	if err != nil {
		t.Fatal(err)
	}
	var sts appsv1.StatefulSet
	if err := json.Unmarshal(b, &sts); err != nil {
		t.Fatal(err)
	}
	return &sts
}

func TestAgentBuildKeepsTheRunningAgentAcrossOperatorUpgrades(t *testing.T) {
	c := Defaulted(&dolphinv1.MySQLCluster{})
	c.Name, c.Namespace = "orders", "shop"
	v1 := BuildOptions{AgentImage: "dolphin:v1"}
	v2 := BuildOptions{AgentImage: "dolphin:v2"}

	o, first, err := AgentBuild(c, nil, v1)
	if err != nil || o.AgentImage != "dolphin:v1" || first[SpecTemplateHashAnnotation] == "" || first[AgentProtocolAnnotation] != "1" {
		t.Fatalf("a new StatefulSet: %+v %v %v; want the operator's image and both annotations", o, first, err)
	}
	live := liveStatefulSet(t, c, "dolphin:v1", first)

	// The operator upgraded, the spec unchanged: the pods keep their agent.
	if o, _, _ := AgentBuild(c, live, v2); o.AgentImage != "dolphin:v1" {
		t.Errorf("operator upgrade alone: agent image %s, want dolphin:v1 kept (no restart)", o.AgentImage)
	}
	// Written by a build before the annotations: kept too.
	bare := liveStatefulSet(t, c, "dolphin:v1", nil)
	if o, ann, _ := AgentBuild(c, bare, v2); o.AgentImage != "dolphin:v1" || ann[AgentProtocolAnnotation] != "1" {
		t.Errorf("a StatefulSet of an earlier build: agent image %s, annotations %v; want dolphin:v1 kept", o.AgentImage, ann)
	}
	// The spec changes the template: the pods restart anyway, onto the new agent.
	changed := c.DeepCopy()
	changed.Spec.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")}}
	if o, _, _ := AgentBuild(changed, live, v2); o.AgentImage != "dolphin:v2" {
		t.Errorf("a spec change with the upgrade: agent image %s, want dolphin:v2", o.AgentImage)
	}
	// An agent too old for this operator: restart onto the new one.
	old := live.DeepCopy()
	old.Annotations[AgentProtocolAnnotation] = "0"
	if o, _, _ := AgentBuild(c, old, v2); o.AgentImage != "dolphin:v2" {
		t.Errorf("an agent of protocol 0: image %s, want dolphin:v2", o.AgentImage)
	}
	// The image does not enter the hash.
	h1, _ := SpecTemplateHash(c)
	if _, ann, _ := AgentBuild(c, live, v2); ann[SpecTemplateHashAnnotation] != h1 {
		t.Errorf("hash %s, want %s", ann[SpecTemplateHashAnnotation], h1)
	}
}
