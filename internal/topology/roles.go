package topology

import (
	"fmt"
	"slices"
	"time"
)

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
// instance (and ran to its end), and it is withdrawn when a failover from an unreachable
// primary stops making progress, or begins while the promotion is not about a cycle away
// (keptUntilPromotion), when the primary is fenced or
// found read-only without a promotion under way (a switchover's fence, a restart behind a
// replica), when it is errant, or when several instances accept writes and none of them is
// the record.
//
// A replica is published while it answers, is read-only, replicates (or is being pointed
// at the primary by this plan), is not errant and is not withheld (ReplicaWithheld).
func Roles(v ClusterView, d Decision, planErr error) map[string]Role {
	primary := d.Primary
	if planErr != nil {
		// The plan stopped part way: nothing it meant to promote may take traffic yet.
		primary = v.Primary
	}
	planned := plannedIn(d, planErr)
	errant := func(name string) bool { return d.Errant[name] || v.Errant[name] }
	// Retired, or retiring in this cycle (a fall back that ran to its end): the server took
	// the writes back, so the cluster's data is old from now on.
	retired := v.FellBack != nil || d.FellBack != nil || planned(StepFallBack, v.Primary)
	out := make(map[string]Role, len(v.Instances))
	for _, in := range v.Instances {
		role := RoleNone
		switch {
		case retired:
			// No client reads or writes it.
		case errant(in.Name):
		case in.Name == primary:
			if primaryKeepsRole(in, v, d, planErr, planned) {
				role = RolePrimary
			}
		case in.Reachable() && in.Status.ReadOnly && (in.Status.Replica != nil || planned(StepReplicate, in.Name)) &&
			!planned(StepStopReplication, in.Name) && withheld(in, v.Settings, planned) == "":
			role = RoleReplica
		}
		out[in.Name] = role
	}
	return out
}

// primaryKeepsRole reports whether the recorded primary p takes the primary Service's
// traffic after this cycle.
func primaryKeepsRole(p InstanceView, v ClusterView, d Decision, planErr error, planned func(StepKind, string) bool) bool {
	if v.External != nil && (!p.Reachable() || p.Status.ReadOnly) && !planned(StepCutover, p.Name) {
		// Following a source: the primary takes no clients until the cutover (a writable one
		// keeps them: it may be a cutover whose record was lost).
		return false
	}
	if planned(StepFallBack, p.Name) {
		// Writes move back to the server the cluster was cut over from in this cycle, the
		// primary fenced first: it takes no clients.
		return false
	}
	if planned(StepFence, p.Name) {
		// A switchover's fence too: keeping the fenced primary in the Service until the
		// promotion (one change; restart_change_pause 1.14 s -> 0.18 s on the real node) let
		// readers gather there, and when the operator died between the promotion and the
		// former primary's disconnects (which come a cycle later), they read from it, a stale
		// replica by then, until the next leader (11,052 stale reads in 3 chaos rounds,
		// docs/design/0050). It needs its clients refused before the promotion first.
		return false
	}
	if !p.Reachable() {
		// Missing observations: it stays the primary while it is only suspected — a client
		// that cannot reach it now would not reach anyone else either — and until a failover
		// from it begins (the replicas' fence).
		//
		// kube-proxy applies a change to a Service no sooner than its minSyncPeriod (1 s by
		// default) after the previous one, so the promotion should move the Service in one
		// change (docs/design/0050 and its addendum).
		if !failingOverFrom(p.Name, v, d, planErr) {
			return true
		}
		return keptUntilPromotion(p, v, d, planErr)
	}
	if d.State == StateSplitBrain && d.Primary != p.Name {
		return false
	}
	// Read-only without a promotion in this plan: fenced (switchover under way) or restarted
	// and waiting; clients must not be sent to a server that refuses their writes.
	return !p.Status.ReadOnly || planned(StepPromote, p.Name) || planned(StepCutover, p.Name)
}

// keptUntilPromotion reports whether the lost primary p stays in the primary Service during
// this cycle of a failover from it, so that the promotion moves the Service in one change.
//
// A primary that refuses connections (killed, restarting: its host resets them, as fast as
// kube-proxy's reject rule would) costs its clients nothing there. A silent one (hung, cut
// off) makes clients that connect meanwhile wait for their connect timeout, as they did
// through the detection before; it stays only while the promotion is about a cycle away: no
// candidate has a backlog to apply first (WaitApplied may take up to the engine's wait
// timeout), else it leaves at the fence and clients are refused until the promotion.
//
// Either leaves the Service when the failover stops making progress (it waits, or a step
// failed) and stays out once it left: a retried fence does not put it back, which would make
// the promotion a third change.
func keptUntilPromotion(p InstanceView, v ClusterView, d Decision, planErr error) bool {
	if !failoverProceeds(d, planErr) {
		return false
	}
	if v.Failover != nil && v.Failover.From == p.Name && !v.Failover.Fenced {
		return false // the fence failed before: withdrawn then, kept out
	}
	if refusedConnection(p.Err) {
		return true
	}
	// (In the promotion's own cycle d.Primary names the promoted replica and this is not
	// asked; a fence repeated because receivers ran again asks it again.)
	return !candidatesBehind(v, p.Name)
}

// maxPromptBacklog is how far behind (Seconds_Behind_Master) a candidate may be for its
// promotion to follow the fence about a cycle later.
const maxPromptBacklog = 1

// candidatesBehind reports whether a replica that may be promoted instead of lost has more
// than maxPromptBacklog to apply: by its Seconds_Behind_Master, or, where the server reports
// none (a receiver reconnecting), by what it received and has not executed.
func candidatesBehind(v ClusterView, lost string) bool {
	for _, in := range v.Instances {
		if in.Name == lost || !in.Reachable() || in.Status.Replica == nil {
			continue
		}
		rs := in.Status.Replica
		if rs.SecondsBehindSource != nil {
			if *rs.SecondsBehindSource > maxPromptBacklog {
				return true
			}
		} else if !holds(in.Status.Executed, rs.Received) {
			return true
		}
	}
	return false
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

// ReplicaWithheld says why replica in takes no reads although it answers and is read-only:
// its applier stopped (what it serves only gets older), or it is further behind its source
// than s.MaxReplicaLag. "" when neither, or when it is no replica. A replica whose lag is
// unknown (its receiver stopped: a failover's fence, a reconnect) is not withheld for that.
func ReplicaWithheld(in InstanceView, s Settings) string {
	if in.Status == nil || in.Status.Replica == nil {
		return ""
	}
	rs := in.Status.Replica
	switch {
	case !rs.SQLRunning && rs.LastSQLErrno != 0:
		return fmt.Sprintf("its applier stopped on error %d", rs.LastSQLErrno)
	case !rs.SQLRunning:
		return "its applier is stopped"
	case s.MaxReplicaLag > 0 && rs.SecondsBehindSource != nil && time.Duration(*rs.SecondsBehindSource)*time.Second > s.MaxReplicaLag:
		return fmt.Sprintf("%d s behind its source (at most %s allowed by spec.replicaService.maxLagSeconds)",
			*rs.SecondsBehindSource, s.MaxReplicaLag)
	}
	return ""
}

// Withheld says, for every replica Roles withholds from the replicas Service this cycle,
// why (ReplicaWithheld).
func Withheld(v ClusterView, d Decision, planErr error) map[string]string {
	planned := plannedIn(d, planErr)
	out := map[string]string{}
	for _, in := range v.Instances {
		if why := withheld(in, v.Settings, planned); why != "" {
			out[in.Name] = why
		}
	}
	return out
}

// withheld is ReplicaWithheld, except for an applier stopped without an error that this
// cycle's plan starts again (a routine restart of replication). One stopped on an error is
// withheld although the plan retries it every cycle: it may fail again.
func withheld(in InstanceView, s Settings, planned func(StepKind, string) bool) string {
	if in.Status != nil && in.Status.Replica != nil && !in.Status.Replica.SQLRunning && in.Status.Replica.LastSQLErrno == 0 &&
		planned(StepStartReplication, in.Name) {
		return ""
	}
	return ReplicaWithheld(in, s)
}

// plannedIn reports whether d's plan, run without error, holds a step of kind for name.
func plannedIn(d Decision, planErr error) func(StepKind, string) bool {
	return func(kind StepKind, name string) bool {
		return planErr == nil && slices.ContainsFunc(d.Plan, func(s Step) bool { return s.Kind == kind && s.Instance == name })
	}
}
