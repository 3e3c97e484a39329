package topology

import (
	"testing"
	"time"
)

// A second promotion within the first one's window keeps the first former primary's
// disconnects: the chaos round that deleted a just-promoted primary read stale data for 1.5 s
// from the first former primary, killed and restarting, after the second promotion had
// dropped its record (make test, 2026-12-07).
func TestFormerPrimariesOfTwoPromotionsAreBothFollowed(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 7, 45, 13, 0, time.UTC)
	e := &Engine{}
	e.noteFormerPrimary("chaos-0", t0)
	e.noteFormerPrimary("chaos-1", t0.Add(700*time.Millisecond))
	if len(e.formers) != 2 {
		t.Fatalf("former primaries after two promotions: %+v, want chaos-0 and chaos-1", e.formers)
	}

	// chaos-0 answers again 1.5 s after its promotion: its refusal is due, and chaos-1's.
	due, kept := dueFormerSteps(e.formers, "chaos-2", t0.Add(1500*time.Millisecond))
	if len(kept) != 2 || len(due) != 2 || due[0].former.name != "chaos-0" || due[0].step != 0 || due[1].step != 0 {
		t.Fatalf("due %+v kept %+v, want step 0 on chaos-0 and chaos-1", due, kept)
	}

	// Its refusal done, the step that ends it is due formerPrimaryRefusal after the promotion.
	kept[0].done = 1
	due, _ = dueFormerSteps(kept, "chaos-2", t0.Add(formerPrimaryRefusal))
	if len(due) != 2 || due[0].former.name != "chaos-0" || due[0].step != 1 {
		t.Fatalf("due %+v, want step 1 on chaos-0", due)
	}

	// A step missed is not done late: the latest due runs.
	due, _ = dueFormerSteps([]formerPrimary{{name: "chaos-0", since: t0}}, "chaos-2", t0.Add(11*time.Second))
	if len(due) != 1 || due[0].step != 2 {
		t.Fatalf("due %+v, want only the last step", due)
	}

	// Promoted back, past the window or all done: finished.
	for name, c := range map[string]struct {
		f       formerPrimary
		primary string
		at      time.Duration
	}{
		"primary again": {formerPrimary{name: "chaos-0", since: t0}, "chaos-0", time.Second},
		"past window":   {formerPrimary{name: "chaos-0", since: t0}, "chaos-2", formerPrimaryWindow + time.Second},
		"all done":      {formerPrimary{name: "chaos-0", since: t0, done: len(formerPrimaryDisconnects)}, "chaos-2", time.Second},
	} {
		if due, kept := dueFormerSteps([]formerPrimary{c.f}, c.primary, t0.Add(c.at)); len(due) != 0 || len(kept) != 0 {
			t.Errorf("%s: due %+v kept %+v, want it finished", name, due, kept)
		}
	}

	// The same instance replaced again: one record, the newer.
	e.noteFormerPrimary("chaos-0", t0.Add(5*time.Second))
	n := 0
	for _, f := range e.formers {
		if f.name == "chaos-0" {
			n++
			if !f.since.Equal(t0.Add(5 * time.Second)) {
				t.Errorf("chaos-0's record since %v, want the newer promotion's", f.since)
			}
		}
	}
	if n != 1 {
		t.Errorf("records of chaos-0: %d, want 1 (%+v)", n, e.formers)
	}
	for i := range e.formers {
		if e.formers[i].name == "chaos-1" {
			e.formers[i].done = 1
		}
	}
	if !e.refusingFormer("chaos-1") || e.refusingFormer("chaos-0") {
		t.Errorf("refusals under way: chaos-1 %v chaos-0 %v, want only chaos-1's", e.refusingFormer("chaos-1"), e.refusingFormer("chaos-0"))
	}
}
