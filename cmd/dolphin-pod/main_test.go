package main

import (
	"bytes"
	"context"
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
	for _, want := range []string{"agent", "seed", "restore", "verify", "copy-binary", "store-server", "binlog-archive", "kept", "version"} {
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
