package resources

// probeTimings are the periods and failure thresholds of a pod's probes at one template
// generation. The probes themselves are TCP connects to the server's and the agent's ports.
type probeTimings struct {
	// serverStartupPeriod and serverStartupFailures: crash recovery of a large buffer pool
	// can take minutes, so the startup probe allows 30 minutes before liveness takes over.
	serverStartupPeriod, serverStartupFailures int32
	// serverReadyPeriod and serverReadyFailures: how soon a server that stops answering
	// leaves its pod's Ready (period × failures).
	serverReadyPeriod, serverReadyFailures int32
	// agentReadyPeriod and agentReadyFailures: the same for the agent.
	agentReadyPeriod, agentReadyFailures int32
}

// probesAt returns the probe timings of template generation: from generationQuickProbes every
// probe but liveness runs each second, and the failure thresholds keep the time to "not
// ready" (6 s for the server, 15 s for the agent) and the startup allowance (30 minutes).
func probesAt(generation int) probeTimings {
	if generation >= generationQuickProbes {
		return probeTimings{
			serverStartupPeriod: 1, serverStartupFailures: 1800,
			serverReadyPeriod: 1, serverReadyFailures: 6,
			agentReadyPeriod: 1, agentReadyFailures: 15,
		}
	}
	return probeTimings{
		serverStartupPeriod: 2, serverStartupFailures: 900,
		serverReadyPeriod: 2, serverReadyFailures: 3,
		agentReadyPeriod: 5, agentReadyFailures: 3,
	}
}
