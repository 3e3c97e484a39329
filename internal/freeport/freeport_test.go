package freeport

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
)

func TestCandidateRanges(t *testing.T) {
	for _, tc := range []struct {
		lo, hi int
		want   [][2]int
	}{
		{32768, 60999, [][2]int{{20000, 32767}, {61000, 65535}}},
		{1024, 65535, nil}, // everything ephemeral: nothing safe
		{10000, 30000, [][2]int{{30001, 65535}}},
		{40000, 65535, [][2]int{{20000, 39999}}},
	} {
		if got := candidateRanges(tc.lo, tc.hi); !slices.Equal(got, tc.want) {
			t.Errorf("candidateRanges(%d, %d) = %v, want %v", tc.lo, tc.hi, got, tc.want)
		}
	}
	r := [][2]int{{20000, 20001}, {61000, 61002}}
	for i, want := range []int{20000, 20001, 61000, 61001, 61002} {
		if got := nth(r, i); got != want {
			t.Errorf("nth(%d) = %d, want %d", i, got, want)
		}
	}
}

// TestPickOutsideTheEphemeralRange asks for many ports: each is distinct, outside the range
// outgoing connections take their local ports from, bindable, and not handed out twice while
// reserved.
func TestPickOutsideTheEphemeralRange(t *testing.T) {
	lo, hi := ephemeralRange()
	first, err := Pick(50)
	if err != nil {
		t.Fatal(err)
	}
	second, err := Pick(50)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range append(first, second...) {
		if seen[p] {
			t.Errorf("port %d handed out twice", p)
		}
		seen[p] = true
		if p >= lo && p <= hi {
			t.Errorf("port %d is in the ephemeral range %d-%d", p, lo, hi)
		}
		if p < Lowest || p > Highest {
			t.Errorf("port %d outside %d-%d", p, Lowest, Highest)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Errorf("port %d: %v", p, err)
			continue
		}
		l.Close()
	}
}

// TestPickSkipsABusyPort gives pick two one-port ranges, one held by a listener: it hands
// out the other, and fails when only the busy one is left.
func TestPickSkipsABusyPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	busy := l.Addr().(*net.TCPAddr).Port
	free, err := Pick(1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	got, err := pick(dir, [][2]int{{busy, busy}, {free[0], free[0]}}, 1)
	if err != nil || len(got) != 1 || got[0] != free[0] {
		t.Fatalf("pick = %v, %v; want [%d] (port %d is busy)", got, err, free[0], busy)
	}
	if got, err := pick(t.TempDir(), [][2]int{{busy, busy}}, 1); err == nil {
		t.Errorf("pick with only the busy port %d = %v, want an error", busy, got)
	}
	// The free port is now claimed in dir: a second pick there does not hand it out again.
	if got, err := pick(dir, [][2]int{{free[0], free[0]}}, 1); err == nil {
		t.Errorf("pick handed out the claimed port again: %v", got)
	}
}

// TestReservations checks claims: a second claim of a port is refused while the first is
// young, an expired one is taken over, old claims are swept, and an unusable folder hands
// out ports unreserved instead of none.
func TestReservations(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ports")
	r := openReservations(dir)
	if r == nil {
		t.Fatal("openReservations failed on a new folder")
	}
	if st, err := os.Stat(dir); err != nil || st.Mode()&os.ModeSticky == 0 || st.Mode().Perm() != 0o777 {
		t.Errorf("reservation folder mode %v (%v), want sticky and world-writable: other users must claim too", st.Mode(), err)
	}
	if !r.claim(20001) {
		t.Fatal("first claim refused")
	}
	if r.claim(20001) {
		t.Error("second claim of a young reservation accepted")
	}
	old := time.Now().Add(-2 * ReservationTTL)
	if err := os.Chtimes(filepath.Join(dir, "20001"), old, old); err != nil {
		t.Fatal(err)
	}
	if !r.claim(20001) {
		t.Error("an expired claim was not taken over")
	}
	if r.claim(20001) {
		t.Error("the taken-over claim is not young again")
	}
	ancient := time.Now().Add(-2 * sweepAge)
	if err := os.WriteFile(filepath.Join(dir, "20002"), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(filepath.Join(dir, "20002"), ancient, ancient); err != nil {
		t.Fatal(err)
	}
	r.close()
	r = openReservations(dir)
	if _, err := os.Stat(filepath.Join(dir, "20002")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a claim older than %s was not swept (%v)", sweepAge, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "20001")); err != nil {
		t.Errorf("a young claim was swept: %v", err)
	}
	r.close()

	file := filepath.Join(t.TempDir(), "not-a-folder")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := pick(filepath.Join(file, "ports"), [][2]int{{Lowest, Highest}}, 3); err != nil || len(got) != 3 {
		t.Errorf("pick with an unusable reservation folder = %v, %v; want 3 unreserved ports", got, err)
	}
}

func TestInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = net.Listen("tcp", l.Addr().String())
	if !InUse(err) || !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("InUse(%v) = false", err)
	}
	logged := fmt.Errorf("operator exited; last lines:\n  Error: running manager: listen tcp 127.0.0.1:44717: bind: address already in use")
	if !InUse(logged) {
		t.Errorf("InUse(%q) = false", logged)
	}
	if InUse(errors.New("connection refused")) || InUse(nil) {
		t.Error("InUse true for another error")
	}
}
