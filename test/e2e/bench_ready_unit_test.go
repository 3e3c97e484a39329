package e2e

import "testing"

// TestClaimRefusal checks the kubelet log pattern kubeletClaimRefusals counts: the populator's
// message (quotes escaped in klog's structured err="…") and the same text unescaped, as the
// FailedMount event carries it; other refusals and other kinds do not match.
func TestClaimRefusal(t *testing.T) {
	for _, tc := range []struct {
		line, claim string
	}{
		{`E1207 04:15:51.1 1 desired_state_of_world_populator.go:310] "Error processing volume" err="error processing PVC e2e/data-bench-1: failed to fetch PVC from API server: persistentvolumeclaims \"data-bench-1\" is forbidden: User \"system:node:dolphin-node\" cannot get resource \"persistentvolumeclaims\" in API group \"\" in the namespace \"e2e\": node: no relationship found between node 'dolphin-node' and this object" pod="e2e/bench-1"`, "data-bench-1"},
		{`failed to fetch PVC from API server: persistentvolumeclaims "data-ready-2-0" is forbidden: User "system:node:dolphin-node" cannot get resource "persistentvolumeclaims" in API group "" in the namespace "e2e": node: no relationship found between node 'dolphin-node' and this object`, "data-ready-2-0"},
		{`err="pods \"bench-3\" is forbidden: User \"system:node:dolphin-node\" cannot get resource \"pods\" in API group \"\" in the namespace \"e2e\": node: no relationship found between node 'dolphin-node' and this object"`, ""},
		{`persistentvolumeclaims "data-x" is forbidden: User "system:node:n" cannot get resource "persistentvolumeclaims": something else`, ""},
	} {
		m := claimRefusal.FindStringSubmatch(tc.line)
		got := ""
		if m != nil {
			got = m[1]
		}
		if got != tc.claim {
			t.Errorf("claim %q, want %q in %s", got, tc.claim, tc.line)
		}
	}
}
