// Command dolphin is the Dolphin binary with every role as a subcommand: `agent` (copied into
// every database pod), `local`, `restore`, `seed`, `operator` (also built alone as
// cmd/dolphin-operator, which a real install runs because it is smaller), `version`… The root
// stays thin: a subcommand lives in its own file (or internal/cli when both binaries offer it)
// and hands its flags to a package under internal/.
package main

import (
	"github.com/spf13/cobra"

	"github.com/dolphin-operator/dolphin/internal/cli"
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
	root.AddCommand(cli.NewVersionCmd("dolphin"), cli.NewOperatorCmd("operator"), newLocalCmd(), newAgentCmd(), newCopyBinaryCmd(), newRestoreCmd(), newVerifyCmd(), newSeedCmd(), newStoreServerCmd(), newBinlogArchiveCmd(), newMigrateStorageCmd(), newKeptCmd())
	return root
}
