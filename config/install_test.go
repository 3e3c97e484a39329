package config

import (
	"os"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestOperatorManifestsFollowConfigDefault keeps the embedded install in step with
// config/default: every folder it lists but ../crd (embedded by config/crd), in its order.
func TestOperatorManifestsFollowConfigDefault(t *testing.T) {
	b, err := os.ReadFile("default/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, r := range k.Resources {
		if r != "../crd" {
			want = append(want, strings.TrimPrefix(r, "../"))
		}
	}
	if !slices.Equal(want, operatorFolders) {
		t.Fatalf("config/default lists %v, the embedded install %v", want, operatorFolders)
	}
	docs, err := OperatorManifests()
	if err != nil {
		t.Fatal(err)
	}
	all := string(slices.Concat(docs...))
	if n := strings.Count(all, DevImage); n != 2 {
		t.Errorf("the install names %s %d times, want 2 (the operator's image and --agent-image)", DevImage, n)
	}
	for _, kind := range []string{"kind: Deployment", "kind: ClusterRole", "kind: ServiceAccount", "kind: ValidatingWebhookConfiguration", "kind: Namespace"} {
		if !strings.Contains(all, kind) {
			t.Errorf("the install has no %s", kind)
		}
	}
}
