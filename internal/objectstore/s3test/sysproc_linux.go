package s3test

import (
	"fmt"
	"path/filepath"
	"syscall"
)

// sysProcAttr puts versitygw in its own process group, away from the terminal's Ctrl-C, and
// has the kernel SIGKILL it when the test binary dies without running its cleanups.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// checkXattr fails when dir's file system has no user extended attributes, which
// versitygw's posix backend keeps object metadata in.
func checkXattr(dir string) error {
	if err := syscall.Setxattr(dir, "user.dolphin-s3test", []byte("1"), 0); err != nil {
		return fmt.Errorf("the file system of %s has no user extended attributes (%w), which versitygw needs: set TMPDIR to a directory on ext4 or xfs",
			filepath.Dir(dir), err)
	}
	return nil
}
