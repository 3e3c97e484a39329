// Package cli is what every Dolphin binary shares: Main (signals, exit status) and `version`.
// The binaries are `dolphin` (every role: the operator, `dolphin local`, the in-pod commands),
// `dolphin-operator` (the operator alone, which links a fraction of the code and so costs less
// memory; docs/design/0041) and `dolphin-pod` (the in-pod commands alone, copied into every
// database pod; docs/design/0061). Nothing here may import more than the smallest of them
// needs, or every binary grows with it.
package cli

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

// Build information, set at link time for every binary:
//
//	go build -ldflags "-X github.com/dolphin-operator/dolphin/internal/cli.Version=v0.1.0 \
//	  -X github.com/dolphin-operator/dolphin/internal/cli.Commit=$(git rev-parse HEAD)" ./cmd/...
var (
	Version = "dev"
	Commit  = "unknown"
)

// VersionString is what `<binary> version` prints.
func VersionString(binary string) string {
	return fmt.Sprintf("%s %s (commit %s, %s, %s/%s)", binary, Version, Commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// NewVersionCmd returns `<binary> version`.
func NewVersionCmd(binary string) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of " + binary,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), VersionString(binary))
			return err
		},
	}
}
