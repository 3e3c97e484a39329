package clustermanager

import (
	"time"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/dbsql"
	"github.com/dolphin-operator/dolphin/internal/topology"
)

// What a new engine starts from: its state as the cluster's status recorded it.

// persisted restores the engine's state from status.topology.
func persisted(c *dolphinv1.MySQLCluster) topology.Persisted {
	t := c.Status.Topology
	if t == nil {
		return topology.Persisted{}
	}
	p := topology.Persisted{Primary: t.Primary, Errant: map[string]bool{}, Instances: map[string]topology.InstanceRecord{}}
	for _, in := range t.Instances {
		p.Instances[in.Name] = topology.InstanceRecord{Credentials: in.CredentialsGeneration, Replication: in.ReplicationCredentialsGeneration}
		if in.Reachable {
			if p.Answering == nil {
				p.Answering = map[string]bool{}
			}
			p.Answering[in.Name] = true
		}
	}
	for _, n := range t.ErrantInstances {
		p.Errant[n] = true
	}
	if len(t.ReplacedPrimaries) > 0 {
		p.Replaced = map[string]bool{}
		for _, n := range t.ReplacedPrimaries {
			p.Replaced[n] = true
		}
	}
	if f := t.FailoverInProgress; f != nil {
		p.Failover = &topology.FailoverProgress{From: f.From, Fenced: f.Fenced, ReceivedBy: f.ReceivedBy}
		// Written by topologyStatus from a set the engine parsed: it parses again. Were it
		// edited into something else, the record is lost and the failover goes on with
		// what the candidates show now (as before the record existed).
		if g, err := dbsql.ParseGTID(dbsql.Flavor(c.Spec.Engine.Flavor), f.Received); err == nil && f.Received != "" {
			p.Failover.Received = g
		}
	}
	if tl := t.FailoverTail; tl != nil {
		// Parsed like the failover record; an unparsable one is lost the same way.
		if g, err := dbsql.ParseGTID(dbsql.Flavor(c.Spec.Engine.Flavor), tl.Received); err == nil && !g.IsEmpty() {
			p.Tail = &topology.FailoverTail{From: tl.From, Received: g, HeldBy: tl.HeldBy}
		}
	}
	if a := t.AcknowledgedAlone; a != nil {
		// Parsed like the failover record; an unparsable one is lost the same way.
		g, err := dbsql.ParseGTID(dbsql.Flavor(c.Spec.Engine.Flavor), a.UpTo)
		if err == nil {
			// Refresh: a restart of the source side just before the operator restarted may
			// have released a commit beyond upTo; the first observation takes it in.
			p.AckedAlone = &topology.AckedAlone{Primary: a.Primary, UpTo: g, Since: a.Since.Time, Refresh: true}
		}
	}
	if sw := t.SwitchoverInProgress; sw != nil {
		p.Switchover = &topology.SwitchoverRequest{To: sw.To, Fenced: sw.Fenced, From: sw.From}
	}
	p.LastSwitchoverRequest = t.LastSwitchoverRequest
	if x := t.ExternalSource; x != nil && x.LastVerification != nil {
		lv := x.LastVerification
		p.Verification = &topology.VerificationRecord{ID: lv.Request, At: lv.At.Time, Position: lv.Position, Tables: int(lv.Tables),
			Mismatched: lv.Mismatched, Error: lv.Error}
	}
	if x := t.ExternalSource; x != nil && x.LastCutoverFailure != nil {
		f := x.LastCutoverFailure
		p.CutoverFailed = &topology.CutoverFailure{ID: f.Request, At: f.At.Time, Error: f.Error}
	}
	if x := t.ExternalSource; x != nil && x.CutOver != nil {
		co := x.CutOver
		p.Cutover = &topology.CutoverRecord{Source: x.Source, Instance: co.Instance, At: co.At.Time, Position: co.Position,
			Pause: time.Duration(co.WritePauseMilliseconds) * time.Millisecond, Warning: co.Warning, FallBackIgnored: co.IgnoredFallBackRequest}
		persistedFallback(&p, x)
	}
	if lp := t.LastPromotion; lp != nil {
		p.LastPromotion = &topology.PromotionSeen{From: lp.From, At: lp.Time.Time}
	}
	return p
}

// persistedFallback restores the way back from a cut-over cluster's status: whether the server
// was pointed at the cluster (and what failed), the last failed fall back, the fall back.
func persistedFallback(p *topology.Persisted, x *dolphinv1.ExternalReplication) {
	if f := x.Fallback; f != nil {
		st := &topology.FallbackStart{Error: f.Error, Generation: f.CredentialsGeneration}
		if f.Since != nil {
			st.At, st.Error = f.Since.Time, ""
		}
		p.FallbackStarted = st
	}
	if f := x.LastFallBackFailure; f != nil {
		p.FallBackFailed = &topology.CutoverFailure{ID: f.Request, At: f.At.Time, Error: f.Error}
	}
	if fb := x.FellBack; fb != nil {
		p.FellBack = &topology.CutoverRecord{Source: x.CutOver.Instance, Instance: fb.Instance, At: fb.At.Time, Position: fb.Position,
			Pause: time.Duration(fb.WritePauseMilliseconds) * time.Millisecond, Warning: fb.Warning}
	}
}
