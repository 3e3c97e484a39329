//go:build linux && !amd64 && !arm64

package nosync

// table: none — this package does not know this architecture's system call numbers.
var table *syscallTable
