package e2e

import (
	"maps"
	"testing"
)

// TestVolumeBackoffs checks what kubeletVolumeBackoffs counts, on lines of real kubelet logs:
// each pod once, with its first cause; a refused pod status or secret watch (which cost no
// back-off) and the kubelet's own timeout or cancellation of a wait are not counted.
func TestVolumeBackoffs(t *testing.T) {
	log := `E1207 05:24:49.340087    2464 pod_workers.go:1338] "Error syncing pod, skipping" err="unmounted volumes=[agent-secret config data dolphin-bin instance-config run tmp], unattached volumes=[], failed to process volumes=[data]: error processing PVC e2e/data-ready-1-0: PVC is not bound" pod="e2e/ready-1-0" podUID="86af09d3-f1b6-42ec-875a-34a2dbdda8ab"
E1207 05:24:59.340087    2464 pod_workers.go:1338] "Error syncing pod, skipping" err="unmounted volumes=[data], unattached volumes=[], failed to process volumes=[data]: error processing PVC e2e/data-ready-1-0: PVC is not bound" pod="e2e/ready-1-0" podUID="86af09d3-f1b6-42ec-875a-34a2dbdda8ab"
E1207 05:26:01.1   2464 pod_workers.go:1338] "Error syncing pod, skipping" err="unmounted volumes=[agent-secret data], unattached volumes=[], failed to process volumes=[data]: error processing PVC e2e/data-bench-0: failed to fetch PVC from API server: persistentvolumeclaims \"data-bench-0\" is forbidden: User \"system:node:dolphin-node\" cannot get resource \"persistentvolumeclaims\" in API group \"\" in the namespace \"e2e\": node: no relationship found between node 'dolphin-node' and this object" pod="e2e/bench-0" podUID="1"
E1207 05:24:49.740496    2464 status_manager.go:1257] "Failed to get status for pod" err="pods \"ready-1-1\" is forbidden: User \"system:node:dolphin-node\" cannot get resource \"pods\" in API group \"\" in the namespace \"e2e\": node: no relationship found between node 'dolphin-node' and this object" podUID="2" pod="e2e/ready-1-1"
E1207 05:25:12.447535    2464 reflector.go:227] "Failed to watch" err="failed to list *v1.Secret: secrets \"ready-2-agent\" is forbidden: User \"system:node:dolphin-node\" cannot list resource \"secrets\" in API group \"\" in the namespace \"e2e\": node: no relationship found" logger="UnhandledError"
E1207 05:25:13.1    2464 pod_workers.go:1338] "Error syncing pod, skipping" err="unmounted volumes=[data], unattached volumes=[], failed to process volumes=[]: context deadline exceeded" pod="e2e/ready-2-2" podUID="3"
E1207 05:25:14.1    2464 pod_workers.go:1338] "Error syncing pod, skipping" err="unmounted volumes=[data], unattached volumes=[], failed to process volumes=[]: context canceled" pod="e2e/ready-2-1" podUID="4"
`
	got := volumeBackoffs(log)
	want := map[string]string{
		"e2e/ready-1-0": "claim not yet bound in its status",
		"e2e/bench-0":   "the node authorizer refused the claim (pod not yet related to the node)",
	}
	if !maps.Equal(got, want) {
		t.Errorf("volumeBackoffs = %v, want %v", got, want)
	}
}
