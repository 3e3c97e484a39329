package binlog

import (
	"testing"
	"time"
)

// The bench's figures come from these two: checked here so that bench-pitr's numbers mean
// what they say.
func TestPercentileNearestRank(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, tt := range []struct {
		p    int
		want time.Duration
	}{{50, 5}, {90, 9}, {99, 10}, {100, 10}, {1, 1}} {
		if got := percentile(ds, tt.p); got != tt.want {
			t.Errorf("percentile(1..10, %d) = %v, want %v", tt.p, got, tt.want)
		}
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("percentile(none) = %v", got)
	}
}

func TestArchiveLags(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	samples := []archivedAt{
		{at: at(100), pos: MustParse("0-1-2")},
		{at: at(1500), pos: MustParse("0-1-5")},
	}
	acks := []ack{
		{gtid: GTID{Server: 1, Seq: 1}, at: at(0)},    // stored at 100 ms
		{gtid: GTID{Server: 1, Seq: 2}, at: at(200)},  // stored before its ack: 0
		{gtid: GTID{Server: 1, Seq: 4}, at: at(1000)}, // stored at 1500 ms
		{gtid: GTID{Server: 1, Seq: 6}, at: at(1000)}, // never seen stored: left out
	}
	got := archiveLags(acks, samples)
	want := []time.Duration{100 * time.Millisecond, 0, 500 * time.Millisecond}
	if len(got) != len(want) {
		t.Fatalf("archiveLags = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("archiveLags[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}
