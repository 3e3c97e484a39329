// Command dolphin-operator runs the Dolphin operator and nothing else: the same code as
// `dolphin operator`, in a binary that links none of the agent, local-cluster, restore or
// seeding code, so its pages and package initialisation cost less memory (docs/design/0041).
// A real install runs this; database pods still copy the agent from `dolphin` (same image).
package main

import (
	"github.com/spf13/cobra"

	"github.com/dolphin-operator/dolphin/internal/cli"
	"github.com/dolphin-operator/dolphin/internal/operator"
)

func main() { cli.Main(newRootCmd()) }

// newRootCmd returns `dolphin-operator`: the operator's flags at the root, and `version`.
func newRootCmd() *cobra.Command {
	root := operator.NewCommand("dolphin-operator")
	// A failing operator has already said what went wrong; usage would bury it.
	root.SilenceUsage, root.SilenceErrors = true, true
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(cli.NewVersionCmd("dolphin-operator"))
	return root
}
