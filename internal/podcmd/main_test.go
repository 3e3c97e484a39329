package podcmd

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/spf13/cobra"

	"github.com/dolphin-operator/dolphin/internal/cli"
)

// runMainEnv makes the test binary act as the pod binary (see TestMain), so a test can run a
// subcommand as a process, with its signal handling, without building anything.
const runMainEnv = "DOLPHIN_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		cli.Main(newRootCmd())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// newRootCmd is a root command with every in-pod subcommand, as cmd/dolphin-pod builds it.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{Use: "dolphin", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(Commands()...)
	return root
}

// run executes the command line args and returns its output.
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
