package restore

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// sysProcAttr puts the temporary server in its own process group, away from a terminal's
// Ctrl-C (the restore stops it itself), and has the kernel SIGKILL it when the restore dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// syncFilesystem writes everything cached for the filesystem holding dir to disk (syncfs):
// the restored data directory's files, which the tools and the temporary server wrote without
// flushing each one.
func syncFilesystem(dir string) error {
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
