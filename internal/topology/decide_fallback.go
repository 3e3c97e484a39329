package topology

import (
	"fmt"
	"slices"
	"time"
)

// StateFallBack is the state of a cycle that moves writes from the cluster's primary back to
// the server it was cut over from (StepFallBack).
const StateFallBack State = "FallingBack"

// StateFellBack is the state of a cluster whose writes moved back to that server: read-only
// for good.
const StateFellBack State = "FellBack"

// fallbackRetry is how soon pointing the server at the cluster is tried again after it failed
// for a reason that may pass (the server unreachable, the primary's address not answering).
const fallbackRetry = 30 * time.Second

// fallback rewrites a decision for a cluster cut over with a way back (ClusterView.Fallback):
// once the cluster is healthy with nothing else to do, the server is pointed at the primary
// (StepStartFallback); a fall back asked begins when the server follows less than
// maxCutoverLag behind (StepFallBack); and once it fell back, the cluster is retired
// (fellBack). Failovers and repairs come first: nothing here runs beside another plan.
func fallback(v ClusterView, d Decision) Decision {
	if v.FellBack != nil {
		return fellBack(v, d)
	}
	if d, done := interruptedFallBack(v, d); done {
		return d
	}
	f, seen := v.Fallback, v.FallbackSeen
	p, ok := v.instance(d.Primary)
	if len(d.Plan) > 0 || (d.State != StateHealthy && d.State != StateDegraded) || !ok || !p.Reachable() || p.Status.ReadOnly {
		if f.FallBack != "" && f.FallBack != v.FallBackFailed && len(d.Plan) > 0 {
			// Said, so that a plan that keeps failing does not hold the request silently.
			return withProblem(d, fmt.Sprintf("the fall back to %s waits until the cluster has nothing else to do", f.Source))
		}
		return d
	}
	st := v.FallbackStarted
	switch {
	case st == nil, st.Error != "" && !st.Permanent && v.Now.Sub(st.At) >= fallbackRetry,
		// Detached and still read-only: a fall back that failed after its detach, or a
		// person; the way back is opened again.
		st.Error == "" && seen != nil && seen.Read && seen.Detached && !seen.Writable,
		// The cluster's passwords changed since the server was given one: its next
		// reconnect would be refused.
		st.Error == "" && st.Generation != v.CredentialsGeneration && f.FallBack == "":
		d.Plan = append(d.Plan, Step{Kind: StepStartFallback, Instance: p.Name})
		return d
	case st.Error != "":
		return withProblem(d, fmt.Sprintf("the way back to %s is not open: %s", f.Source, st.Error))
	case f.FallBack != "" && f.FallBack == v.FallBackFailed:
		return withProblem(d, fmt.Sprintf("the fall back asked (%q) failed and is not tried again: set a new value of mysql.dolphin.dev/fall-back to try again", f.FallBack))
	case f.FallBack != "":
		if why := fallBackNotYet(v); why != "" {
			return withProblem(d, "the fall back waits: "+why)
		}
		d.Plan = append(d.Plan, Step{Kind: StepFallBack, Instance: p.Name})
		d.State = StateFallBack
		d.Message = fmt.Sprintf("falling back: fencing %s, waiting until %s holds its final position, opening %s for writes", p.Name, f.Source, f.Source)
		return d
	}
	if s := v.FallbackSeen; s != nil && !s.Replicating {
		return withProblem(d, fmt.Sprintf("%s does not replicate from %s (the way back): %s", f.Source, p.Name, orNone(s.Error)))
	}
	return d
}

// interruptedFallBack handles a recorded primary found read-only while a fall back is asked:
// perhaps fenced by a fall back whose operator stopped before the record. Opening it again
// before the server was seen would let both take writes. Found detached and writable, the
// server was opened: the fall back is recorded (done), at the primary's executed set. Not seen: the primary stays as it is
// (done). Otherwise the decision goes on as usual (the primary is opened again).
func interruptedFallBack(v ClusterView, d Decision) (Decision, bool) {
	f, seen := v.Fallback, v.FallbackSeen
	rp, ok := v.instance(v.Primary)
	if f.FallBack == "" || f.FallBack == v.FallBackFailed || !ok || !rp.Reachable() || !rp.Status.ReadOnly {
		return d, false
	}
	switch {
	case seen != nil && seen.Read && seen.Detached && seen.Writable:
		// The final position is known: the server was opened only once it held all of the
		// primary's transactions, and the primary has been read-only since its fence.
		v.FellBack = &CutoverRecord{Source: rp.Name, Instance: f.Source, At: v.Now,
			Warning: "found fallen back without a record (the operator stopped during the fall back): the write pause is unknown"}
		if rp.Status.Executed != nil {
			v.FellBack.Position = rp.Status.Executed.String()
		}
		d = fellBack(v, d)
		d.FellBack = v.FellBack
		return d, true
	case seen == nil || !seen.Read:
		d.Plan = slices.DeleteFunc(d.Plan, func(s Step) bool { return s.Kind == StepPromote && s.Instance == rp.Name })
		return withProblem(d, fmt.Sprintf("%s is read-only while a fall back to %s is asked: it is not opened again until %s is seen (%s)",
			rp.Name, f.Source, f.Source, orNone(seenError(seen)))), true
	}
	return d, false
}

// fallBackNotYet says why a fall back cannot begin yet ("" when it can): the server must
// follow the primary at most maxCutoverLag behind, or the primary would stay fenced while it
// catches up.
func fallBackNotYet(v ClusterView) string {
	s := v.FallbackSeen
	switch {
	case s == nil:
		return fmt.Sprintf("%s's replication from the cluster is not known yet", v.Fallback.Source)
	case !s.Replicating:
		return fmt.Sprintf("%s does not replicate from the cluster: %s", v.Fallback.Source, orNone(s.Error))
	case s.Lag == nil:
		return fmt.Sprintf("%s reports no lag yet", v.Fallback.Source)
	case *s.Lag > maxCutoverLag:
		return fmt.Sprintf("%s is %d s behind (at most %d s to begin)", v.Fallback.Source, *s.Lag, maxCutoverLag)
	}
	return ""
}

// seenError is an observation's error ("" for none or no observation).
func seenError(s *FallbackObservation) string {
	if s == nil {
		return "not looked at yet"
	}
	return s.Error
}

// retiredSteps are what a cluster that fell back still does: its replicas keep replicating
// from the recorded primary (repaired, pointed again, their accounts and settings kept).
var retiredSteps = []StepKind{StepStartReplication, StepReplicate, StepEnsureAccounts, StepApplyVariables}

// fellBack is the decision for a cluster whose writes moved back to the server: it stays as
// it is — the recorded primary, no promotion (not even after losing it), no switchover, no
// fence, no failover progress — and a writable instance is reported for a person rather than
// fenced over their head. Its replicas keep replicating from the recorded primary.
func fellBack(v ClusterView, d Decision) Decision {
	d.Plan = slices.DeleteFunc(d.Plan, func(s Step) bool {
		return !slices.Contains(retiredSteps, s.Kind) || (s.Kind == StepReplicate && s.Source != v.Primary)
	})
	d.Primary, d.PromotedFrom, d.RestartLostPrimary = v.Primary, "", ""
	d.Failover, d.FailoverOnStepError, d.Tail = nil, nil, nil
	if v.Switchover != nil {
		d.Switchover, d.SwitchoverRefused = nil, "the cluster fell back to the server it was copied from: it has no primary to switch over"
	}
	r := v.FellBack
	msg := fmt.Sprintf("writes moved back to %s at %s (position %s): this cluster keeps its data up to there, read-only; delete it, or keep it to look at",
		r.Instance, r.At.UTC().Format(time.RFC3339), orNone(r.Position))
	for _, in := range v.Instances {
		if in.Reachable() && !in.Status.ReadOnly {
			msg += fmt.Sprintf("; %s accepts writes although the cluster fell back: they are not on %s", in.Name, r.Instance)
		}
	}
	// Whatever the decision was about (a lost primary, a failover, a promotion), a retired
	// cluster only keeps its replicas.
	d.State = StateFellBack
	d.Message = msg
	return d
}

// withProblem adds a problem to a decision's message (a healthy one becomes Degraded).
func withProblem(d Decision, problem string) Decision {
	if d.State == StateHealthy {
		d.State = StateDegraded
	}
	if d.Message == "" {
		d.Message = problem
	} else {
		d.Message += "; " + problem
	}
	return d
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
