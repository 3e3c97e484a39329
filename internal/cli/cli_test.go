package cli

import (
	"bytes"
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
