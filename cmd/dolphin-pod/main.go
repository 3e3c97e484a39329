// Command dolphin-pod is the binary inside Dolphin's pods: the `/dolphin` of Dolphin's image,
// which the agent's init container copies into every database pod. It offers the in-pod
// subcommands alone (internal/podcmd: agent, seed, restore, verify, copy-binary, store-server,
// binlog-archive, kept, nosync) and `version`, and links neither the operator nor
// the local stack (docs/design/0061).
package main

import (
	"github.com/spf13/cobra"

	"github.com/dolphin-operator/dolphin/internal/cli"
	"github.com/dolphin-operator/dolphin/internal/podcmd"
)

func main() { cli.Main(newRootCmd()) }

// newRootCmd returns the pod binary's command with every in-pod subcommand attached.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		// The name pods call it by: /dolphin in the image, and the copy in each database pod.
		Use:   "dolphin",
		Short: "The in-pod commands of Dolphin (agent, seed, restore, verify, …)",
		// A failing subcommand has already said what went wrong; usage would bury it.
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(cli.NewVersionCmd("dolphin-pod"))
	root.AddCommand(podcmd.Commands()...)
	return root
}
