package e2e

import (
	"testing"
	"time"
)

// TestRefusalExpected checks which kubelet log lines forbiddenInOperatorLogs skips: only those
// written inside a window, by the line's own time.
func TestRefusalExpected(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	windows := []refusalWindow{{at("2026-12-07T06:17:00Z"), at("2026-12-07T06:17:30Z")}}
	for line, want := range map[string]bool{
		`2026-12-07T06:17:12.859012345Z stderr F {"msg":"… is forbidden: User …"}`: true,
		`2026-12-07T06:17:30Z stderr F {"msg":"… is forbidden: User …"}`:           true,
		`2026-12-07T06:16:59.999Z stderr F {"msg":"… is forbidden: User …"}`:       false,
		`2026-12-07T06:18:00Z stderr F {"msg":"… is forbidden: User …"}`:           false,
		`not a time stderr F {"msg":"… is forbidden: User …"}`:                     false,
	} {
		if got := refusalExpected(line, windows); got != want {
			t.Errorf("refusalExpected(%q) = %v, want %v", line, got, want)
		}
	}
	if refusalExpected(`2026-12-07T06:17:12Z stderr F x`, nil) {
		t.Error("a line was skipped without any window")
	}
}
