//go:build !linux

package nosync

import (
	"fmt"
	"os"
	"os/exec"
)

// Supported reports whether Suppress can work on this platform: never off Linux.
func Supported() bool { return false }

// Suppress cannot skip flushes off Linux.
func Suppress() error { return ErrUnsupported }

// Exec runs argv with its flushes (off Linux nothing can skip them) and exits with its status.
func Exec(argv, env []string) error {
	if len(argv) == 0 {
		return fmt.Errorf("nosync: no program to run")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = env, os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("nosync: %w", err)
	}
	os.Exit(0)
	return nil
}
