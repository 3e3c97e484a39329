package main

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
)

// run executes the dolphin-operator command line args and returns its standard output.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func TestVersion(t *testing.T) {
	out, err := run(t, "version")
	if err != nil {
		t.Fatalf("dolphin-operator version: %v", err)
	}
	if !strings.HasPrefix(out, "dolphin-operator dev (commit unknown, go") {
		t.Errorf("dolphin-operator version printed %q, want the default version info", out)
	}
}

func TestFlagsAtTheRootReachRun(t *testing.T) {
	// Validation runs before any connection to Kubernetes, so this needs no cluster.
	_, err := run(t, "--max-concurrent-reconciles=0")
	if err == nil || !strings.Contains(err.Error(), "--max-concurrent-reconciles must be at least 1") {
		t.Fatalf("dolphin-operator --max-concurrent-reconciles=0 = %v, want a validation error", err)
	}
	if _, err := run(t, "agent"); err == nil {
		t.Error("dolphin-operator agent succeeded, want an error: this binary is the operator only")
	}
}

// TestLinksOnlyTheOperator keeps the binary small: the roles that run elsewhere (the local
// cluster, restore into a data directory, the full dolphin command) must not be linked in.
// A package that imports one of them into the operator's path fails here, not in a footprint
// run weeks later.
func TestLinksOnlyTheOperator(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 100 {
		t.Fatalf("go list -deps listed %d packages, want the operator's (hundreds)", len(deps))
	}
	const mod = "github.com/dolphin-operator/dolphin/"
	for _, dep := range deps {
		for _, banned := range []string{"cmd/dolphin", "internal/localcluster", "internal/localnode", "internal/localproxy", "internal/localstack", "internal/restore", "internal/podcmd", "internal/seed", "internal/agentops"} {
			if dep == mod+banned {
				t.Errorf("dolphin-operator links %s, which only the dolphin binary needs", dep)
			}
		}
	}
}
