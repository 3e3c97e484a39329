//go:build !linux

package restore

import "syscall"

// sysProcAttr puts the temporary server in its own process group (no parent-death signal
// outside Linux).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
