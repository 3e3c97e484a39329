package clustermanager

import (
	"maps"
	"testing"

	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/topology"
)

// The primary Service follows the published primary by pod name, names no pod when none is
// published, and is left alone before the engine has published anything.
func TestPrimaryServiceSelectorFollowsThePublishedPrimary(t *testing.T) {
	cases := []struct {
		name    string
		roles   map[string]topology.Role
		wantPod string
		wantOK  bool
	}{
		{"nothing published yet", nil, "", false},
		{"a primary", map[string]topology.Role{"db-0": topology.RoleReplica, "db-1": topology.RolePrimary, "db-2": topology.RoleNone}, "db-1", true},
		{"no primary", map[string]topology.Role{"db-0": topology.RoleNone, "db-1": topology.RoleReplica}, "", true},
	}
	for _, tc := range cases {
		sel, ok := primaryServiceSelector("db", tc.roles)
		if ok != tc.wantOK {
			t.Fatalf("%s: ok %v, want %v", tc.name, ok, tc.wantOK)
		}
		if !ok {
			continue
		}
		if want := resources.PrimaryPodSelector("db", tc.wantPod); !maps.Equal(sel, want) {
			t.Errorf("%s: selector %v, want %v", tc.name, sel, want)
		}
		if pod, onePod := resources.SelectsOnePod(sel); !onePod || pod != tc.wantPod {
			t.Errorf("%s: selects pod %q (one-pod form %v), want %q", tc.name, pod, onePod, tc.wantPod)
		}
	}
}
