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
	if a != nil && d.Primary != a.Primary {
		return nil
	}
	p, ok := v.instance(d.Primary)
	if !ok || !p.Reachable() || len(v.Instances) < 2 {
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
			upTo = a.UpTo // never backwards (an executed set read from a restarted server)
		}
		return &AckedAlone{Primary: p.Name, UpTo: upTo, Since: since}
	}
	if a == nil {
		return nil
	}
	for _, r := range v.Instances {
		if r.Name != p.Name && r.Reachable() && !r.Fresh && !d.Errant[r.Name] && holds(received(r), a.UpTo) {
			return nil
		}
	}
	return a
}
