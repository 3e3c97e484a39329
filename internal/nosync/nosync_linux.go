//go:build linux

package nosync

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// syscallTable holds the audit architecture and the flush system calls of one architecture
// (nosync_linux_amd64.go, nosync_linux_arm64.go; nil elsewhere).
type syscallTable struct {
	arch    uint32
	flushes []uint32
}

// Supported reports whether Suppress can work on this platform (the kernel may still refuse).
func Supported() bool { return table != nil }

// program is the filter: on this architecture, a flush returns 0 at once; anything else (and
// every call of another architecture's ABI) runs.
func program(t syscallTable) ([]unix.SockFilter, error) {
	const (
		offNr   = 0 // struct seccomp_data: int nr; __u32 arch; ...
		offArch = 4
	)
	skip := bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO} // with errno 0 in its data: the call "succeeds"
	allow := bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW}
	n := len(t.flushes)
	insns := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: t.arch, SkipFalse: uint8(n + 1)}, // over the load and the comparisons, to allow
		bpf.LoadAbsolute{Off: offNr, Size: 4},
	}
	for i, nr := range t.flushes {
		// Matched: jump over the remaining comparisons and the allow to skip.
		insns = append(insns, bpf.JumpIf{Cond: bpf.JumpEqual, Val: nr, SkipTrue: uint8(n - i)})
	}
	insns = append(insns, allow, skip)
	raw, err := bpf.Assemble(insns)
	if err != nil {
		return nil, fmt.Errorf("assembling the seccomp filter: %w", err)
	}
	out := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		out[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out, nil
}

// Suppress installs the filter on every thread of this process; the programs it executes
// inherit it. It sets no_new_privs, which the kernel requires of an unprivileged filter (a
// pod with allowPrivilegeEscalation: false has it already).
func Suppress() error {
	if table == nil {
		return ErrUnsupported
	}
	filter, err := program(*table)
	if err != nil {
		return err
	}
	runtime.LockOSThread() // prctl and seccomp act on the calling thread; TSYNC carries both to the others
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	tid, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	if errno != 0 {
		return fmt.Errorf("seccomp(SECCOMP_SET_MODE_FILTER): %w", errno)
	}
	if tid != 0 {
		// TSYNC could not move thread tid onto the filter, and then installs it nowhere.
		return fmt.Errorf("seccomp(SECCOMP_SET_MODE_FILTER): thread %d could not be synchronised", tid)
	}
	runtime.KeepAlive(filter)
	return nil
}

// Exec replaces this process with argv (looked up in PATH) and env, its flushes skipped. When
// the filter cannot be installed it says why on stderr and runs the program with its flushes:
// slower, never less safe.
func Exec(argv, env []string) error {
	if len(argv) == 0 {
		return fmt.Errorf("nosync: no program to run")
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return fmt.Errorf("nosync: %w", err)
	}
	if err := Suppress(); err != nil {
		fmt.Fprintf(os.Stderr, "dolphin nosync: flushes not skipped (%v); running %s with them\n", err, argv[0])
	}
	runtime.LockOSThread() // the thread that installed the filter execs (TSYNC put it on all of them anyway)
	if err := syscall.Exec(path, argv, env); err != nil {
		return fmt.Errorf("nosync: executing %s: %w", path, err)
	}
	return nil
}
