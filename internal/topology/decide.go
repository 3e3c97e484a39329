package topology

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
)

// State is the situation a decision found the cluster in.
type State string

// States reported by Decide.
const (
	// StateWaiting: a new cluster waits until every instance answers before it bootstraps.
	StateWaiting State = "WaitingForInstances"
	// StateBootstrap: the first primary is being chosen and replication set up.
	StateBootstrap State = "Bootstrapping"
	// StateHealthy: the primary is writable and every replica replicates from it.
	StateHealthy State = "Healthy"
	// StateHealing: the primary is fine; replicas are being (re)configured.
	StateHealing State = "Healing"
	// StateDegraded: the primary is fine; some instance is unreachable or errant.
	StateDegraded State = "Degraded"
	// StatePrimarySuspect: the primary missed observations, not yet enough to fail over.
	StatePrimarySuspect State = "PrimarySuspect"
	// StatePrimaryLost: the primary is lost and no failover can (or may) happen.
	StatePrimaryLost State = "PrimaryLost"
	// StateFailover: a replica is being promoted in place of the lost primary.
	StateFailover State = "Failover"
	// StateSwitchover: a planned change of primary is in progress.
	StateSwitchover State = "Switchover"
	// StateSplitBrain: more than one instance accepted writes; the extra ones are fenced.
	StateSplitBrain State = "SplitBrain"
	// StateCutover: writes move from the external source the cluster followed to its primary.
	StateCutover State = "Cutover"
)

// Replication errors that mean an instance cannot continue as a replica without being
// re-cloned: its history diverged from the primary's.
const (
	errnoGTIDStrictOutOfOrder = 1950 // MariaDB: an event's GTID is not newer than the last applied
	errnoSourceFatalReading   = 1236 // the source cannot serve the position the replica asks for
)

// Decision is what to do after one observation.
type Decision struct {
	State State
	// Primary is the primary after the plan has run.
	Primary string
	// Plan is the steps to run, in order. Each step is idempotent.
	Plan []Step
	// Errant are the instances holding transactions the primary lacks (never promoted,
	// never replicated into the topology until re-cloned).
	Errant map[string]bool
	// Replaced are the primaries an unplanned failover replaced that have not been the
	// primary again since (ClusterView.Replaced), to carry forward.
	Replaced map[string]bool
	// Failover and Switchover are the progress to carry into the next observation.
	Failover   *FailoverProgress
	Switchover *SwitchoverRequest
	// FailoverOnStepError is the failover progress to carry forward when a step of the plan
	// fails (Failover is carried only when every step succeeded): the record of what the
	// candidates received is never lost to a failed step.
	FailoverOnStepError *FailoverProgress
	// Tail is what the last failover promoted that not every replica holds yet, to carry
	// into the next observation (nil when none).
	Tail *FailoverTail
	// AckedAlone is what the primary acknowledged that no replica may hold, to carry into
	// the next observation (nil when none).
	AckedAlone *AckedAlone
	// LossAccepted describes the writes a failover gave up with a person's consent ("" when
	// none): the operator records it in status and an event.
	LossAccepted string
	// RestartLostPrimary names the lost primary whose pod should be restarted: the failover
	// waits for writes that no candidate left holds, and the lost primary, restarted, keeps
	// every one it acknowledged.
	RestartLostPrimary string
	// PromotedFrom is the previous primary when the plan promotes a new one.
	PromotedFrom string
	// SemiSyncFallback is true when the primary's semi-sync fell back to asynchronous
	// replication: acknowledged writes are no longer guaranteed on a replica.
	SemiSyncFallback bool
	// NoSemiSyncReplica is true when the primary waits for semi-sync acknowledgements and no
	// replica is connected to give them: its commits stall until one connects or the
	// semi-sync timeout makes it fall back.
	NoSemiSyncReplica bool
	// CommitsWaiting is true when commits on the primary have waited 2 s or more for an
	// acknowledgement: the clients feel a write stall (also while the primary still counts
	// replicas that no longer answer, which NoSemiSyncReplica does not see).
	CommitsWaiting bool
	// CutOver is a cutover found done although not recorded (the primary writable and
	// detached while the cutover was asked: an operator stopped between the opening and the
	// record); the engine records it. Nil otherwise (StepCutover records its own).
	CutOver *CutoverRecord
	// FellBack is a fall back found done although not recorded (the server seen detached and
	// writable while the fall back was asked: an operator stopped between its opening and the
	// record); the engine records it. Nil otherwise (StepFallBack records its own).
	FellBack *CutoverRecord
	// SwitchoverRefused says why a requested switchover was dropped without a promotion
	// ("" when none was): the operator reports it as an event.
	SwitchoverRefused string
	// Message explains the state to a human.
	Message string
}

// Decide is a pure function from an observation to a decision.
func Decide(v ClusterView) Decision {
	d := decide(v)
	if v.External != nil && d.CutOver == nil {
		d = followExternal(v, d)
	}
	if v.External == nil && (v.Fallback != nil || v.FellBack != nil) {
		d = fallback(v, d)
	}
	d.Tail = settleTail(v, d)
	d.AckedAlone = settleAckedAlone(v, d)
	// Run-time settings only when nothing else is to be done, so that a value the server
	// refuses can never hold up a failover or a replica's repair; the refusal is the plan's
	// error, reported like any other.
	if len(d.Plan) == 0 && (d.State == StateHealthy || d.State == StateDegraded) {
		for _, in := range v.Instances {
			if in.Reachable() && in.NeedsVariables && !in.Fresh && !d.Errant[in.Name] {
				d.Plan = append(d.Plan, Step{Kind: StepApplyVariables, Instance: in.Name})
			}
		}
	}
	if v.Settings.Paused {
		d = paused(v, d)
	}
	return d
}

// paused withholds d's plan unless it fails over a lost primary, fences a second writable
// server, or finishes a switchover whose fence already ran (its old primary is read-only:
// stopping there would leave the cluster without a writable primary for the whole pause)
// (Settings.Paused). A withheld plan leaves nothing of itself behind: the primary, the
// promotion and the failover and switchover progress stay what the view had, so that no
// promotion is recorded that did not happen. A person doing maintenance by hand is not
// undone, and the cluster still survives the loss of its primary.
func paused(v ClusterView, d Decision) Decision {
	switch {
	case d.State == StateFailover, d.State == StateSplitBrain:
		return d
	case d.State == StateSwitchover && v.Switchover != nil && v.Switchover.Fenced:
		return d
	case len(d.Plan) == 0:
		return d // nothing to withhold (an adoption of the writable server is what is)
	}
	d.Plan = nil
	d.Primary, d.PromotedFrom = v.Primary, ""
	d.Failover, d.FailoverOnStepError, d.Switchover, d.SwitchoverRefused = v.Failover, nil, v.Switchover, ""
	d.Message = "paused (spec.paused), not done: " + d.Message
	return d
}

func decide(v ClusterView) Decision {
	d := Decision{Primary: v.Primary, Errant: maps.Clone(v.Errant), Replaced: maps.Clone(v.Replaced), Failover: v.Failover, Switchover: v.Switchover, Tail: v.Tail}
	if d.Errant == nil {
		d.Errant = map[string]bool{}
	}
	if d.Replaced == nil {
		d.Replaced = map[string]bool{}
	}
	// A freshly initialised instance needs Dolphin's accounts before anything else.
	for _, in := range v.Instances {
		if in.Reachable() && (in.Fresh || in.NeedsAccounts) {
			d.Plan = append(d.Plan, Step{Kind: StepEnsureAccounts, Instance: in.Name})
		}
	}
	if sw := v.Switchover; sw != nil && sw.Fenced && sw.From != "" && sw.From != v.Primary {
		// A switchover that fenced another primary (a failover came in between, or the
		// request survived an operator restart): what it waited for no longer holds.
		v.Switchover, d.Switchover = nil, nil
	}
	if v.Primary == "" {
		return decideWithoutPrimary(v, d)
	}
	p, _ := v.instance(v.Primary)
	extra := writableExcept(v, v.Primary)
	if v.External != nil && len(extra) > 0 {
		// A cluster that follows a source takes no writes: an instance found writable besides
		// the recorded primary was opened by hand, never a promotion to adopt.
		for _, name := range extra {
			d.Plan = append(d.Plan, Step{Kind: StepFence, Instance: name})
		}
		d.State = StateSplitBrain
		d.Message = fmt.Sprintf("%s accepted writes while the cluster follows %s: made read-only", strings.Join(extra, ", "), v.External)
		return d
	}
	if p.Reachable() && p.Status.ReadOnly && len(extra) == 1 && !d.Errant[extra[0]] {
		// The recorded primary restarted read-only while another instance took over (a
		// promotion whose record was lost — a failover's, or a switchover's whose target was
		// promoted just before the operator stopped): the writable one is the primary, never
		// the stale record. A switchover still pending is done or moot.
		return adopt(v, d, extra[0])
	}
	if p.Reachable() {
		if len(extra) > 0 {
			// Only the known primary may write: fence the others at once.
			for _, name := range extra {
				d.Plan = append(d.Plan, Step{Kind: StepFence, Instance: name})
			}
			d.State = StateSplitBrain
			d.Message = fmt.Sprintf("%s accepted writes besides primary %s: made read-only", strings.Join(extra, ", "), v.Primary)
			return d
		}
		if ahead := replicasAheadOf(v, d, p); p.Status.ReadOnly && len(ahead) > 0 {
			// Before any switchover: promoting a replica of a primary that lost its tail is
			// the only safe way on, and it is a failover.
			d.Switchover = nil
			return decideRestartedBehind(v, d, p, ahead)
		}
		d.Failover = nil
		if v.Switchover != nil {
			return decideSwitchover(v, d, p)
		}
		return decideHealthy(v, d, p)
	}
	// The primary does not answer.
	if len(extra) == 1 && !d.Errant[extra[0]] {
		// A previous failover promoted it but its outcome was never recorded (operator
		// restarted): adopt it and continue from there.
		return adopt(v, d, extra[0])
	}
	if len(extra) > 1 {
		for _, name := range extra {
			d.Plan = append(d.Plan, Step{Kind: StepFence, Instance: name})
		}
		d.State = StateSplitBrain
		d.Message = fmt.Sprintf("primary %s is lost and %s all accept writes: all made read-only; choose the primary by hand", p.Name, strings.Join(extra, ", "))
		return d
	}
	if v.Failover == nil && v.PrimaryMisses < max(v.Settings.DetectionAttempts, 1) {
		d.State = StatePrimarySuspect
		d.Message = fmt.Sprintf("primary %s missed %d of %d observations: %v", p.Name, v.PrimaryMisses, v.Settings.DetectionAttempts, p.Err)
		return d
	}
	if !v.Settings.FailoverEnabled {
		d.State = StatePrimaryLost
		d.Message = fmt.Sprintf("primary %s is lost and automatic failover is disabled: bring it back, or set spec.failover.enabled: true to promote the replica that holds the most", p.Name)
		return d
	}
	return decideFailover(v, d, p, false)
}

// replicasAheadOf lists the replicas that received transactions written by p that p no
// longer has.
func replicasAheadOf(v ClusterView, d Decision, p InstanceView) []string {
	var out []string
	for _, in := range v.Instances {
		if in.Name == p.Name || !in.Reachable() || in.Fresh || d.Errant[in.Name] {
			continue
		}
		ahead := dbsql.AheadWithWritesOf(received(in), p.Status.Executed, p.Status.ServerID)
		if v.External != nil {
			// Following, every transaction is the source's: a replica that received any p
			// no longer has (a restarted primary rolled back what it applied last) is ahead.
			// Only while p's replication is stopped, as a restarted server's is
			// (skip_slave_start): while it applies, a replica observed a moment after it may
			// hold its next commit, which is no reason for a failover.
			rs := p.Status.Replica
			ahead = (rs == nil || (!rs.IORunning && !rs.SQLRunning)) &&
				!isEmpty(received(in)) && !p.Status.Executed.Contains(received(in))
		}
		if ahead {
			out = append(out, in.Name)
		}
	}
	return out
}

// decideRestartedBehind handles a primary that came back (read-only, as every server starts)
// without transactions a replica received from it: MariaDB restarted with
// --init-rpl-role=SLAVE rolls back the tail no replica had acknowledged yet, but a replica may
// have received some of it. Promoting it again would leave that replica errant; the replica
// with the most is promoted instead, and the old primary rejoins it.
func decideRestartedBehind(v ClusterView, d Decision, p InstanceView, ahead []string) Decision {
	why := fmt.Sprintf("primary %s restarted without transactions that %s received", p.Name, strings.Join(ahead, ", "))
	if !v.Settings.FailoverEnabled {
		d.State = StatePrimaryLost
		d.Message = why + "; automatic failover is disabled (promoting it again would make them errant): set spec.failover.enabled: true to promote the replica that holds the most"
		return d
	}
	p.Err = errors.New(why)
	return decideFailover(v, d, p, true)
}

// adopt takes the writable instance `name` as the primary in place of the recorded one.
func adopt(v ClusterView, d Decision, name string) Decision {
	old := v.Primary
	if f := v.Failover; f != nil && !isEmpty(f.Received) {
		// A failover promoted it and stopped before it was recorded: what its candidates
		// had received stays guarded as if the promotion had been recorded.
		d.Tail = &FailoverTail{From: f.From, Received: f.Received, HeldBy: f.ReceivedBy}
	}
	v.Primary, v.Failover, v.Switchover, v.Tail = name, nil, nil, d.Tail
	d.Primary, d.Failover, d.PromotedFrom, d.Switchover = name, nil, old, nil
	np, _ := v.instance(name)
	out := decideHealthy(v, d, np)
	out.Message = fmt.Sprintf("adopted %s, which took over from %s without a record; ", name, old) + out.Message
	return out
}

// decideWithoutPrimary handles a cluster with no recorded primary: a new cluster, or an
// operator that lost its state.
func decideWithoutPrimary(v ClusterView, d Decision) Decision {
	writable := writableExcept(v, "")
	switch {
	case len(writable) > 0 && v.External != nil:
		for _, name := range writable {
			d.Plan = append(d.Plan, Step{Kind: StepFence, Instance: name})
		}
		d.State = StateSplitBrain
		d.Message = fmt.Sprintf("%s accept writes although the cluster follows %s and has no primary yet: made read-only", strings.Join(writable, ", "), v.External)
		return d
	case len(writable) == 1:
		v.Primary = writable[0]
		d.Primary = writable[0]
		np, _ := v.instance(writable[0])
		return decideHealthy(v, d, np)
	case len(writable) > 1:
		for _, name := range writable {
			d.Plan = append(d.Plan, Step{Kind: StepFence, Instance: name})
		}
		d.State = StateSplitBrain
		d.Message = fmt.Sprintf("%s all accept writes and no primary is recorded: all made read-only; choose the primary by hand", strings.Join(writable, ", "))
		return d
	}
	// Replicas that point at an instance tell who the primary was.
	for _, in := range v.Instances {
		if in.Reachable() && in.Status.Replica != nil {
			for _, src := range v.Instances {
				if src.Host == in.Status.Replica.SourceHost && src.Port == in.Status.Replica.SourcePort {
					v.Primary = src.Name
					d.Primary = src.Name
					return decide(v)
				}
			}
		}
	}
	var missing []string
	for _, in := range v.Instances {
		if !in.Reachable() {
			missing = append(missing, in.Name)
		}
	}
	if len(missing) > 0 || len(v.Instances) == 0 {
		d.State = StateWaiting
		d.Message = "waiting for " + strings.Join(missing, ", ") + " to answer before choosing the first primary"
		return d
	}
	primary, ok := mostAdvanced(v.Instances, func(in InstanceView) dbsql.GTIDSet { return in.Status.Executed })
	if !ok {
		d.State = StateSplitBrain
		d.Message = "the instances hold diverging transactions; refusing to choose a primary"
		return d
	}
	d.State = StateBootstrap
	d.Primary = primary
	d.Plan = append(d.Plan, Step{Kind: StepPromote, Instance: primary, SemiSync: len(v.Instances) > 1})
	for _, in := range v.Instances {
		if in.Name != primary {
			d.Plan = append(d.Plan, Step{Kind: StepReplicate, Instance: in.Name, Source: primary, Rejoin: !isEmpty(in.Status.Executed)})
		}
	}
	d.Message = "bootstrapping with " + primary + " as primary"
	return d
}

// decideHealthy keeps a reachable primary writable and every other instance replicating
// from it, and keeps errant instances out.
func decideHealthy(v ClusterView, d Decision, p InstanceView) Decision {
	var problems []string
	delete(d.Replaced, p.Name) // the primary again: what it holds is the history
	var following []Step
	if v.External != nil {
		if d.CutOver = unrecordedCutover(v, p); d.CutOver != nil {
			v.External = nil // cut over: from here on a cluster of its own
		}
	}
	if v.External != nil {
		// A cluster that follows an external source: its primary stays read-only and
		// replicates from the source (followExternal), until the cutover.
		var problem string
		if following, problem = externalSteps(v, p); problem != "" {
			problems = append(problems, problem)
		}
		d.Plan = append(d.Plan, following...)
	}
	if p.Status.ReadOnly && v.External == nil {
		d.Plan = append(d.Plan, Step{Kind: StepPromote, Instance: p.Name, SemiSync: len(v.Instances) > 1})
	} else if slices.ContainsFunc(following, func(s Step) bool { return s.Kind == StepFollowExternal }) {
		// Sets the semi-sync source side itself.
	} else if want := len(v.Instances) > 1; p.Status.SemiSync.SourceEnabled != want {
		d.Plan = append(d.Plan, Step{Kind: StepSemiSyncSource, Instance: p.Name, SemiSync: want})
	} else if ms := p.Status.SemiSync.TimeoutMS; want && ms != 0 && ms != v.Settings.SemiSyncTimeoutMS() {
		// spec.durability changed, or a server restarted with my.cnf's value.
		d.Plan = append(d.Plan, Step{Kind: StepSemiSyncTimeout, Instance: p.Name})
	}
	if p.Status.SemiSync.SourceEnabled && !p.Status.SemiSync.SourceActive && len(v.Instances) > 1 {
		d.SemiSyncFallback = true
		problems = append(problems, "semi-sync fell back to asynchronous replication: "+p.Name+" acknowledges writes no replica has received")
	}
	if ss := p.Status.SemiSync; ss.SourceEnabled && ss.StalledDumps > 0 && ss.Clients == 0 {
		// A MariaDB ack-receiver stall: no replica can connect until the source side
		// restarts. With no semi-sync client connected no commit can be acknowledged by a
		// replica anyway, so restarting loses no guarantee (waiting commits fall back to
		// asynchronous as they would at the timeout); see docs/design/0010.
		d.Plan = append(d.Plan, Step{Kind: StepRestartSemiSyncSource, Instance: p.Name})
		problems = append(problems, fmt.Sprintf("%d replica connection(s) stuck ending on %s: restarting its semi-sync source side", ss.StalledDumps, p.Name))
	}
	for _, r := range v.Instances {
		if r.Name == p.Name {
			continue
		}
		if !r.Reachable() {
			problems = append(problems, r.Name+" unreachable")
			continue
		}
		if reason := errantReason(p, r); reason != "" {
			if !d.Errant[r.Name] {
				d.Errant[r.Name] = true
			}
			if rs := r.Status.Replica; rs != nil && (rs.IORunning || rs.SQLRunning) {
				d.Plan = append(d.Plan, Step{Kind: StepStopReplication, Instance: r.Name})
			}
			problems = append(problems, r.Name+" is errant ("+reason+"): it needs a re-clone")
			continue
		}
		delete(d.Errant, r.Name)
		d.Plan = append(d.Plan, semiSyncSourceOff(r)...)
		rs := r.Status.Replica
		switch {
		case rs == nil:
			d.Plan = append(d.Plan, Step{Kind: StepReplicate, Instance: r.Name, Source: p.Name, Rejoin: !isEmpty(r.Status.Executed)})
		case rs.SourceHost != p.Host || rs.SourcePort != p.Port:
			d.Plan = append(d.Plan, Step{Kind: StepReplicate, Instance: r.Name, Source: p.Name})
		case staleReplicationPassword(v, d, p, r):
			// Rotated credentials: the primary no longer takes the password this replica
			// would reconnect with.
			d.Plan = append(d.Plan, Step{Kind: StepReplicate, Instance: r.Name, Source: p.Name})
		case !replicationTLSMatches(rs, replicationTLS(r.member(), p.member(), v.TLSCAFile)):
			// TLS turned on or off, or an instance restarted with or without it.
			d.Plan = append(d.Plan, Step{Kind: StepReplicate, Instance: r.Name, Source: p.Name})
		case !rs.IORunning || !rs.SQLRunning:
			d.Plan = append(d.Plan, Step{Kind: StepStartReplication, Instance: r.Name})
		}
	}
	if ss := p.Status.SemiSync; ss.SourceEnabled && ss.SourceActive && ss.WaitingCommits > 0 && len(v.Instances) > 1 {
		d.CommitsWaiting = true
		problems = append(problems, fmt.Sprintf("%d commit(s) on %s have waited 2 s or more for a replica's acknowledgement", ss.WaitingCommits, p.Name))
	}
	// No replica connected to acknowledge, and none about to be by this plan: commits stall.
	if ss := p.Status.SemiSync; ss.SourceEnabled && ss.SourceActive && ss.Clients == 0 && len(v.Instances) > 1 &&
		!slices.ContainsFunc(d.Plan, func(s Step) bool { return s.Kind == StepReplicate || s.Kind == StepStartReplication }) {
		d.NoSemiSyncReplica = true
		if v.Settings.AckAlone {
			problems = append(problems, "no replica acknowledges "+p.Name+"'s writes: commits wait for one up to "+SemiSyncFallbackTimeout.String()+
				", then "+p.Name+" acknowledges them alone (spec.durability Preferred)")
		} else {
			problems = append(problems, "no replica acknowledges "+p.Name+"'s writes: commits wait until one is back (spec.durability Required)")
		}
	}
	secure := secureTransportWanted(v)
	for _, in := range v.Instances {
		if in.Reachable() && in.Status.RequireSecureTransport != secure {
			d.Plan = append(d.Plan, Step{Kind: StepSecureTransport, Instance: in.Name, Secure: secure})
		}
	}
	switch {
	case len(problems) > 0:
		d.State = StateDegraded
		d.Message = strings.Join(problems, "; ")
	case len(d.Plan) > 0:
		d.State = StateHealing
		d.Message = "configuring replication from " + p.Name
	default:
		d.State = StateHealthy
		d.Message = p.Name + " is primary; every replica replicates from it"
	}
	return d
}

// semiSyncSourceOff turns the semi-sync source side off on an instance that is not the
// primary, where an interrupted promotion may have left it on: a replica whose source side is
// on makes its applier's first commit wait for an acknowledgement from replicas it does not
// have, for the whole semi-sync timeout (30 s measured; the chaos suite's
// operator-restart-switchover saw a 30 s outage from it). Nil when it is off already.
func semiSyncSourceOff(in InstanceView) []Step {
	if in.Status.SemiSync.SourceEnabled {
		return []Step{{Kind: StepSemiSyncSource, Instance: in.Name, SemiSync: false}}
	}
	return nil
}

// secureTransportWanted says whether the instances should refuse plain TCP logins
// (require_secure_transport): when TLS is required for clients and every instance serves TLS.
// Until then — in the middle of the rollout that turns TLS on, or when a pod was re-created
// without it — Dolphin's own connections and replication to an instance that serves no TLS
// are plain, and refusing them would cut it off.
// An instance without a pod (being re-created) does not count: it will come back with the
// template's TLS, and lifting the requirement for it would let plain logins in everywhere at
// every pod deletion.
func secureTransportWanted(v ClusterView) bool {
	if !v.TLSRequired {
		return false
	}
	present := 0
	for _, in := range v.Instances {
		if in.Absent {
			continue
		}
		present++
		if in.TLSServerName == "" {
			return false
		}
	}
	return present > 0
}

// errantReason says why replica r cannot follow primary p, or "" when it can.
func errantReason(p, r InstanceView) string {
	if !isEmpty(r.Status.Executed) && (p.Status.Executed == nil || !p.Status.Executed.Contains(r.Status.Executed)) {
		return fmt.Sprintf("it executed %s, beyond the primary's %s", r.Status.Executed, p.Status.Executed)
	}
	if rs := r.Status.Replica; rs != nil {
		if rs.LastSQLErrno == errnoGTIDStrictOutOfOrder {
			return fmt.Sprintf("applier error %d: %s", rs.LastSQLErrno, rs.LastSQLError)
		}
		if rs.LastIOErrno == errnoSourceFatalReading && rs.SourceHost == p.Host && rs.SourcePort == p.Port {
			return fmt.Sprintf("receiver error %d: %s", rs.LastIOErrno, rs.LastIOError)
		}
	}
	return ""
}

// writableExcept lists the reachable instances that accept writes, except one.
func writableExcept(v ClusterView, except string) []string {
	var out []string
	for _, in := range v.Instances {
		if in.Name != except && in.Reachable() && !in.Status.ReadOnly {
			out = append(out, in.Name)
		}
	}
	return out
}

// mostAdvanced returns the instance whose set contains every other instance's set. Among
// equals it prefers the one that applied most, then the lowest ordinal. ok is false when no
// set contains all the others (histories diverged).
func mostAdvanced(ins []InstanceView, set func(InstanceView) dbsql.GTIDSet) (string, bool) {
	bestIdx := -1
	for i, in := range ins {
		s := set(in)
		all := true
		for _, o := range ins {
			if os := set(o); !isEmpty(os) && (s == nil || !s.Contains(os)) {
				all = false
				break
			}
		}
		if !all {
			continue
		}
		if bestIdx < 0 {
			bestIdx = i
			continue
		}
		// Same received set: prefer the one that applied more (less to wait for).
		b := ins[bestIdx]
		if ex, bex := in.Status.Executed, b.Status.Executed; ex != nil && !isEmpty(ex) && (bex == nil || (ex.Contains(bex) && !bex.Contains(ex))) {
			bestIdx = i
		}
	}
	if bestIdx < 0 {
		return "", false
	}
	return ins[bestIdx].Name, true
}

func isEmpty(s dbsql.GTIDSet) bool { return s == nil || s.IsEmpty() }
