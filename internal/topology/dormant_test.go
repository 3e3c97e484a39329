package topology

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
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

// TestDormantEngineKeepsNoPools: an engine whose instances have no address closes the
// connection pools its last cycle opened (each holds a goroutine) until a trigger wakes it.
func TestDormantEngineKeepsNoPools(t *testing.T) {
	var dormant atomic.Bool
	var cycles atomic.Int32
	// Port 1 on loopback refuses: the cycle opens a pool per member and fails to reach it.
	members := []Member{{Name: "a", Host: "127.0.0.1", Port: 1}, {Name: "b", Host: "127.0.0.1", Port: 2}}
	e := New(Config{
		Flavor:   dbsql.FlavorMariaDB,
		Interval: 20 * time.Millisecond,
		Members:  func() []Member { cycles.Add(1); return members },
		Dormant:  dormant.Load,
		Log:      logr.Discard(),
	}, Persisted{})
	pools := func() int {
		e.mu.Lock()
		defer e.mu.Unlock()
		return len(e.conns)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = e.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	testenv.EventuallyTrue(t, 5*time.Second, "pools of the awake engine", func() bool { return pools() == len(members) })
	dormant.Store(true)
	testenv.EventuallyTrue(t, 5*time.Second, "no pools once dormant", func() bool { return pools() == 0 })
	n := cycles.Load()
	time.Sleep(200 * time.Millisecond)
	if cycles.Load() != n || pools() != 0 {
		t.Fatalf("dormant: %d more cycles, %d pools; want none", cycles.Load()-n, pools())
	}
}
