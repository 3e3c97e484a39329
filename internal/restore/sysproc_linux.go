package restore

import "syscall"

// sysProcAttr puts the temporary server in its own process group, away from a terminal's
// Ctrl-C (the restore stops it itself), and has the kernel SIGKILL it when the restore dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
