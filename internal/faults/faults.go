// Package faults holds Dolphin's fault points: named places in a multi-step change where an
// end-to-end test can make the process pause, so that it is killed exactly there and the
// test shows that a restarted operator finishes or undoes the change (issue 36's "the
// operator restarted at every step"). They are off unless the environment variable
// DOLPHIN_FAULT_PAUSE names them — `point=duration[,point=duration…]`, e.g.
// `cutover-detached=8s` — and cost a map lookup otherwise. They never change what Dolphin
// does, only when.
package faults

import (
	"context"
	"os"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Env is the environment variable that arms fault points.
const Env = "DOLPHIN_FAULT_PAUSE"

// Fault points of migrate.Cutover, in the order it reaches them.
const (
	// CutoverFenced: the source is read-only, its clients' sessions ended, its final
	// position read; the target still replicates.
	CutoverFenced = "cutover-fenced"
	// CutoverDetached: the target holds the final position and was detached from the
	// source (RESET SLAVE ALL); it is still read-only.
	CutoverDetached = "cutover-detached"
	// CutoverOpened: the target was opened for writes; nothing recorded the cutover yet.
	CutoverOpened = "cutover-opened"
)

var (
	once   sync.Once
	pauses map[string]time.Duration
)

// Parse reads a DOLPHIN_FAULT_PAUSE value; entries it cannot read are skipped.
func Parse(v string) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, e := range strings.Split(v, ",") {
		name, d, ok := strings.Cut(strings.TrimSpace(e), "=")
		if !ok {
			continue
		}
		if dur, err := time.ParseDuration(d); err == nil && dur > 0 {
			out[name] = dur
		}
	}
	return out
}

// Pause waits at point for as long as DOLPHIN_FAULT_PAUSE says (or until ctx ends), logging
// that it does; without the variable it returns at once.
func Pause(ctx context.Context, point string) {
	once.Do(func() { pauses = Parse(os.Getenv(Env)) })
	d, ok := pauses[point]
	if !ok {
		return
	}
	log.FromContext(ctx).Info("fault point: pausing", "point", point, "for", d.String())
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
