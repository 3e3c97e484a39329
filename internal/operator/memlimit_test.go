package operator

import (
	"math"
	"os"
	"runtime/debug"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/go-logr/logr"
)

// keepMemoryLimit restores Go's memory limit after a test that changes it.
func keepMemoryLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
}

// TestMemoryLimitFollowsTheContainer: the operator's Go memory limit is the ratio of its
// container's limit, none without a container limit, the environment's GOMEMLIMIT when set,
// and untouched with ratio 0.
func TestMemoryLimitFollowsTheContainer(t *testing.T) {
	const container = 256 << 20
	cases := []struct {
		name      string
		ratio     float64
		env       map[string]string
		provider  memlimit.Provider
		wantLimit int64
	}{
		{name: "container limit", ratio: 0.9, provider: memlimit.Limit(container), wantLimit: container * 9 / 10},
		{name: "no container limit", ratio: 0.9, provider: func() (uint64, error) { return 0, memlimit.ErrNoLimit }, wantLimit: math.MaxInt64},
		{name: "GOMEMLIMIT wins", ratio: 0.9, env: map[string]string{"GOMEMLIMIT": "100MiB"}, provider: memlimit.Limit(container), wantLimit: 77 << 20},
		{name: "AUTOMEMLIMIT=off", ratio: 0.9, env: map[string]string{"AUTOMEMLIMIT": "off"}, provider: memlimit.Limit(container), wantLimit: 77 << 20},
		{name: "ratio 0", ratio: 0, provider: memlimit.Limit(container), wantLimit: 77 << 20},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			keepMemoryLimit(t)
			for _, k := range []string{"GOMEMLIMIT", "AUTOMEMLIMIT"} {
				t.Setenv(k, "") // restored after the test
				if err := os.Unsetenv(k); err != nil {
					t.Fatal(err)
				}
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			// 77 MiB stands for whatever the runtime had before: a case that must leave the
			// limit alone leaves this one.
			debug.SetMemoryLimit(77 << 20)
			setMemoryLimit(tc.ratio, tc.provider, logr.Discard())
			if got := debug.SetMemoryLimit(-1); got != tc.wantLimit {
				t.Errorf("Go memory limit %d, want %d", got, tc.wantLimit)
			}
		})
	}
}
