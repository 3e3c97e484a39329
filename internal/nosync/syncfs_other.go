//go:build !linux

package nosync

import "syscall"

// SyncFilesystem writes everything cached to disk (sync: no syncfs outside Linux).
func SyncFilesystem(string) error {
	syscall.Sync()
	return nil
}
