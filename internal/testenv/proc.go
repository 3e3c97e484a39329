package testenv

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times (100 on Linux).
const clockTicks = 100

// ProcStatusKB reads a "kB" field of /proc/<pid>/status, e.g. VmRSS or VmHWM.
func ProcStatusKB(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the status of pid %d: %w", pid, err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != field {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("pid %d: %s: %w", pid, field, err)
		}
		return kb, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("reading the status of pid %d: %w", pid, err)
	}
	return 0, fmt.Errorf("pid %d: no %s in its status", pid, field)
}

// MustProcStatusKB is ProcStatusKB failing the test on an error.
func MustProcStatusKB(t testing.TB, pid int, field string) int64 {
	t.Helper()
	kb, err := ProcStatusKB(pid, field)
	if err != nil {
		t.Fatal(err)
	}
	return kb
}

// ProcCPU reads a process's own CPU time (utime + stime) and that of its children it waited
// for (cutime + cstime) from /proc/<pid>/stat.
func ProcCPU(pid int) (self, children time.Duration, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("reading the CPU times of pid %d: %w", pid, err)
	}
	// The fields after the command name in parentheses (it may hold spaces): state is
	// field 3, utime 14.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 15 {
		return 0, 0, fmt.Errorf("pid %d: short stat line %q", pid, s)
	}
	var ticks [4]int64
	for i := range ticks {
		if ticks[i], err = strconv.ParseInt(f[11+i], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("pid %d: stat field %d: %w", pid, 14+i, err)
		}
	}
	tick := time.Second / clockTicks
	return time.Duration(ticks[0]+ticks[1]) * tick, time.Duration(ticks[2]+ticks[3]) * tick, nil
}

// MustProcCPU is ProcCPU's own CPU time, failing the test on an error.
func MustProcCPU(t testing.TB, pid int) time.Duration {
	t.Helper()
	self, _, err := ProcCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	return self
}
