// Package podlayout holds the names that an instance pod's spec (internal/resources) and the
// programs inside it (internal/podcmd) must agree on: where the Dolphin binary is copied, the
// agent's container, Secret keys the agent reads, the monitor account, the stop-release file.
// It imports nothing, so that the pod binary (cmd/dolphin-pod) does not link the Kubernetes
// API types the pod builders need; resources re-exports each name beside its neighbours.
package podlayout

const (
	// AgentBinary is where the dolphin binary is inside an instance pod.
	AgentBinary = "/opt/dolphin/bin/dolphin"
	// ContainerAgent is the agent's container.
	ContainerAgent = "agent"
	// AgentMetricsTokenKey is the agent Secret's key of the token scrapers of /metrics present.
	AgentMetricsTokenKey = "metrics-token"
	// MonitorPasswordKey is the key of the monitor account's password, in the credentials
	// Secret and in the agent Secret.
	MonitorPasswordKey = "monitor-password"
	// MonitorUser is the account the agent's metrics collectors log in as.
	MonitorUser = "dolphin-monitor"
	// StopReleasedFileName is the file, in the run directory beside the server's socket, whose
	// existence ends the server container's preStop hold.
	StopReleasedFileName = "dolphin-stop-released"
)
