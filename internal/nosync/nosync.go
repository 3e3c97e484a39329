// Package nosync runs a program whose flushes to disk are skipped: its fsync, fdatasync,
// sync_file_range, syncfs and sync system calls return success without doing anything. The
// seed init container runs mariadb-install-db (or mysqld --initialize-insecure) this way:
// the bootstrap flushes its DDL log, Aria log and redo log ~1,000 times while it creates a
// few hundred files that nothing reads before the server starts, and three instances
// initialising at once on a small node spend most of their time waiting for those flushes.
// The caller makes the result durable once afterwards (syncfs of the data directory) before
// it marks the directory initialised, so a crash in between leaves an unmarked directory,
// which the seed clears and initialises again.
//
// It is a seccomp filter (SECCOMP_RET_ERRNO with errno 0, as `systemd-nspawn
// --suppress-sync` does), installed on every thread and inherited across execve, so it needs
// no library in the database image (libeatmydata does the same with LD_PRELOAD, but the
// official images do not carry it). See docs/design/0065-install-without-flushes.md.
package nosync

import "errors"

// ErrUnsupported is returned where the filter cannot be installed: not Linux, or an
// architecture whose system call numbers this package does not know.
var ErrUnsupported = errors.New("skipping flushes needs Linux on amd64 or arm64")
