// Command dolphin is the Dolphin binary with every role as a subcommand: `local` (the whole
// stack on this machine, internal/localstack), `operator` (also built alone as
// cmd/dolphin-operator, which a real install runs because it is smaller), `migrate-storage`,
// `version`, and the in-pod commands (internal/podcmd: agent, seed, restore, …; the pods run
// them from cmd/dolphin-pod, the host-process node from this binary). main only assembles the
// root command: each subcommand lives in the package that owns its concern.
package main

import (
	"github.com/spf13/cobra"

	"github.com/dolphin-operator/dolphin/internal/cli"
	"github.com/dolphin-operator/dolphin/internal/localstack"
	"github.com/dolphin-operator/dolphin/internal/operator"
	"github.com/dolphin-operator/dolphin/internal/podcmd"
)

func main() { cli.Main(newRootCmd()) }

// newRootCmd returns the `dolphin` command with every subcommand attached.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "dolphin",
		Short: "Dolphin runs highly available MySQL and MariaDB on Kubernetes",
		// A failing subcommand has already said what went wrong; usage would bury it.
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(cli.NewVersionCmd("dolphin"), operator.NewCommand("operator"), operator.NewMigrateStorageCommand(), localstack.Command())
	// The in-pod roles too: the host-process node runs pods' containers with this binary.
	root.AddCommand(podcmd.Commands()...)
	return root
}
