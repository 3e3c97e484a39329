package resources

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHoldForSwitchoverScript runs the preStop hold with the shells an image may have as
// /bin/sh: it ends within a second of the release file appearing, and after its bound with a
// message when the file never comes.
func TestHoldForSwitchoverScript(t *testing.T) {
	for _, shell := range []string{"dash", "bash"} {
		sh, err := exec.LookPath(shell)
		if err != nil {
			t.Logf("%s not installed", shell)
			continue
		}
		t.Run(shell, func(t *testing.T) {
			t.Parallel()
			released := filepath.Join(t.TempDir(), StopReleasedFileName)
			run := func(seconds int) (time.Duration, string) {
				var stderr bytes.Buffer
				cmd := exec.Command(sh, "-c", holdForSwitchoverScript(released, seconds))
				cmd.Stderr = &stderr
				start := time.Now()
				if err := cmd.Run(); err != nil {
					t.Fatalf("the hold failed: %v: %s", err, stderr.String())
				}
				return time.Since(start), stderr.String()
			}
			took, msg := run(2)
			if took < 2*time.Second || !strings.Contains(msg, "not released for the stop within 2 s") {
				t.Errorf("unreleased: ended after %v with %q, want ≥ 2 s and the message", took, msg)
			}
			time.AfterFunc(1500*time.Millisecond, func() { _ = os.WriteFile(released, nil, 0o600) })
			took, msg = run(20)
			if took < time.Second || took > 5*time.Second || msg != "" {
				t.Errorf("released after 1.5 s: ended after %v with %q, want within ~2.5 s and no message", took, msg)
			}
		})
	}
}
