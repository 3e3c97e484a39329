package e2e

import (
	"slices"
	"testing"
	"time"
)

// The rounds kept for a later look are those over twice their kind's median and over 6 s.
func TestSlowChaosRounds(t *testing.T) {
	s := func(secs ...float64) []time.Duration {
		var ds []time.Duration
		for _, x := range secs {
			ds = append(ds, time.Duration(x*float64(time.Second)))
		}
		return ds
	}
	got := slowChaosRounds(map[string][]time.Duration{
		"sigstop":                    s(4.3, 4.1, 14.06, 4.5, 17.05),
		"kill9":                      s(2.2, 5.0, 2.3),    // over twice the median, under 6 s
		"pod-delete-during-failover": s(11.2, 13.4, 11.0), // slow by design, not over twice
	})
	want := []string{"sigstop round 3 14.06s (median 4.50s)", "sigstop round 5 17.05s (median 4.50s)"}
	if !slices.Equal(got, want) {
		t.Errorf("slow rounds %q, want %q", got, want)
	}
}
