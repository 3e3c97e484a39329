//go:build linux

package nosync

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The test binary is its own helper: with NOSYNC_HELPER set it is the program under the
// filter (or installing it), not a test run.
func TestMain(m *testing.M) {
	switch os.Getenv("NOSYNC_HELPER") {
	case "":
		os.Exit(m.Run())
	case "flush":
		// Report what the flush calls return on a descriptor that does not exist: EBADF
		// when they run, nothing when the filter skips them.
		fmt.Println(flushResults())
	case "suppress":
		if err := Suppress(); err != nil {
			fmt.Println("suppress:", err)
			os.Exit(1)
		}
		fmt.Println(flushResults())
	case "exec":
		// The filter survives execve: the program Exec runs reports skipped flushes.
		env := []string{"NOSYNC_HELPER=flush"} // first: the child's getenv takes the first of duplicates
		env = append(env, os.Environ()...)
		if err := Exec([]string{os.Args[0]}, env); err != nil {
			fmt.Println("exec:", err)
			os.Exit(1)
		}
	}
	os.Exit(0)
}

// flushResults calls each flush on a closed descriptor and on a real file, and writes a
// line to a pipe (an ordinary call the filter must leave alone).
func flushResults() string {
	const bad = 987
	f, err := os.CreateTemp("", "nosync")
	if err != nil {
		return "tempfile: " + err.Error()
	}
	defer os.Remove(f.Name())
	defer f.Close()
	_, werr := f.WriteString("data")
	res := []string{
		"fsync=" + errText(unix.Fsync(bad)),
		"fdatasync=" + errText(unix.Fdatasync(bad)),
		"sync_file_range=" + errText(unix.SyncFileRange(bad, 0, 0, 0)),
		"syncfs=" + errText(unix.Syncfs(bad)),
		"fsync_file=" + errText(f.Sync()),
		"write=" + errText(werr),
		"close_bad=" + errText(unix.Close(bad)),
	}
	return strings.Join(res, " ")
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		return unix.ErrnoName(errno)
	}
	return err.Error()
}

func helper(t *testing.T, mode string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "NOSYNC_HELPER="+mode)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper %s: %v\n%s", mode, err, out)
	}
	return strings.TrimSpace(string(out))
}

// Without the filter the flushes on a closed descriptor fail (the control); with it they
// return success without running, while other calls — a write, a close of the same closed
// descriptor — still run and fail as before.
func TestSuppressSkipsOnlyFlushes(t *testing.T) {
	if !Supported() {
		t.Skipf("no filter for %s", runtime.GOARCH)
	}
	if got, want := helper(t, "flush"), "fsync=EBADF fdatasync=EBADF sync_file_range=EBADF syncfs=EBADF fsync_file=ok write=ok close_bad=EBADF"; got != want {
		t.Fatalf("without the filter:\n got %s\nwant %s", got, want)
	}
	if got, want := helper(t, "suppress"), "fsync=ok fdatasync=ok sync_file_range=ok syncfs=ok fsync_file=ok write=ok close_bad=EBADF"; got != want {
		t.Fatalf("with the filter:\n got %s\nwant %s", got, want)
	}
}

// A program Exec runs has the filter: what the seed relies on when it runs the install
// script's mariadb-install-db through `dolphin nosync`.
func TestExecPassesTheFilterOn(t *testing.T) {
	if !Supported() {
		t.Skipf("no filter for %s", runtime.GOARCH)
	}
	if got, want := helper(t, "exec"), "fsync=ok fdatasync=ok sync_file_range=ok syncfs=ok fsync_file=ok write=ok close_bad=EBADF"; got != want {
		t.Fatalf("after exec:\n got %s\nwant %s", got, want)
	}
}

// The filter's jumps, run in x/net/bpf's VM (which loads words big-endian, so the test's
// seccomp_data is written big-endian; the kernel reads it in the machine's order): every
// flush of this architecture is skipped, any other call runs, and so does a flush made
// through another architecture's ABI (whose numbers mean other calls).
func TestProgramJumps(t *testing.T) {
	if table == nil {
		t.Skipf("no filter for %s", runtime.GOARCH)
	}
	insns, err := program(*table)
	if err != nil {
		t.Fatal(err)
	}
	raw := make([]bpf.RawInstruction, len(insns))
	for i, in := range insns {
		raw[i] = bpf.RawInstruction{Op: in.Code, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	prog, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("the filter does not disassemble")
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	run := func(nr, arch uint32) uint32 {
		data := make([]byte, 64) // struct seccomp_data: nr, arch, instruction_pointer, args[6]
		binary.BigEndian.PutUint32(data[0:], nr)
		binary.BigEndian.PutUint32(data[4:], arch)
		n, err := vm.Run(data)
		if err != nil {
			t.Fatal(err)
		}
		return uint32(n)
	}
	skipped := uint32(unix.SECCOMP_RET_ERRNO) // errno 0
	for _, nr := range table.flushes {
		if got := run(nr, table.arch); got != skipped {
			t.Errorf("call %d returned action %#x, want skipped (%#x)", nr, got, skipped)
		}
		if got := run(nr, table.arch^1); got != unix.SECCOMP_RET_ALLOW {
			t.Errorf("call %d of another architecture returned action %#x, want allowed", nr, got)
		}
	}
	for _, nr := range []uint32{unix.SYS_READ, unix.SYS_WRITE, unix.SYS_CLOSE, unix.SYS_EXECVE, unix.SYS_OPENAT, unix.SYS_RENAMEAT} {
		if got := run(uint32(nr), table.arch); got != unix.SECCOMP_RET_ALLOW {
			t.Errorf("call %d returned action %#x, want allowed", nr, got)
		}
	}
}
