package operator

import (
	"errors"
	"math"
	"os"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/go-logr/logr"
)

// DefaultMemoryLimitRatio is the share of the container's memory limit the operator gives Go
// as its soft memory limit (GOMEMLIMIT) when the environment sets none.
const DefaultMemoryLimitRatio = 0.9

// setMemoryLimit gives the Go runtime a soft memory limit of ratio × the memory limit of the
// operator's container (its cgroup, v1 or v2, read by provider), as production Go services do:
// near the limit the garbage collector works harder instead of letting the kernel kill the
// process. GOMEMLIMIT or AUTOMEMLIMIT=off in the environment win; ratio 0 turns it off; no
// limit (none set, or not on Linux) leaves Go without one. It logs what it did. Failing to read the limit is logged, not fatal:
// the operator runs as it would without it.
func setMemoryLimit(ratio float64, provider memlimit.Provider, log logr.Logger) {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		log.Info("memory limit: GOMEMLIMIT from the environment", "GOMEMLIMIT", v)
		return
	}
	if v, set := os.LookupEnv("AUTOMEMLIMIT"); set && v == "off" {
		log.Info("memory limit: none (AUTOMEMLIMIT=off)")
		return
	}
	if ratio <= 0 {
		log.Info("memory limit: none (--memory-limit-ratio=0)")
		return
	}
	limit, err := memlimit.Set(memlimit.WithRatio(ratio), memlimit.WithProvider(provider))
	switch {
	case errors.Is(err, memlimit.ErrCgroupsNotSupported):
		log.Info("memory limit: none (no cgroups on this system)")
	case err != nil:
		log.Error(err, "memory limit: not set from the container's limit; running without one")
	case limit == math.MaxInt64:
		log.Info("memory limit: none (the container has no memory limit)")
	default:
		// AUTOMEMLIMIT set to a ratio replaces ratio (automemlimit's own rule).
		log.Info("memory limit: Go's soft limit set from the container's", "goMemLimitBytes", limit)
	}
}
