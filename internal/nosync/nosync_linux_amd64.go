package nosync

import "golang.org/x/sys/unix"

// table: the flushes of the x86-64 ABI (calls of the x32 and i386 ABIs are left alone).
var table = &syscallTable{arch: unix.AUDIT_ARCH_X86_64,
	flushes: []uint32{unix.SYS_FSYNC, unix.SYS_FDATASYNC, unix.SYS_SYNC_FILE_RANGE, unix.SYS_SYNCFS, unix.SYS_SYNC}}
