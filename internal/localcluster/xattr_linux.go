package localcluster

import (
	"fmt"
	"syscall"
)

// checkXattr fails when dir's file system has no user extended attributes, in which
// versitygw's posix backend keeps object metadata.
func checkXattr(dir string) error {
	if err := syscall.Setxattr(dir, "user.dolphin-local", []byte("1"), 0); err != nil {
		return fmt.Errorf("the file system of %s has no user extended attributes, which the S3 server (versitygw) needs: "+
			"use a --dir on ext4, xfs or btrfs: %w", dir, err)
	}
	return nil
}
