package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

// Build information, set at link time:
//
//	go build -ldflags "-X main.version=v0.1.0 -X main.commit=$(git rev-parse HEAD)" ./cmd/dolphin
var (
	version = "dev"
	commit  = "unknown"
)

// versionString is what `dolphin version` prints.
func versionString() string {
	return fmt.Sprintf("dolphin %s (commit %s, %s, %s/%s)", version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// newVersionCmd returns `dolphin version`.
func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of dolphin",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), versionString())
			return err
		},
	}
}
