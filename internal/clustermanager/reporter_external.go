package clustermanager

import (
	"net"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/topology"
)

// What the topology reporter writes and says about a cluster that follows an external source.

// externalNews returns next's external source when it brings a cutover, and when it brings a
// verification, that old did not record (nil otherwise).
func externalNews(old, next *dolphinv1.TopologyStatus) (cutOver, verified *dolphinv1.ExternalReplication) {
	var was *dolphinv1.ExternalReplication
	if old != nil {
		was = old.ExternalSource
	}
	x := next.ExternalSource
	if x == nil {
		return nil, nil
	}
	if x.CutOver != nil && (was == nil || was.CutOver == nil) {
		cutOver = x
	}
	if x.FellBack != nil && (was == nil || was.FellBack == nil) {
		cutOver = x // the fall back is a cutover the other way round
	}
	if x.LastVerification != nil && (was == nil || was.LastVerification == nil || was.LastVerification.Request != x.LastVerification.Request) {
		verified = x
	}
	return cutOver, verified
}

// externalEvents records a new verification's outcome and a new cutover as events.
func (r *reporter) externalEvents(c *dolphinv1.MySQLCluster, cutOver, verified *dolphinv1.ExternalReplication) {
	if x := verified; x != nil {
		v := x.LastVerification
		switch {
		case v.Error != "":
			r.m.Recorder.Eventf(c, nil, corev1.EventTypeWarning, "CopyNotVerified", "Verify",
				"the comparison with %s (request %q) could not be made: %s", x.Source, v.Request, v.Error)
		case len(v.Mismatched) > 0:
			r.m.Recorder.Eventf(c, nil, corev1.EventTypeWarning, "CopyMismatch", "Verify",
				"%d of %d tables differ from %s at %s: %s", len(v.Mismatched), v.Tables, x.Source, v.Position, strings.Join(v.Mismatched, ", "))
		default:
			r.m.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "CopyVerified", "Verify",
				"all %d tables equal to %s at %s", v.Tables, x.Source, v.Position)
		}
	}
	if x := cutOver; x != nil && x.FellBack != nil {
		fb := x.FellBack
		typ := corev1.EventTypeNormal
		if fb.Warning != "" {
			typ = corev1.EventTypeWarning
		}
		r.m.Recorder.Eventf(c, nil, typ, "FellBack", "FallBack",
			"writes moved back from %s to %s at %s, write pause %d ms; the cluster is read-only from now on%s", x.CutOver.Instance, fb.Instance,
			orUnknown(fb.Position), fb.WritePauseMilliseconds, warningSuffix(fb.Warning))
		return
	}
	if x := cutOver; x != nil {
		typ := corev1.EventTypeNormal
		if x.CutOver.Warning != "" {
			typ = corev1.EventTypeWarning
		}
		r.m.Recorder.Eventf(c, r.podRef(x.CutOver.Instance), typ, "CutOver", "Cutover",
			"writes moved from %s to %s at %s, write pause %d ms%s", x.Source, x.CutOver.Instance, orUnknown(x.CutOver.Position),
			x.CutOver.WritePauseMilliseconds, warningSuffix(x.CutOver.Warning))
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "an unknown position"
	}
	return s
}

func warningSuffix(w string) string {
	if w == "" {
		return ""
	}
	return ": " + w
}

// externalReplication describes how the primary replicates from the external source the
// cluster follows (nil when it follows none): the instance whose replication points at the
// source, its lag, what it received and its last error.
func externalReplication(rep topology.Report) *dolphinv1.ExternalReplication {
	var verified *dolphinv1.CopyVerification
	if v := rep.Persisted.Verification; v != nil {
		verified = &dolphinv1.CopyVerification{Request: v.ID, At: metav1.NewTime(v.At), Position: v.Position,
			Tables: int32(v.Tables), Mismatched: v.Mismatched, Error: v.Error}
	}
	var failed *dolphinv1.CutoverFailure
	if f := rep.Persisted.CutoverFailed; f != nil {
		failed = &dolphinv1.CutoverFailure{Request: f.ID, At: metav1.NewTime(f.At), Error: f.Error}
	}
	if co := rep.Persisted.Cutover; co != nil {
		// Cut over: the record stays, for people and for every later engine (never
		// following the source again).
		x := &dolphinv1.ExternalReplication{Source: co.Source, LastVerification: verified, LastCutoverFailure: failed, CutOver: cutoverRecord(co)}
		fallbackStatus(x, rep)
		return x
	}
	if rep.External == "" {
		return nil
	}
	x := &dolphinv1.ExternalReplication{Source: rep.External, LastVerification: verified, LastCutoverFailure: failed}
	for _, in := range rep.Instances {
		if in.Name != rep.Persisted.Primary || in.Status == nil || in.Status.Replica == nil {
			continue
		}
		rs := in.Status.Replica
		if net.JoinHostPort(rs.SourceHost, strconv.Itoa(rs.SourcePort)) != rep.External {
			continue
		}
		x.Instance, x.Replicating, x.LagSeconds = in.Name, rs.IORunning && rs.SQLRunning, rs.SecondsBehindSource
		if rs.Received != nil {
			x.Received = rs.Received.String()
		}
		if rs.LastSQLError != "" {
			x.Error = rs.LastSQLError
		} else if rs.LastIOError != "" {
			x.Error = rs.LastIOError
		}
	}
	return x
}

func cutoverRecord(co *topology.CutoverRecord) *dolphinv1.CutoverRecord {
	return &dolphinv1.CutoverRecord{Instance: co.Instance, At: metav1.NewTime(co.At), Position: co.Position,
		WritePauseMilliseconds: co.Pause.Milliseconds(), Warning: co.Warning, IgnoredFallBackRequest: co.FallBackIgnored}
}

// fallbackStatus adds the way back to a cut-over cluster's x: the server's replication from
// the cluster as pointed and as seen this cycle, the last failed fall back, the fall back.
func fallbackStatus(x *dolphinv1.ExternalReplication, rep topology.Report) {
	p := rep.Persisted
	if f := p.FallBackFailed; f != nil {
		x.LastFallBackFailure = &dolphinv1.CutoverFailure{Request: f.ID, At: metav1.NewTime(f.At), Error: f.Error}
	}
	if fb := p.FellBack; fb != nil {
		x.FellBack = cutoverRecord(fb)
		return
	}
	st := p.FallbackStarted
	if st == nil {
		return
	}
	fr := &dolphinv1.FallbackReplication{Error: st.Error, CredentialsGeneration: st.Generation}
	if st.Error == "" {
		fr.Since = ptrTime(st.At)
	}
	if seen := rep.FallbackSeen; seen != nil && st.Error == "" {
		fr.Replicating, fr.LagSeconds, fr.Error = seen.Replicating, seen.Lag, seen.Error
	}
	x.Fallback = fr
}

func ptrTime(t time.Time) *metav1.Time {
	mt := metav1.NewTime(t)
	return &mt
}
