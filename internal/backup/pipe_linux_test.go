package backup

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestGrowPipe: the tool's stdout pipe gets pipeSize; anything else is left alone.
func TestGrowPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	growPipe(r)
	rc, err := r.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var size int
	var sizeErr error
	if err := rc.Control(func(fd uintptr) { size, sizeErr = unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0) }); err != nil {
		t.Fatal(err)
	}
	if sizeErr != nil {
		t.Fatal(sizeErr)
	}
	if b, err := os.ReadFile("/proc/sys/fs/pipe-max-size"); err == nil {
		if limit, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && limit < pipeSize {
			t.Skipf("this machine's pipe-max-size is %d", limit)
		}
	}
	if size != pipeSize {
		t.Errorf("pipe size %d after growPipe, want %d", size, pipeSize)
	}
	growPipe(nil) // not a pipe: nothing happens
}
