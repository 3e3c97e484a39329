package nosync

import "golang.org/x/sys/unix"

// table: the flushes of the AArch64 ABI.
var table = &syscallTable{arch: unix.AUDIT_ARCH_AARCH64,
	flushes: []uint32{unix.SYS_FSYNC, unix.SYS_FDATASYNC, unix.SYS_SYNC_FILE_RANGE, unix.SYS_SYNCFS, unix.SYS_SYNC}}
