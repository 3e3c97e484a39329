package topology

import (
	"maps"
	"slices"
)

// Persisted is the engine state kept outside the process (in the MySQLCluster status), so a
// restarted operator continues where the last one stopped.
type Persisted struct {
	Primary string
	Errant  map[string]bool
	// Replaced are the primaries an unplanned failover replaced that have not been the
	// primary again since (ClusterView.Replaced).
	Replaced map[string]bool
	Failover *FailoverProgress
	// Tail is what the last failover promoted that not every replica holds yet (nil when
	// none): persisted so that a restarted operator still refuses to promote less.
	Tail *FailoverTail
	// AckedAlone is what the primary acknowledged that no replica may hold (nil when none):
	// persisted so that a restarted operator still refuses to fail over without it.
	AckedAlone *AckedAlone
	// Switchover is the switchover requested and not finished yet (nil when none). It is
	// persisted as soon as it is accepted, so that an operator restarted in the middle of it
	// resumes it instead of leaving a fenced primary or a forgotten request.
	Switchover *SwitchoverRequest
	// LastSwitchoverRequest is the ID of the last switchover request accepted by
	// RequestSwitchoverOnce: the same request is never accepted twice.
	LastSwitchoverRequest string
	// Instances are the per-instance records (credentials generations), by name.
	Instances map[string]InstanceRecord
	// Answering are the instances the last status showed answering. Read at start only:
	// until this engine observes them, what they hold is unknown (ClusterView.Unseen).
	Answering map[string]bool
	// LastPromotion is the last change of primary the status records (nil when none). Read
	// at start only: a promotion less than formerPrimaryWindow ago still has its former
	// primary's clients disconnected (former_primary.go) — the engine that made it may have
	// stopped before it could.
	LastPromotion *PromotionSeen
	// Cutover is the cutover of a cluster that followed an external source (nil before one):
	// once recorded, the cluster no longer follows the source, whatever its configuration says.
	Cutover *CutoverRecord
	// CutoverFailed is the last cutover attempt that failed (nil when none): it is not made
	// again for the same request.
	CutoverFailed *CutoverFailure
	// Verification is the last verification of the copy against the external source (nil
	// before one): a request is run once per ID.
	Verification *VerificationRecord
	// FallbackStarted is the outcome of pointing the server at the cluster after the cutover
	// (nil before it was tried); FallBackFailed the last fall back that failed (not made
	// again for the same request); FellBack the fall back once done: the cluster is then
	// read-only for good, whatever its configuration says.
	FallbackStarted *FallbackStart
	FallBackFailed  *CutoverFailure
	FellBack        *CutoverRecord
	// Variables are the run-time settings this engine applies (Config.Variables plus
	// DEFAULT for those an earlier engine applied). Carried from one engine to the next
	// within a process, not stored in status.
	Variables map[string]string
}

func (p Persisted) clone() Persisted {
	if p.Cutover != nil {
		c := *p.Cutover
		p.Cutover = &c
	}
	if p.CutoverFailed != nil {
		f := *p.CutoverFailed
		p.CutoverFailed = &f
	}
	if p.FallbackStarted != nil {
		f := *p.FallbackStarted
		p.FallbackStarted = &f
	}
	if p.FallBackFailed != nil {
		f := *p.FallBackFailed
		p.FallBackFailed = &f
	}
	if p.FellBack != nil {
		f := *p.FellBack
		p.FellBack = &f
	}
	if p.Verification != nil {
		v := *p.Verification
		v.Mismatched = slices.Clone(v.Mismatched)
		p.Verification = &v
	}
	p.Errant, p.Replaced, p.Instances, p.Variables = maps.Clone(p.Errant), maps.Clone(p.Replaced), maps.Clone(p.Instances), maps.Clone(p.Variables)
	p.Answering = maps.Clone(p.Answering)
	if p.Switchover != nil {
		sw := *p.Switchover
		p.Switchover = &sw
	}
	return p
}
