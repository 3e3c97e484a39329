package topology

import "slices"

// Role is the replication role an instance is published with (the pod's role label, which
// the primary and replica Services select on).
type Role string

// Roles an instance can be published with.
const (
	// RolePrimary receives the primary Service's traffic.
	RolePrimary Role = "primary"
	// RoleReplica receives the replica Service's traffic.
	RoleReplica Role = "replica"
	// RoleNone takes no client traffic.
	RoleNone Role = ""
)

// Roles decides the published role of every instance from one cycle: the observation, the
// decision taken on it and the outcome of its plan (planErr). It is the only place that
// decides where clients are sent.
//
// The primary role follows the engine's record of the primary, not single observations: the
// recorded primary keeps it while it merely misses observations (PrimarySuspect), so one slow
// probe never empties the primary Service. It moves only when a plan promoted another
// instance (and ran to its end), and it is withdrawn when a failover from the unreachable
// primary begins (its fence), when the primary is fenced or found read-only without a
// promotion under way (a switchover's fence, a restart behind a replica), when it is errant,
// or when several instances accept writes and none of them is the record.
//
// A replica is published while it answers, is read-only, replicates (or is being pointed
// at the primary by this plan) and is not errant.
func Roles(v ClusterView, d Decision, planErr error) map[string]Role {
	primary := d.Primary
	if planErr != nil {
		// The plan stopped part way: nothing it meant to promote may take traffic yet.
		primary = v.Primary
	}
	planned := func(kind StepKind, name string) bool {
		return planErr == nil && slices.ContainsFunc(d.Plan, func(s Step) bool { return s.Kind == kind && s.Instance == name })
	}
	errant := func(name string) bool { return d.Errant[name] || v.Errant[name] }
	out := make(map[string]Role, len(v.Instances))
	for _, in := range v.Instances {
		role := RoleNone
		switch {
		case errant(in.Name):
		case in.Name == primary:
			if primaryKeepsRole(in, v, d, planErr, planned) {
				role = RolePrimary
			}
		case in.Reachable() && in.Status.ReadOnly && (in.Status.Replica != nil || planned(StepReplicate, in.Name)) &&
			!planned(StepStopReplication, in.Name):
			role = RoleReplica
		}
		out[in.Name] = role
	}
	return out
}

// primaryKeepsRole reports whether the recorded primary p takes the primary Service's
// traffic after this cycle.
func primaryKeepsRole(p InstanceView, v ClusterView, d Decision, planErr error, planned func(StepKind, string) bool) bool {
	if planned(StepFence, p.Name) {
		return false
	}
	if !p.Reachable() {
		// Missing observations: it stays the primary while it is only suspected — a client
		// that cannot reach it now would not reach anyone else either. Once a failover from it
		// begins (the replicas' fence) it leaves the Service — clients are then refused at
		// once instead of waiting on a server Dolphin gave up — unless it refuses connections
		// itself (killed, restarting: its host answers with a reset, as fast as kube-proxy's
		// reject) and the failover proceeds: then it stays until the promotion moves the
		// primary Service in one change of its selector. kube-proxy applies a change that
		// follows another no sooner than its minSyncPeriod (1 s by default): withdrawing it at
		// the fence, some 0.2 s before the promotion, held the new primary back from clients
		// for that second (docs/design/0050). A silent primary (hung, cut off) still leaves at
		// the fence: kept, it would make every client that connects before the promotion wait
		// for its own connect timeout.
		return !failingOverFrom(p.Name, v, d, planErr) || (refusedConnection(p.Err) && failoverProceeds(d, planErr))
	}
	if d.State == StateSplitBrain && d.Primary != p.Name {
		return false
	}
	// Read-only without a promotion in this plan: fenced (switchover under way) or restarted
	// and waiting; clients must not be sent to a server that refuses their writes.
	return !p.Status.ReadOnly || planned(StepPromote, p.Name)
}

// failoverProceeds reports whether this cycle's plan carries a failover forward (its fence or
// its promotion), as opposed to one that waits with nothing to do.
func failoverProceeds(d Decision, planErr error) bool {
	return planErr == nil && d.State == StateFailover && len(d.Plan) > 0
}

// failingOverFrom reports whether a failover from the lost primary name is under way after
// this cycle: recorded before it, begun by its plan, or kept by a plan that failed part way.
func failingOverFrom(name string, v ClusterView, d Decision, planErr error) bool {
	from := func(f *FailoverProgress) bool { return f != nil && f.From == name }
	if planErr != nil {
		return from(v.Failover) || from(d.FailoverOnStepError)
	}
	return from(v.Failover) || from(d.Failover)
}
