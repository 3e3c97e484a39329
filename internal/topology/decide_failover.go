package topology

import (
	"fmt"
	"strings"
	"time"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
)

// ReceiverSilence is how long a running receiver may get nothing from its source before it no
// longer counts as evidence that the source is alive, when its heartbeat period is not
// known; receiverSilence gives it for a known period.
const ReceiverSilence = 1500 * time.Millisecond

// heartbeatMargin is what a receiver's silence must exceed its heartbeat period by: a late
// heartbeat on a loaded machine is not a lost source.
const heartbeatMargin = 500 * time.Millisecond

// receiverSilence is how long a receiver whose source sends heartbeats every period (0:
// unknown) may get nothing before it no longer shows that its source is alive: one period
// and a margin (1.5 s for the former 1 s period, 1 s for the 0.5 s Dolphin configures now;
// docs/design/0035).
func receiverSilence(period time.Duration) time.Duration {
	if period <= 0 {
		return ReceiverSilence
	}
	return period + heartbeatMargin
}

// decideFailover promotes the replica that received the most transactions. It runs in two
// observations: first every candidate stops receiving (so positions are final), then the
// best one applies what it received and is promoted, and the rest follow it.
//
// readOnlyAlive is true when the old primary answers but is read-only (restarted behind a
// replica): replicas connected to it receive nothing it could still write, so they need not
// have lost it before the fence.
func decideFailover(v ClusterView, d Decision, lost InstanceView, readOnlyAlive bool) Decision {
	fenced := v.Failover != nil && v.Failover.Fenced && v.Failover.From == lost.Name
	var candidates []InstanceView
	for _, in := range v.Instances {
		if in.Name == lost.Name || !in.Reachable() || in.Fresh || d.Errant[in.Name] {
			continue
		}
		// A replica, or — once fenced — a read-only instance whose replication was already
		// reset by an interrupted promotion (it may hold the most transactions).
		if in.Status.Replica != nil || (fenced && in.Status.ReadOnly) {
			candidates = append(candidates, in)
		}
	}
	// What the candidates received is recorded before anything else, and kept when a step
	// fails: a candidate lost after this observation may be the only one holding writes the
	// lost primary acknowledged (docs/design/0039).
	record := recordReceived(v.Failover, v.Tail, lost.Name, candidates)
	for _, in := range v.Instances {
		// A replica lost with the primary: what it held when last seen counts as received.
		if in.Name != lost.Name && !in.Reachable() && !d.Errant[in.Name] {
			mergeReceived(record, v.Seen[in.Name], in.Name)
		}
	}
	d.State = StateFailover
	if unseen := unseenReplicas(v, d, lost.Name); len(unseen) > 0 && v.AcceptLossFrom != lost.Name {
		// After an operator restart, a replica not observed yet may hold writes the lost
		// primary acknowledged that no candidate has (the restart may have come with theirs).
		d.State = StatePrimaryLost
		d.RestartLostPrimary = lost.Name
		d.Message = fmt.Sprintf("failover from %s waits: %s answered before the operator restarted and has not been seen since; "+
			"it may hold acknowledged writes no candidate has, so Dolphin restarts %s (which keeps them) and waits for it or them "+
			"(to fail over anyway and give such writes up, annotate the cluster with mysql.dolphin.dev/failover-accept-loss=%s)",
			lost.Name, strings.Join(unseen, ", "), lost.Name, lost.Name)
		return d
	}
	if len(candidates) == 0 {
		d.State = StatePrimaryLost
		d.Message = fmt.Sprintf("primary %s is lost and no healthy replica can replace it", lost.Name)
		if record.Received != nil {
			// The failover had begun: the lost primary is the one place left that holds what
			// the candidates received.
			d.RestartLostPrimary = lost.Name
			d.Message += fmt.Sprintf("; %s, so Dolphin restarts %s, which keeps every write it acknowledged",
				heldBy(record, lost.Name), lost.Name)
		}
		return d
	}
	if !fenced {
		// Replicas still receiving from the lost primary mean it is alive and only this
		// operator lost it: failing over now would leave two writable primaries. A receiver
		// that shows as running but has got nothing, not even a heartbeat, for longer than
		// the heartbeat period does not count: it would only notice its hung or cut-off
		// source after slave_net_timeout (docs/design/0035).
		for _, c := range candidates {
			if readOnlyAlive {
				break
			}
			if rs := c.Status.Replica; rs.IORunning && rs.SourceHost == lost.Host && rs.SourcePort == lost.Port &&
				c.ReceiverSilentFor < receiverSilence(rs.HeartbeatPeriod) {
				d.State = StatePrimarySuspect
				d.Message = fmt.Sprintf("primary %s does not answer Dolphin, but %s still receives from it: not failing over", lost.Name, c.Name)
				return d
			}
		}
		for _, c := range candidates {
			d.Plan = append(d.Plan, Step{Kind: StepStopIO, Instance: c.Name})
		}
		fencedRecord := *record
		fencedRecord.Fenced = true
		d.Failover, d.FailoverOnStepError = &fencedRecord, record
		d.Message = fmt.Sprintf("primary %s lost (%v): stopping the replicas' receivers", lost.Name, lost.Err)
		return d
	}
	d.Failover, d.FailoverOnStepError = record, record
	// Positions are final only if no candidate still receives: fence again otherwise. (The
	// plan may already hold other steps, such as a restarted candidate's accounts.)
	fencing := false
	for _, c := range candidates {
		if rs := c.Status.Replica; rs != nil && rs.IORunning {
			d.Plan = append(d.Plan, Step{Kind: StepStopIO, Instance: c.Name})
			fencing = true
		}
	}
	if fencing {
		d.Message = fmt.Sprintf("failover from %s: receivers still running, stopping them again", lost.Name)
		return d
	}
	best, ok := mostAdvanced(candidates, received)
	if !ok {
		d.State = StatePrimaryLost
		d.Message = "the replicas received diverging transactions; refusing to choose a new primary"
		return d
	}
	best = notStopping(candidates, best, record)
	b, _ := v.instance(best)
	short, lossAccepted := !holds(received(b), record.Received), ""
	// Writes the lost primary acknowledged alone (semi-sync had fallen back) may be on it only.
	alone := v.AckedAlone != nil && v.AckedAlone.Primary == lost.Name && !holds(received(b), v.AckedAlone.UpTo)
	switch {
	case alone && v.AcceptLossFrom == lost.Name:
		lossAccepted = fmt.Sprintf(", giving up what %s acknowledged alone since %s (up to %s; %s has %s) as requested",
			lost.Name, v.AckedAlone.Since.UTC().Format(time.RFC3339), v.AckedAlone.UpTo, best, received(b))
		if short {
			lossAccepted += fmt.Sprintf(", and what only %s had received (up to %s)", record.ReceivedBy, record.Received)
		}
	case alone:
		// Not even the candidate that received the most holds what the lost primary told
		// clients was committed while no replica acknowledged: only the lost primary does.
		d.State = StatePrimaryLost
		d.RestartLostPrimary = lost.Name
		d.Message = fmt.Sprintf("failover from %s waits: it acknowledged writes alone since %s (semi-sync had fallen back; up to %s), "+
			"and the best candidate, %s, has %s; Dolphin restarts %s (which keeps them) and waits for it "+
			"(to promote %s anyway and give them up, annotate the cluster with mysql.dolphin.dev/failover-accept-loss=%s)",
			lost.Name, v.AckedAlone.Since.UTC().Format(time.RFC3339), v.AckedAlone.UpTo, best, received(b), lost.Name, best, lost.Name)
		return d
	case short && v.AcceptLossFrom == lost.Name:
		// A user chose a primary over those writes (Engine.AcceptFailoverLoss).
		lossAccepted = fmt.Sprintf(", giving up what only %s had received (up to %s; %s has %s) as requested",
			record.ReceivedBy, record.Received, best, received(b))
	case short:
		// The candidate that received the most is gone, or came back without it (a
		// restarted MariaDB replica discards the relay log it had not applied): promoting
		// the best one left would discard writes the lost primary may have acknowledged.
		// The lost primary still holds them; restarted, it rolls back only what no client
		// was told committed and comes back as the primary (docs/design/0039).
		d.State = StatePrimaryLost
		d.RestartLostPrimary = lost.Name
		waitsFor := lost.Name
		if record.ReceivedBy != "" && record.ReceivedBy != lost.Name {
			waitsFor += " or " + record.ReceivedBy
		}
		d.Message = fmt.Sprintf("failover from %s waits: %s, but the best candidate left, %s, has %s; "+
			"promoting it could lose acknowledged writes, so Dolphin restarts %s (which keeps them) and waits for %s "+
			"(to promote %s anyway and give them up, annotate the cluster with mysql.dolphin.dev/failover-accept-loss=%s)",
			lost.Name, heldBy(record, lost.Name), best, received(b), lost.Name, waitsFor, best, lost.Name)
		return d
	}
	if restarted := restartedSinceThePrimary(v, candidates); len(restarted) > 0 && v.AcceptLossFrom != lost.Name {
		// A MariaDB replica that restarts discards what it received and had not applied:
		// writes it acknowledged may be on the lost primary only (0039 records what the
		// candidates received when a failover begins; these restarted before it could).
		d.State = StatePrimaryLost
		d.RestartLostPrimary = lost.Name
		d.Message = fmt.Sprintf("failover from %s waits: %s restarted since %s was last seen answering, and a restarted replica discards "+
			"what it received and had not applied, which may include acknowledged writes; Dolphin restarts %s (which keeps them) and waits for it "+
			"(to fail over anyway and give such writes up, annotate the cluster with mysql.dolphin.dev/failover-accept-loss=%s)",
			lost.Name, strings.Join(restarted, ", "), lost.Name, lost.Name, lost.Name)
		return d
	}
	// An interrupted promotion may have left its source side on, which would hold its
	// applier for the semi-sync timeout.
	d.Plan = append(d.Plan, semiSyncSourceOff(b)...)
	if b.Status.Replica != nil {
		// A replica applies what it received first. An instance that is no replica (its
		// replication reset by an interrupted promotion, or the primary lost before this
		// one, restarted) holds its executed set: nothing to wait for — and MariaDB's wait
		// would watch gtid_slave_pos, which lacks the instance's own writes, until it times
		// out (a 60 s outage in a chaos round, 2026-12-04).
		d.Plan = append(d.Plan, Step{Kind: StepWaitApplied, Instance: best, GTID: received(b)})
	}
	d.Plan = append(d.Plan, Step{Kind: StepPromote, Instance: best, SemiSync: len(v.Instances) > 1})
	for _, c := range candidates {
		if c.Name != best {
			d.Plan = append(d.Plan, Step{Kind: StepReplicate, Instance: c.Name, Source: best})
		}
	}
	// A switchover pending on the lost primary is moot once another one is promoted. What
	// the promoted one received and the others did not is guarded until they fetch it.
	d.Primary, d.PromotedFrom, d.Failover, d.Switchover = best, lost.Name, nil, nil
	d.Replaced[lost.Name] = true
	d.Tail = &FailoverTail{From: lost.Name, Received: received(b), HeldBy: best}
	d.Message = fmt.Sprintf("failing over from %s to %s", lost.Name, best) + lossAccepted
	d.LossAccepted = strings.TrimPrefix(lossAccepted, ", ")
	return d
}

// notStopping is the candidate to promote instead of best when best's pod is being deleted:
// the most advanced of the others, if it holds everything best received and the failover's
// record. Otherwise best: promoting the only holder of those writes before its server stops
// keeps them in its binary log (a replica that restarts discards what it had not applied),
// where waiting for it to come back would not (docs/design/0051).
func notStopping(candidates []InstanceView, best string, record *FailoverProgress) string {
	var b InstanceView
	var others []InstanceView
	for _, c := range candidates {
		if c.Name == best {
			b = c
		} else if !c.Stopping {
			others = append(others, c)
		}
	}
	if !b.Stopping {
		return best
	}
	alt, ok := mostAdvanced(others, received)
	if !ok {
		return best
	}
	for _, o := range others {
		if o.Name == alt && holds(received(o), received(b)) && holds(received(o), record.Received) {
			return alt
		}
	}
	return best
}

// holds reports whether set contains every transaction of want (an empty want is always held).
func holds(set, want dbsql.GTIDSet) bool {
	return isEmpty(want) || (set != nil && set.Contains(want))
}

// heldBy says who holds the writes a waiting failover must not give up.
func heldBy(record *FailoverProgress, lost string) string {
	if record.ReceivedBy == lost {
		// The tail of the failover that promoted it (settleTail).
		return fmt.Sprintf("%s was promoted with transactions up to %s that no replica had fetched from it yet", lost, record.Received)
	}
	return fmt.Sprintf("%s received up to %s from it", record.ReceivedBy, record.Received)
}

// recordReceived is the failover's progress with its record of the most received updated
// from this observation: a candidate whose received set contains the record (and is more)
// replaces it. The record only grows; a candidate that diverges from it leaves it as it is
// (mostAdvanced refuses diverging candidates anyway). A failover that begins while the last
// one's tail is guarded starts its record from that tail. The progress is a new value, never
// prev itself.
func recordReceived(prev *FailoverProgress, tail *FailoverTail, from string, candidates []InstanceView) *FailoverProgress {
	out := &FailoverProgress{From: from}
	if prev != nil && prev.From == from {
		out.Fenced, out.Received, out.ReceivedBy = prev.Fenced, prev.Received, prev.ReceivedBy
	}
	if out.Received == nil && tail != nil && !isEmpty(tail.Received) {
		out.Received, out.ReceivedBy = tail.Received, tail.HeldBy
	}
	for _, c := range candidates {
		mergeReceived(out, received(c), c.Name)
	}
	return out
}

// mergeReceived makes s, held by name, the record's received set when it holds more.
func mergeReceived(r *FailoverProgress, s dbsql.GTIDSet, name string) {
	if isEmpty(s) {
		return
	}
	if r.Received == nil || (holds(s, r.Received) && !holds(r.Received, s)) {
		r.Received, r.ReceivedBy = s, name
	}
}

// restartedSinceThePrimary are the candidates whose server started after the primary was last
// seen answering, sorted. An engine that never saw it (an operator restart while it was
// down) counts starts from unseenWindow before its own start. Uptime is whole seconds, rounded
// down: a server counts when it may have started after that moment — one that started up to a
// second before it counts too. Waiting is the safe side: a restart not counted lets a failover
// promote a replica that lost what it had received (a real-server test saw one started half a
// second after the primary's last answer counted in one cycle and not in the next, and the
// failover went on without the write only that replica had held).
func restartedSinceThePrimary(v ClusterView, candidates []InstanceView) []string {
	ref := v.PrimarySeenAt
	if ref.IsZero() && !v.Started.IsZero() {
		ref = v.Started.Add(-unseenWindow)
	}
	if ref.IsZero() || v.Now.IsZero() {
		return nil
	}
	var out []string
	for _, c := range candidates {
		if c.Status != nil && v.Now.Add(-c.Status.Uptime).After(ref) {
			out = append(out, c.Name)
		}
	}
	return out
}

// unseenWindow is how long before an operator's start a replica's restart is taken for one
// around the primary's loss, when the operator never saw the primary (docs/design/0045).
const unseenWindow = 30 * time.Second

// unseenReplicas are the instances other than the lost primary that do not answer, are not
// errant, and have not been observed since the operator started although the last status
// showed them answering (ClusterView.Unseen), sorted.
func unseenReplicas(v ClusterView, d Decision, lost string) []string {
	var out []string
	for _, in := range v.Instances {
		if in.Name != lost && v.Unseen[in.Name] && !in.Reachable() && !d.Errant[in.Name] {
			out = append(out, in.Name)
		}
	}
	return out
}

// received is what an instance holds, applied or not: a replica's received set, or the
// executed set of an instance that no longer replicates.
func received(in InstanceView) dbsql.GTIDSet {
	if in.Status.Replica != nil {
		return in.Status.Replica.Received
	}
	return in.Status.Executed
}

// settleTail is the failover tail to carry forward: nil once every instance but the primary
// holds it (or the one that held it was found errant: the primary chose other writes), the
// decision's otherwise. An instance that does not answer, or is being re-cloned, keeps it.
func settleTail(v ClusterView, d Decision) *FailoverTail {
	t := d.Tail
	if t == nil || isEmpty(t.Received) || d.Errant[t.HeldBy] {
		return nil
	}
	for _, in := range v.Instances {
		if in.Name == d.Primary || d.Errant[in.Name] {
			continue
		}
		if !in.Reachable() || in.Fresh || !holds(received(in), t.Received) {
			return t
		}
	}
	return nil
}
