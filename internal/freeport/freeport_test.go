package freeport

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"syscall"
	"testing"
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

// TestPickSkipsABusyPort holds a listener on a port Pick could choose and checks Free sees it.
func TestPickSkipsABusyPort(t *testing.T) {
	ports, err := Pick(1)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(ports[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if Free(ports[0]) {
		t.Errorf("Free(%d) with a listener on it", ports[0])
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
