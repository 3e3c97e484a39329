// Package freeport chooses TCP ports for processes that will bind them later (a control-plane
// component, the operator's probe, a test's S3 server): ports that nothing listens on and
// that no outgoing connection can take in the meantime.
//
// The usual "listen on :0, close, hand the port over" picks from the kernel's ephemeral range
// (net.ipv4.ip_local_port_range, 32768–60999 by default), the range every outgoing connection
// takes its local port from: on a machine where other tests open thousands of MySQL client
// connections, such a port is often taken before the new process binds it ("bind: address
// already in use"). Pick chooses outside that range instead, at random, and reserves each port
// it hands out for ReservationTTL with a file under the temporary folder (changed under a file
// lock), so that two test processes running side by side do not hand out the same port. A port can still be taken by a
// process that binds without asking Pick; callers that start a process retry with new ports
// when it fails with InUse.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Bounds of the ports Pick hands out: at or above Lowest and outside the ephemeral range.
// Below Lowest live well-known and registered services and the local Service proxy's ports
// (from 13306 up).
const (
	Lowest  = 20000
	Highest = 65535
)

// ReservationTTL is how long a port handed out by Pick is not handed out again (by any
// process using this package), long enough for the process it was chosen for to bind it.
const ReservationTTL = 3 * time.Minute

// ephemeralRangeFile is where Linux keeps the ephemeral port range.
const ephemeralRangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// Pick returns n distinct TCP ports that nothing listens on (on any address), chosen outside
// the kernel's ephemeral port range and reserved against other callers of Pick for
// ReservationTTL.
func Pick(n int) ([]int, error) {
	return pick(reservationDir(), candidateRanges(ephemeralRange()), n)
}

// reservationDir is the folder of the reservations, shared by every user of the machine (a
// port is the machine's, whoever asks): world-writable and sticky, like /tmp.
func reservationDir() string { return filepath.Join(os.TempDir(), "dolphin-ports") }

// pick is Pick over the given ranges with the reservations in dir. When dir cannot be used
// (another user's folder that this one may not write), ports are handed out unreserved.
func pick(dir string, ranges [][2]int, n int) ([]int, error) {
	total := 0
	for _, r := range ranges {
		total += r[1] - r[0] + 1
	}
	if total == 0 {
		return nil, errors.New("freeport: no ports outside the ephemeral range")
	}
	res := openReservations(dir)
	defer res.close()
	ports := make([]int, 0, n)
	taken := map[int]bool{}
	for tries := 0; len(ports) < n; tries++ {
		if tries > 50*n+1000 {
			return nil, fmt.Errorf("freeport: found only %d of %d free ports in %v", len(ports), n, ranges)
		}
		p := nth(ranges, rand.IntN(total))
		if taken[p] || !res.claim(p) {
			continue
		}
		taken[p] = true
		if !Free(p) {
			continue // the claim stays: someone uses the port
		}
		ports = append(ports, p)
	}
	return ports, nil
}

// Free reports whether a TCP listener can bind port on every address right now.
func Free(port int) bool {
	l, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// InUse reports whether err, or the text of a process's log quoted in it, says that an
// address was already in use.
func InUse(err error) bool {
	if err == nil {
		return false
	}
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
}

// reservations are the claims in one folder, changed under an exclusive lock (flock on
// DIR/.lock) so that two processes never both take an expired claim. A nil *reservations
// (the folder is unusable) claims every port.
type reservations struct {
	dir  string
	lock *os.File
}

// openReservations locks dir (creating it world-writable and sticky) and sweeps claims that
// expired long ago; nil when that fails.
func openReservations(dir string) *reservations {
	if err := os.Mkdir(dir, 0o777|os.ModeSticky); err != nil && !errors.Is(err, os.ErrExist) {
		return nil
	}
	_ = os.Chmod(dir, 0o777|os.ModeSticky) // the umask took bits away (fails unless ours: fine)
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		_ = lock.Close()
		return nil
	}
	r := &reservations{dir: dir, lock: lock}
	r.sweep()
	return r
}

func (r *reservations) close() {
	if r != nil {
		_ = r.lock.Close() // releases the flock
	}
}

// claim reserves port for ReservationTTL; false when a younger claim holds it.
func (r *reservations) claim(port int) bool {
	if r == nil {
		return true
	}
	path := filepath.Join(r.dir, strconv.Itoa(port))
	st, err := os.Stat(path)
	if err == nil && time.Since(st.ModTime()) < ReservationTTL {
		return false
	}
	now := time.Now()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o666)
	if err != nil {
		// Another user's expired claim (sticky folder): refresh it if allowed, else skip.
		return os.Chtimes(path, now, now) == nil
	}
	_ = f.Close()
	return os.Chtimes(path, now, now) == nil
}

// sweepAge is how old a claim must be before sweep removes it.
const sweepAge = 10 * ReservationTTL

// sweep removes claims that expired long ago, so the folder does not grow without bound.
func (r *reservations) sweep() {
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > sweepAge {
			_ = os.Remove(filepath.Join(r.dir, e.Name()))
		}
	}
}

// ephemeralRange returns the kernel's ephemeral port range (Linux's default when unreadable).
func ephemeralRange() (lo, hi int) {
	lo, hi = 32768, 60999
	data, err := os.ReadFile(ephemeralRangeFile)
	if err != nil {
		return lo, hi
	}
	f := strings.Fields(string(data))
	if len(f) != 2 {
		return lo, hi
	}
	l, err1 := strconv.Atoi(f[0])
	h, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || l > h {
		return lo, hi
	}
	return l, h
}

// candidateRanges returns the inclusive ranges within [Lowest, Highest] outside [lo, hi].
func candidateRanges(lo, hi int) [][2]int {
	var out [][2]int
	if lo > Lowest {
		out = append(out, [2]int{Lowest, min(lo-1, Highest)})
	}
	if hi < Highest {
		out = append(out, [2]int{max(hi+1, Lowest), Highest})
	}
	return out
}

// nth returns the i-th port of the ranges taken in order.
func nth(ranges [][2]int, i int) int {
	for _, r := range ranges {
		if size := r[1] - r[0] + 1; i >= size {
			i -= size
		} else {
			return r[0] + i
		}
	}
	return -1
}
