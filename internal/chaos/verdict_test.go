package chaos

import (
	"testing"
	"time"
)

func TestSplitBrainWindows(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ack := func(server uint32, sent, answered int) Ack {
		return Ack{ServerID: server, Sent: at(sent), Answered: at(answered)}
	}
	cases := []struct {
		name   string
		acks   []Ack
		faults []time.Time
		want   int
	}{
		{"one server", []Ack{ack(1, 0, 5), ack(1, 10, 15), ack(1, 20, 25)}, nil, 0},
		{"a failover: A then B", []Ack{ack(1, 0, 5), ack(1, 10, 15), ack(2, 3000, 3005), ack(2, 3010, 3015)}, []time.Time{at(100)}, 0},
		{"A's last ack slow, answered after B's first: not proof",
			[]Ack{ack(1, 0, 5), ack(1, 90, 3100), ack(2, 3000, 3005)}, []time.Time{at(100)}, 0},
		{"A again after B in one window: split brain",
			[]Ack{ack(1, 0, 5), ack(2, 3000, 3005), ack(1, 3010, 3015)}, []time.Time{at(100)}, 1},
		{"interleaved the whole time",
			[]Ack{ack(1, 0, 5), ack(2, 10, 15), ack(1, 20, 25), ack(2, 30, 35)}, nil, 1},
		{"A to B, then back to A after the next fault: two failovers",
			[]Ack{ack(1, 0, 5), ack(2, 3000, 3005), ack(1, 9000, 9005)}, []time.Time{at(100), at(5000)}, 0},
		{"two windows with split brain",
			[]Ack{ack(1, 0, 5), ack(2, 10, 15), ack(1, 20, 25), ack(2, 6000, 6005), ack(1, 6010, 6015), ack(2, 6020, 6025)},
			[]time.Time{at(5000)}, 2},
	}
	for _, c := range cases {
		if got := SplitBrainWindows(c.acks, c.faults); got != c.want {
			t.Errorf("%s: %d split-brain windows, want %d", c.name, got, c.want)
		}
	}
}

func TestLine(t *testing.T) {
	got := Line("kill9", []time.Duration{time.Second, 3 * time.Second, 2 * time.Second}, 0, 0, 0)
	want := "chaos fault=kill9 rounds=3 outage_p50=2.00s outage_p99=3.00s lost=0 split_brain=0 stale_reads=0"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}
