package topology

import "slices"

// settleAckedAlone is the record of writes the primary acknowledged alone to carry into the
// next observation (docs/design/0043):
//   - set, or moved forward to the primary's executed set, while the primary's semi-sync has
//     fallen back to asynchronous replication, or this plan restarts its source side (which
//     releases a commit that began to wait in between);
//   - kept while the primary is not seen (a failover from it promotes only a candidate that
//     holds the record, or waits, or a person accepts the loss);
//   - dropped once semi-sync is active again and a replica holds everything it covers, or
//     another instance became the primary (a switchover waits until the new primary applied
//     everything the old one had; a failover promoted a holder, or the loss was accepted and
//     reported).
func settleAckedAlone(v ClusterView, d Decision) *AckedAlone {
	a := v.AckedAlone
	if len(v.Instances) < 2 {
		return nil // no replica: every write is on one server by nature, nothing to wait for
	}
	if v.External != nil {
		// Following a source: what the primary applied is the source's, which still holds
		// it; no client was told "committed" by the cluster.
		return nil
	}
	if a != nil && d.Primary != a.Primary {
		return nil
	}
	p, ok := v.instance(d.Primary)
	if !ok || !p.Reachable() {
		return a
	}
	ss := p.Status.SemiSync
	restarting := slices.ContainsFunc(d.Plan, func(s Step) bool { return s.Kind == StepRestartSemiSyncSource && s.Instance == p.Name })
	if (ss.SourceEnabled && !ss.SourceActive) || restarting {
		since := v.Now
		if a != nil {
			since = a.Since
		}
		upTo := p.Status.Executed
		if a != nil && !holds(upTo, a.UpTo) {
			upTo = a.UpTo // never backwards while it may still acknowledge alone
		}
		// A restart releases a commit that begins to wait between its two statements: that
		// commit is beyond this observation, so the next one moves UpTo to it.
		return &AckedAlone{Primary: p.Name, UpTo: upTo, Since: since, Refresh: restarting}
	}
	if a == nil {
		return nil
	}
	if a.Refresh || !holds(p.Status.Executed, a.UpTo) {
		// The primary is authoritative about what it committed: a commit released by a
		// restart is in its executed set now, and one it rolled back when it restarted
		// (--init-rpl-role=SLAVE: waiting, never acknowledged) is not.
		a = &AckedAlone{Primary: a.Primary, UpTo: p.Status.Executed, Since: a.Since}
	}
	for _, r := range v.Instances {
		if r.Name != p.Name && r.Reachable() && !r.Fresh && !d.Errant[r.Name] && holds(received(r), a.UpTo) {
			return nil
		}
	}
	return a
}
