package main

import (
	"bytes"
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestPodBinaryCommands checks what the pod binary offers: every in-pod role, and neither the
// operator nor the local stack.
func TestPodBinaryCommands(t *testing.T) {
	var names []string
	for _, c := range newRootCmd().Commands() {
		names = append(names, c.Name())
	}
	for _, want := range []string{"agent", "backup", "seed", "restore", "verify", "copy-binary", "store-server", "binlog-archive", "kept", "nosync", "version"} {
		if !slices.Contains(names, want) {
			t.Errorf("the pod binary lacks %q (has %v)", want, names)
		}
	}
	for _, not := range []string{"operator", "local", "migrate-storage"} {
		if slices.Contains(names, not) {
			t.Errorf("the pod binary offers %q", not)
		}
	}
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"version"})
	if err := root.ExecuteContext(context.Background()); err != nil || !strings.HasPrefix(out.String(), "dolphin-pod dev") {
		t.Errorf("version: %v, %q", err, out.String())
	}
}

// TestLinksNeitherOperatorNorLocalStack keeps the pod binary small (docs/design/0061): a
// package that brings the operator, the local stack or Kubernetes' API clients into its
// imports fails here.
func TestLinksNeitherOperatorNorLocalStack(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "github.com/dolphin-operator/dolphin/internal/podcmd") {
		t.Fatalf("go list -deps does not list internal/podcmd: %d packages", len(deps))
	}
	const mod = "github.com/dolphin-operator/dolphin/"
	for _, banned := range []string{mod + "internal/operator", mod + "internal/controller", mod + "internal/localstack",
		mod + "internal/localcluster", mod + "internal/localnode", mod + "internal/resources",
		"k8s.io/client-go/kubernetes", "sigs.k8s.io/controller-runtime/pkg/manager"} {
		if slices.Contains(deps, banned) {
			t.Errorf("the pod binary links %s", banned)
		}
	}
}
