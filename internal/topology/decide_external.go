package topology

import (
	"fmt"
	"slices"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
	"github.com/dolphin-operator/dolphin/internal/serverid"
)

// Errors of a primary's replication from an external source that replication cannot get past
// by itself.
const (
	// errnoSourceGone: error 1236 from the source — it no longer has the binary logs from the
	// cluster's position on (purged before the copy caught up), or its history diverged.
	errnoSourceGone = errnoSourceFatalReading
)

// followExternal rewrites a decision for a cluster that follows an external source
// (ClusterView.External): every promotion — the bootstrap's, a failover's, a switchover's —
// points the new primary at the source instead of opening it for writes (StepFollowExternal),
// and the fence of a primary that follows the source stops its replication first, so that
// what it holds no longer moves while the new primary catches up with it.
func followExternal(v ClusterView, d Decision) Decision {
	x := v.External
	plan := make([]Step, 0, len(d.Plan))
	for _, s := range d.Plan {
		switch {
		case s.Kind == StepPromote:
			s.Kind = StepFollowExternal
		case s.Kind == StepFence && s.Instance == v.Primary && !slices.ContainsFunc(plan, func(p Step) bool {
			return p.Kind == StepStopReplication && p.Instance == s.Instance
		}):
			plan = append(plan, Step{Kind: StepStopReplication, Instance: s.Instance})
		}
		plan = append(plan, s)
	}
	d.Plan = plan
	if slices.ContainsFunc(plan, func(s Step) bool { return s.Kind == StepCutover }) {
		d.State = StateCutover
		d.Message = fmt.Sprintf("cutting over from %s to %s: fencing the source, waiting for its final position, opening %s for writes", x, d.Primary, d.Primary)
		return d
	}
	if slices.ContainsFunc(plan, func(s Step) bool { return s.Kind == StepVerifyExternal }) {
		d.State = StateHealing
		d.Message = fmt.Sprintf("verifying the copy: every table of %s and of %s compared at one position of %s", x, d.Primary, x)
		return d
	}
	if d.State == StateHealthy && d.CutOver == nil {
		d.Message = fmt.Sprintf("%s follows %s (read-only until the cutover)%s; every replica replicates from it", d.Primary, x, behind(v, d.Primary))
	}
	return d
}

// behind describes how far the primary is behind the external source (" 3 s behind"), or ""
// when its replication reports no lag.
func behind(v ClusterView, primary string) string {
	p, ok := v.instance(primary)
	if !ok || !p.Reachable() || p.Status.Replica == nil || p.Status.Replica.SecondsBehindSource == nil {
		return ""
	}
	return fmt.Sprintf(", %d s behind", *p.Status.Replica.SecondsBehindSource)
}

// externalSteps are the steps that keep the reachable primary p following v.External, and the
// problem to report ("" when none). A writable primary is never pointed at the source: writes
// of its own would make its history diverge from the source's.
func externalSteps(v ClusterView, p InstanceView) (steps []Step, problem string) {
	x := v.External
	if !p.Status.ReadOnly {
		return nil, fmt.Sprintf("%s accepts writes although the cluster follows %s until a cutover: it is not pointed at %s; make it read-only (SET GLOBAL read_only=ON) to go on following, or cut over", p.Name, x, x)
	}
	if writesOfItsOwn(v, p) {
		return nil, fmt.Sprintf("%s holds writes of the cluster's own (%s) although the cluster follows %s: its history has left the source's, so it is not pointed at %s again; if a cutover happened, ask for it (mysql.dolphin.dev/cutover) to record it", p.Name, p.Status.Executed, x, x)
	}
	if x.Unavailable != "" {
		// What p's server holds (its replication connection) keeps working; pointing it
		// again, a cutover or a verification needs the account.
		return nil, fmt.Sprintf("%s: replication from %s goes on as the servers have it, but Dolphin cannot point an instance at it, cut over or verify until then", x.Unavailable, x)
	}
	rs := p.Status.Replica
	follow := Step{Kind: StepFollowExternal, Instance: p.Name, SemiSync: len(v.Instances) > 1}
	switch {
	case rs == nil, rs.SourceHost != x.Host, rs.SourcePort != x.Port,
		p.ReplicationGeneration != x.replicationGeneration(), !replicationTLSMatches(rs, x.TLS):
		return []Step{follow}, cutoverWaits(x, p)
	case x.Cutover != "" && x.Cutover == v.CutoverFailed:
		return nil, fmt.Sprintf("the cutover asked (%q) failed and is not tried again: set a new value of mysql.dolphin.dev/cutover to try again", x.Cutover)
	case x.Cutover != "" && rs.IORunning && rs.SQLRunning:
		if why := cutoverNotYet(v, p); why != "" {
			return nil, "the cutover waits: " + why
		}
		return []Step{{Kind: StepCutover, Instance: p.Name}}, ""
	case x.Verify != "" && x.Verify != v.Verified && rs.IORunning && rs.SQLRunning:
		return []Step{{Kind: StepVerifyExternal, Instance: p.Name}}, ""
	case rs.LastIOErrno == errnoSourceGone:
		return nil, fmt.Sprintf("%s cannot go on replicating from %s: error %d: %s (the source no longer has the binary logs from the cluster's position: keep them longer on the source and copy it again into a new cluster)",
			p.Name, x, rs.LastIOErrno, rs.LastIOError)
	case !rs.SQLRunning && rs.LastSQLErrno != 0:
		return nil, fmt.Sprintf("%s stopped applying what it replicates from %s: error %d: %s (fix the cause, then START SLAVE on it, or copy the source again into a new cluster)",
			p.Name, x, rs.LastSQLErrno, rs.LastSQLError)
	case !rs.IORunning && rs.LastIOErrno != 0:
		// The receiver retries by itself (MASTER_CONNECT_RETRY); it is started again only
		// when it stopped for good.
		return []Step{{Kind: StepStartReplication, Instance: p.Name}},
			fmt.Sprintf("%s cannot receive from %s: error %d: %s", p.Name, x, rs.LastIOErrno, rs.LastIOError)
	case !rs.IORunning || !rs.SQLRunning:
		return []Step{{Kind: StepStartReplication, Instance: p.Name}}, ""
	}
	return nil, ""
}

// cutoverWaits says that an asked cutover waits for p to follow the source again ("" when
// none is asked).
func cutoverWaits(x *ExternalSource, p InstanceView) string {
	if x.Cutover == "" {
		return ""
	}
	return fmt.Sprintf("the cutover waits until %s replicates from %s", p.Name, x)
}

// unrecordedCutover returns the record of a cutover found done although not recorded: the
// cutover is asked and the primary is detached (migrate.Cutover resets its replication before
// it opens it) and either writable or holding writes of the cluster's own — an operator
// stopped between the opening and the record (and the primary perhaps restarted since,
// read-only as every server starts). Nil otherwise. Its position and pause are unknown.
func unrecordedCutover(v ClusterView, p InstanceView) *CutoverRecord {
	x := v.External
	if x.Cutover == "" || p.Status.Replica != nil || (p.Status.ReadOnly && !writesOfItsOwn(v, p)) {
		return nil
	}
	return &CutoverRecord{Source: x.String(), Instance: p.Name, At: v.Now, FallBackIgnored: x.FallBack,
		Warning: "found cut over without a record (the operator stopped during the cutover): the final position and the write pause are unknown"}
}

// writesOfItsOwn reports whether in holds transactions the cluster wrote itself rather than
// replicated from the source: the last transaction of a domain of its executed set carries
// the server_id of one of the cluster's servers (as observed, or one Dolphin gives its
// instances). A cluster that follows a source writes nothing of its own (its accounts are
// created without binary logging), so such a server took writes — after a cutover, or opened
// by hand — and must never be pointed at the source again: its history has left the source's.
func writesOfItsOwn(v ClusterView, in InstanceView) bool {
	if in.Status == nil {
		return false
	}
	ours := func(id uint32) bool {
		if id >= serverid.InstanceBase && id < serverid.InstanceBase+serverid.MaxInstances {
			return true
		}
		for _, o := range v.Instances {
			if o.Status != nil && o.Status.ServerID == id {
				return true
			}
		}
		return false
	}
	return slices.ContainsFunc(dbsql.LastWriters(in.Status.Executed), ours)
}

// maxCutoverLag is how far behind the source (Seconds_Behind_Master) the primary may be when a
// cutover begins: the source is fenced until the primary caught up, so a cutover that starts
// far behind fences it for that long, or fails at the engine's wait timeout.
const maxCutoverLag = 5

// cutoverNotYet says why a cutover cannot begin yet ("" when it can): the primary is too far
// behind the source, or no replica acknowledges what it applies — the cluster would open with
// its writes on one server, and a primary that waits for an acknowledgement would not catch
// up within the wait while the source is fenced.
func cutoverNotYet(v ClusterView, p InstanceView) string {
	rs := p.Status.Replica
	switch {
	case rs.SecondsBehindSource == nil:
		return fmt.Sprintf("%s reports no lag yet", p.Name)
	case *rs.SecondsBehindSource > maxCutoverLag:
		return fmt.Sprintf("%s is %d s behind %s (at most %d s to begin)", p.Name, *rs.SecondsBehindSource, v.External, maxCutoverLag)
	case len(v.Instances) > 1 && p.Status.SemiSync.Clients == 0:
		return fmt.Sprintf("no replica acknowledges what %s applies", p.Name)
	}
	return ""
}
