package topology

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// A dormant cluster (no instance runs) is observed once, then only when triggered; one that
// wakes up is observed every Interval again.
func TestDormantEngineObservesOnlyWhenTriggered(t *testing.T) {
	var cycles atomic.Int32
	var dormant atomic.Bool
	dormant.Store(true)
	e := New(Config{
		Interval: 20 * time.Millisecond,
		Members:  func() []Member { cycles.Add(1); return nil },
		Dormant:  dormant.Load,
		Log:      logr.Discard(),
	}, Persisted{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = e.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	time.Sleep(300 * time.Millisecond) // 15 intervals
	if n := cycles.Load(); n != 1 {
		t.Fatalf("%d cycles while dormant, want the first one only", n)
	}
	e.Trigger()
	testenv.EventuallyTrue(t, 5*time.Second, "a cycle after the trigger", func() bool { return cycles.Load() == 2 })
	dormant.Store(false)
	e.Trigger()
	testenv.EventuallyTrue(t, 5*time.Second, "cycles every interval once awake", func() bool { return cycles.Load() >= 8 })
}
