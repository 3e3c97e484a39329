package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestVersionString(t *testing.T) {
	var out bytes.Buffer
	cmd := NewVersionCmd("dolphin-operator")
	cmd.SetOut(&out)
	cmd.SetArgs(nil)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "dolphin-operator dev (commit unknown, go") {
		t.Errorf("version printed %q, want the binary's name and the default version info", out.String())
	}
}

func TestOperatorHelpListsFlags(t *testing.T) {
	var out bytes.Buffer
	cmd := NewOperatorCmd("operator")
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{
		"--metrics-bind-address", "--metrics-secure", "--health-probe-bind-address", "--leader-elect",
		"--leader-election-id", "--leader-election-namespace", "--max-concurrent-reconciles",
		"--graceful-shutdown-timeout", "--watch-namespace", "--zap-devel", "--zap-log-level",
		"--agent-image", "--gc-percent",
	} {
		if !strings.Contains(out.String(), flag) {
			t.Errorf("operator --help does not list %s", flag)
		}
	}
}
