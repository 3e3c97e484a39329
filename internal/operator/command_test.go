package operator

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestOperatorHelpListsFlags(t *testing.T) {
	var out bytes.Buffer
	cmd := NewCommand("operator")
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{
		"--metrics-bind-address", "--metrics-secure", "--health-probe-bind-address", "--leader-elect",
		"--leader-election-id", "--leader-election-namespace", "--max-concurrent-reconciles",
		"--graceful-shutdown-timeout", "--watch-namespace", "--zap-devel", "--zap-log-level",
		"--agent-image", "--gc-percent", "--memory-limit-ratio",
	} {
		if !strings.Contains(out.String(), flag) {
			t.Errorf("operator --help does not list %s", flag)
		}
	}
}
