//go:build unix

package agent

import (
	"os"
	"syscall"
)

// inode is the file's inode number.
func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino) //nolint:unconvert // Ino is not uint64 on every unix
	}
	return 0
}
