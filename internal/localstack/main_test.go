package localstack

import (
	"bytes"
	"context"
	"testing"

	"github.com/spf13/cobra"
)

// run executes `dolphin` with the command line args (args[0] is "local") and returns its output.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := &cobra.Command{Use: "dolphin", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(Command())
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}
