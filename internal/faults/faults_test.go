package faults

import (
	"maps"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	got := Parse(" cutover-fenced=8s, cutover-opened=250ms,bad,x=, y=-1s, z=soon")
	want := map[string]time.Duration{"cutover-fenced": 8 * time.Second, "cutover-opened": 250 * time.Millisecond}
	if !maps.Equal(got, want) {
		t.Errorf("Parse: %v, want %v", got, want)
	}
	if len(Parse("")) != 0 {
		t.Error("an empty value arms a point")
	}
}
