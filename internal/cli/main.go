package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/manager/signals"
)

// Main runs root until SIGTERM/SIGINT cancel its context (a second signal exits at once; the
// commands stop gracefully when it is done) and exits 1 after printing the error it ended with.
// Every binary's main function is this call.
func Main(root *cobra.Command) {
	if err := root.ExecuteContext(signals.SetupSignalHandler()); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}
