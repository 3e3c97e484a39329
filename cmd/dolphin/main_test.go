package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// run executes the dolphin command line args and returns its standard output.
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
		t.Fatalf("dolphin version: %v", err)
	}
	if !strings.HasPrefix(out, "dolphin dev (commit unknown, go") {
		t.Errorf("dolphin version printed %q, want the default version info", out)
	}
}

func TestOperatorFlagsReachRun(t *testing.T) {
	// Validation runs before any connection to Kubernetes, so this needs no cluster.
	_, err := run(t, "operator", "--max-concurrent-reconciles=0")
	if err == nil || !strings.Contains(err.Error(), "--max-concurrent-reconciles must be at least 1") {
		t.Fatalf("dolphin operator --max-concurrent-reconciles=0 = %v, want a validation error", err)
	}
}

func TestUnknownCommand(t *testing.T) {
	if _, err := run(t, "no-such-command"); err == nil {
		t.Error("dolphin no-such-command succeeded, want an error")
	}
}
