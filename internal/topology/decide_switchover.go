package topology

import (
	"fmt"
	"slices"
	"time"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
)

// decideSwitchover moves the primary role to a replica on request, in two observations:
// first the old primary is fenced (read-only, clients disconnected), then the target applies
// everything the old primary wrote and is promoted.
func decideSwitchover(v ClusterView, d Decision, p InstanceView) Decision {
	var healthy []InstanceView
	for _, in := range v.Instances {
		rs := (*dbsql.ReplicaStatus)(nil)
		if in.Reachable() {
			rs = in.Status.Replica
		}
		if in.Name != p.Name && rs != nil && !in.Stopping && !d.Errant[in.Name] && errantReason(p, in) == "" &&
			rs.SourceHost == p.Host && rs.SourcePort == p.Port && rs.SQLRunning {
			healthy = append(healthy, in)
		}
	}
	target := v.Switchover.To
	if target == "" {
		best, ok := mostAdvanced(healthy, func(in InstanceView) dbsql.GTIDSet { return in.Status.Replica.Received })
		if !ok {
			return switchoverNotNow(v, d, p, "no healthy replica to promote")
		}
		target = best
	}
	if target == p.Name {
		d.Switchover = nil
		return decideHealthy(v, d, p)
	}
	if _, known := v.instance(target); !known {
		d.Switchover = nil
		d.SwitchoverRefused = fmt.Sprintf("switchover to %s refused: the cluster has no such instance", target)
		out := decideHealthy(v, d, p)
		out.Message = d.SwitchoverRefused + "; " + out.Message
		return out
	}
	if !slices.ContainsFunc(healthy, func(in InstanceView) bool { return in.Name == target }) {
		return switchoverNotNow(v, d, p, fmt.Sprintf("%s is not a healthy replica of %s", target, p.Name))
	}
	d.State = StateSwitchover
	if !v.Switchover.Fenced {
		d.Plan = append(d.Plan, Step{Kind: StepFence, Instance: p.Name})
		d.Switchover = &SwitchoverRequest{To: target, Fenced: true, From: p.Name}
		d.Message = fmt.Sprintf("switchover to %s: fencing %s", target, p.Name)
		return d
	}
	t, _ := v.instance(target)
	d.Plan = append(d.Plan, semiSyncSourceOff(t)...)
	if !t.Status.Replica.IORunning {
		// Its receiver stopped (MariaDB ends it on an error it counts as fatal, such as a
		// connection cut while it asked for the source's checksum setting): the wait below
		// would run into its timeout for writes it cannot fetch, every cycle.
		d.Plan = append(d.Plan, Step{Kind: StepStartReplication, Instance: target})
	}
	// Clients that reached the fenced primary since the fence read current data until the
	// promotion, and stale data after it: they are refused and disconnected right before it,
	// in this plan — not in a later cycle an operator crash can postpone (docs/design/0050).
	d.Plan = append(d.Plan,
		Step{Kind: StepWaitApplied, Instance: target, GTID: p.Status.Executed},
		Step{Kind: StepRefuseClients, Instance: p.Name},
		Step{Kind: StepPromote, Instance: target, SemiSync: len(v.Instances) > 1},
		Step{Kind: StepReplicate, Instance: p.Name, Source: target, Rejoin: true})
	for _, in := range healthy {
		if in.Name != target {
			d.Plan = append(d.Plan, Step{Kind: StepReplicate, Instance: in.Name, Source: target})
		}
	}
	d.Primary, d.PromotedFrom, d.Switchover = target, p.Name, nil
	d.Message = fmt.Sprintf("switching over from %s to %s", p.Name, target)
	return d
}

// SwitchoverPatience is how long a requested switchover waits for a healthy replica to
// promote before it is refused. A replica that missed one probe (a loaded machine, an
// operator that has just restarted and opens its connections) or that is catching up is not
// a reason to drop the request; a replica still unhealthy after this long is.
const SwitchoverPatience = time.Minute

// switchoverNotNow keeps a switchover that cannot proceed in this observation pending
// (unfenced: the primary writes meanwhile) until SwitchoverPatience has passed since it was
// requested, then refuses it. A primary already fenced for it is made writable again.
func switchoverNotNow(v ClusterView, d Decision, p InstanceView, why string) Decision {
	target := v.Switchover.To
	if target == "" {
		target = "the most advanced replica"
	}
	var msg string
	if v.SwitchoverWaited < SwitchoverPatience {
		// The target stays as chosen (a fence already chose one): its first observation as
		// a healthy replica lets the switchover go on.
		d.Switchover = &SwitchoverRequest{To: v.Switchover.To}
		msg = fmt.Sprintf("switchover to %s waiting (%s of %s): %s", target,
			v.SwitchoverWaited.Round(time.Second), SwitchoverPatience, why)
	} else {
		d.Switchover = nil
		d.SwitchoverRefused = fmt.Sprintf("switchover to %s refused after %s: %s", target, SwitchoverPatience, why)
		msg = d.SwitchoverRefused
	}
	// A primary already fenced for this switchover is read-only: decideHealthy makes it
	// writable again.
	out := decideHealthy(v, d, p)
	out.Message = msg + "; " + out.Message
	return out
}
