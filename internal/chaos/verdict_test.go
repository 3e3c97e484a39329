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

func TestBitset(t *testing.T) {
	var b bitset
	for _, n := range []int64{1, 63, 64, 65, 1000} {
		b.set(n)
	}
	var got []int64
	for n := range b.members() {
		got = append(got, n)
	}
	if len(got) != 5 || got[0] != 1 || got[4] != 1000 || !b.has(64) || b.has(2) || b.has(5000) {
		t.Errorf("members %v", got)
	}
}

// Judged windows give their acknowledgements back: a long run keeps at most two windows'.
func TestMarkForgetsJudgedWindows(t *testing.T) {
	t0 := time.Now().Add(-time.Hour)
	c := &Checker{opts: Options{OpTimeout: time.Second}, acked: map[int]*bitset{1: {}}, nextSeq: map[int]int64{1: 1}}
	seq := int64(0)
	for w := range 5 {
		start := t0.Add(time.Duration(w) * time.Minute)
		c.Mark("kill9", start)
		for i := range 100 {
			seq++
			sent := start.Add(time.Duration(i) * 100 * time.Millisecond)
			c.acks = append(c.acks, Ack{Client: 1, Seq: seq, ServerID: uint32(1 + w%2), Sent: sent, Answered: sent.Add(time.Millisecond)})
		}
		c.nextSeq[1] = seq + 1
	}
	// The window a Mark closes is judged at the next Mark (writes sent just before a fault may
	// still be answered after it): the last two windows are kept, the first three judged.
	if len(c.acks) != 200 || c.judged != 3 {
		t.Errorf("%d acknowledgements kept, %d windows judged; want the last two windows' (200), 3 judged", len(c.acks), c.judged)
	}
	for _, m := range c.marks[:3] {
		if m.splitBrain {
			t.Errorf("window at %v judged split brain: one server per window, alternating by window", m.at)
		}
	}
}

// Acknowledgements fold into runs per server, and a write's run is found by its sequence.
func TestAckRuns(t *testing.T) {
	c := &Checker{ackRuns: map[int][]AckRun{}}
	t0 := time.Unix(100, 0)
	for seq := int64(1); seq <= 10; seq++ {
		server := uint32(1)
		if seq > 6 {
			server = 2
		}
		c.noteRunLocked(1, seq, server, t0.Add(time.Duration(seq)*time.Second))
	}
	if n := len(c.ackRuns[1]); n != 2 {
		t.Fatalf("%d runs, want 2: %+v", n, c.ackRuns[1])
	}
	for seq, want := range map[int64]uint32{1: 1, 6: 1, 7: 2, 10: 2} {
		r, ok := c.runOf(1, seq)
		if !ok || r.ServerID != want {
			t.Errorf("run of write %d: %+v %v, want server %d", seq, r, ok, want)
		}
	}
	if r, ok := c.runOf(1, 11); ok {
		t.Errorf("write 11 was never acknowledged, yet in run %+v", r)
	}
	if r, _ := c.runOf(1, 8); !r.FirstAck.Equal(t0.Add(7*time.Second)) || !r.LastAck.Equal(t0.Add(10*time.Second)) {
		t.Errorf("run times %v-%v", r.FirstAck, r.LastAck)
	}
}
