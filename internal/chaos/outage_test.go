package chaos

import (
	"testing"
	"time"
)

// TestOutageWindow checks where the longest stretch without an acknowledgement is found: after
// the fault, between acknowledgements, or up to the end; acknowledgements outside the window
// do not count.
func TestOutageWindow(t *testing.T) {
	at := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	s := func(sec float64) time.Time { return at.Add(time.Duration(sec * float64(time.Second))) }
	ack := func(sec float64) Ack { return Ack{Answered: s(sec)} }
	cases := []struct {
		name       string
		acks       []Ack
		until      float64
		start, end float64
	}{
		{"the failover's gap, from the fault", []Ack{ack(-0.5), ack(2.3), ack(2.4), ack(3)}, 4, 0, 2.3},
		{"a later gap is longer", []Ack{ack(0.1), ack(1.2), ack(1.3), ack(4.5)}, 5, 1.3, 4.5},
		{"nothing acknowledged", nil, 3, 0, 3},
		{"acknowledgements after until do not count", []Ack{ack(0.5), ack(9)}, 2, 0.5, 2},
	}
	for _, tc := range cases {
		c := &Checker{acks: tc.acks}
		start, end := c.OutageWindow(at, s(tc.until))
		if !start.Equal(s(tc.start)) || !end.Equal(s(tc.end)) {
			t.Errorf("%s: window %v..%v, want %v..%v", tc.name, start.Sub(at), end.Sub(at),
				s(tc.start).Sub(at), s(tc.end).Sub(at))
		}
		if got, want := c.Outage(at, s(tc.until)), s(tc.end).Sub(s(tc.start)); got != want {
			t.Errorf("%s: outage %v, want %v", tc.name, got, want)
		}
	}
}
