//go:build !linux

package dbtest

import "syscall"

// sysProcAttr puts a child in its own process group, away from the terminal's
// Ctrl-C. Without Linux's parent-death signal, servers outlive a test binary
// that dies without running its cleanups.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
