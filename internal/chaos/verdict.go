package chaos

import (
	"fmt"
	"slices"
	"time"
)

// SplitBrainWindows counts the windows in which two servers accepted writes at the same
// time. faults are the times faults were injected, in order; the window of fault i runs from
// it to the next fault, and writes belong to the window they were sent in (writes before the
// first fault form a window of their own).
//
// Each window also holds the last write acknowledged before its fault (the primary the fault
// hit). A window holds evidence of split brain when a server B acknowledged a write b while another
// server A acknowledged one write before b was sent and another write sent after b was
// answered: A accepted writes strictly before and strictly after B did. One fault moves the
// primary at most once (A to B), so within one window that means both were writable — a
// fenced old primary that resumed, a stale Service endpoint. Judging only by intervals that
// do not overlap keeps the verdict independent of how long acknowledgements took.
func SplitBrainWindows(acks []Ack, faults []time.Time) int {
	faults = slices.Clone(faults)
	slices.SortFunc(faults, func(a, b time.Time) int { return a.Compare(b) })
	windows := make([][]Ack, len(faults)+1)
	for _, a := range acks {
		i, _ := slices.BinarySearchFunc(faults, a.Sent, func(f, t time.Time) int {
			if f.After(t) {
				return 1
			}
			return -1
		})
		windows[i] = append(windows[i], a)
	}
	for i, f := range faults {
		var before *Ack
		for j := range acks {
			if a := &acks[j]; a.Sent.Before(f) && (before == nil || a.Answered.After(before.Answered)) {
				before = a
			}
		}
		if before != nil {
			windows[i+1] = append(windows[i+1], *before)
		}
	}
	n := 0
	for _, w := range windows {
		if splitBrainIn(w) {
			n++
		}
	}
	return n
}

// splitBrainIn reports whether one window's acknowledgements show two servers writable at once.
func splitBrainIn(acks []Ack) bool {
	firstAnswer := map[uint32]time.Time{}
	lastSent := map[uint32]time.Time{}
	for _, a := range acks {
		if t, ok := firstAnswer[a.ServerID]; !ok || a.Answered.Before(t) {
			firstAnswer[a.ServerID] = a.Answered
		}
		if t, ok := lastSent[a.ServerID]; !ok || a.Sent.After(t) {
			lastSent[a.ServerID] = a.Sent
		}
	}
	if len(firstAnswer) < 2 {
		return false
	}
	for _, b := range acks {
		for server, first := range firstAnswer {
			if server != b.ServerID && first.Before(b.Sent) && lastSent[server].After(b.Answered) {
				return true
			}
		}
	}
	return false
}

// Round is what one fault cost: its kind, when it was injected and the client-view outage
// (fault to the acknowledgement of the first write sent after it).
type Round struct {
	Fault  string
	At     time.Time
	Outage time.Duration
}

// Line is the suite's summary of one fault kind:
// `chaos fault=NAME rounds=N outage_p50=…s outage_p99=…s lost=N split_brain=N stale_reads=N`.
func Line(fault string, outages []time.Duration, lost, splitBrain, staleReads int) string {
	return fmt.Sprintf("chaos fault=%s rounds=%d outage_p50=%.2fs outage_p99=%.2fs lost=%d split_brain=%d stale_reads=%d",
		fault, len(outages), Percentile(outages, 50), Percentile(outages, 99), lost, splitBrain, staleReads)
}

// Percentile is the p-th percentile (nearest rank) in seconds; 0 for no values.
func Percentile(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[max(0, min((p*len(s)+99)/100-1, len(s)-1))].Seconds()
}
