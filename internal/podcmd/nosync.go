package podcmd

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/dolphin-operator/dolphin/internal/nosync"
)

// newNosyncCmd returns `dolphin nosync -- PROGRAM [ARGS…]`: the install script runs
// mariadb-install-db through it (internal/nosync).
func newNosyncCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "nosync -- PROGRAM [ARGS...]",
		Short: "Run PROGRAM with its fsync, fdatasync, sync_file_range, syncfs and sync skipped",
		Long: "Replace this process with PROGRAM, whose flushes to disk return success without\n" +
			"running (a seccomp filter it and its children inherit). The caller makes the result\n" +
			"durable afterwards (sync -f DIR). Where the filter cannot be installed, PROGRAM runs\n" +
			"with its flushes and a line on stderr says why.",
		Args:   cobra.MinimumNArgs(1),
		Hidden: true,
		RunE: func(_ *cobra.Command, args []string) error {
			return nosync.Exec(args, os.Environ())
		},
	}
}
