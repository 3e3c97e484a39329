package dbtest

import "syscall"

// sysProcAttr puts a child in its own process group, away from the terminal's
// Ctrl-C, and has the kernel SIGKILL it when the test binary dies without
// running its cleanups (a panic in another goroutine, a -timeout, kill -9).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
