package backup

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// pipeSize is the capacity asked for the tool's stdout pipe. Linux's default is 64 KiB and
// its limit for unprivileged processes 1 MiB (/proc/sys/fs/pipe-max-size): a larger pipe means
// fewer, larger reads and fewer wake-ups of the tool and of the reader.
const pipeSize = 1 << 20

// growPipe raises the capacity of the pipe r reads, when r is one. It is best effort: the
// stream is the same either way.
func growPipe(r io.Reader) {
	f, ok := r.(*os.File)
	if !ok {
		return
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeSize)
	})
}
