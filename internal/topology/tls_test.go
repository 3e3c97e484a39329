package topology

import (
	"testing"
	"time"
)

func TestNeedsReload(t *testing.T) {
	current := time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name            string
		served, current time.Time
		want            bool
	}{
		{"serves the current one", current, current, false},
		{"serves an older one", current.Add(-24 * time.Hour), current, true},
		{"TLS off", current.Add(-24 * time.Hour), time.Time{}, false},
		{"whole seconds only", current, current.Add(500 * time.Millisecond), false},
		{"serves a newer one (renewed meanwhile)", current.Add(time.Hour), current, false},
	} {
		if got := needsReload(tc.served, tc.current); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
