// Command kubectl-dolphin is `kubectl dolphin`, the kubectl plugin of Dolphin's users
// (internal/plugin). Put it on PATH; kubectl finds it by its name. It links none of the
// operator.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/dolphin-operator/dolphin/internal/plugin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := plugin.NewRootCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}
