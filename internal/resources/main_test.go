package resources

import (
	"fmt"
	"os"
	"testing"

	"github.com/dolphin-operator/dolphin/internal/nosync"
)

// TestMain lets the test binary stand in for `dolphin nosync -- PROGRAM…` (the same
// nosync.Exec), so that TestServerInitScriptOperatorAccount runs the install script the way
// the seed container does, with $DOLPHIN_NOSYNC naming a binary that offers it.
func TestMain(m *testing.M) {
	if len(os.Args) > 3 && os.Args[1] == "nosync" && os.Args[2] == "--" {
		// The test learns which programs ran through it.
		if log := os.Getenv("DOLPHIN_TEST_NOSYNC_LOG"); log != "" {
			f, err := os.OpenFile(log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
			if err == nil {
				_, _ = fmt.Fprintln(f, os.Args[3])
				_ = f.Close()
			}
		}
		err := nosync.Exec(os.Args[3:], os.Environ())
		fmt.Fprintln(os.Stderr, err)
		os.Exit(127)
	}
	os.Exit(m.Run())
}
