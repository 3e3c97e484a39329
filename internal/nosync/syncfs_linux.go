//go:build linux

package nosync

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// SyncFilesystem writes everything cached for the filesystem holding dir to disk (syncfs):
// the one flush that makes durable what was written without flushing each file.
func SyncFilesystem(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("syncfs %s: %w", dir, err)
	}
	return nil
}
