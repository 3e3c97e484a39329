package chaos

import (
	"slices"
	"time"
)

// Outage is the longest stretch without any acknowledged write between at (a fault) and
// until: the write outage the fault caused in the clients' view. A client acknowledged just
// after the fault by the server it hit does not hide the gap that follows.
func (c *Checker) Outage(at, until time.Time) time.Duration {
	start, end := c.OutageWindow(at, until)
	return end.Sub(start)
}

// OutageWindow is where the Outage between at and until lies: from the acknowledgement (or
// at) before the longest stretch to the one that ended it (or until). A failover's gap starts
// near the fault; one that starts later was caused by what followed (a rejoin, a restart).
func (c *Checker) OutageWindow(at, until time.Time) (start, end time.Time) {
	var answered []time.Time
	for _, a := range c.Acks() {
		if !a.Answered.Before(at) && !a.Answered.After(until) {
			answered = append(answered, a.Answered)
		}
	}
	slices.SortFunc(answered, func(a, b time.Time) int { return a.Compare(b) })
	start, end = at, at
	prev := at
	for _, t := range append(answered, until) {
		if t.Sub(prev) > end.Sub(start) {
			start, end = prev, t
		}
		prev = t
	}
	return start, end
}

// FirstAckOfWriteSentAfter is when the first write sent at or after t was acknowledged, by
// any writer.
func (c *Checker) FirstAckOfWriteSentAfter(t time.Time) (time.Time, bool) {
	var first time.Time
	for _, a := range c.Acks() {
		if !a.Sent.Before(t) && (first.IsZero() || a.Answered.Before(first)) {
			first = a.Answered
		}
	}
	return first, !first.IsZero()
}
