package clustermanager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/metrics"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/topology"
)

// volatileInterval bounds how often status is rewritten when only volatile observations
// (GTID positions, lag) changed.
const volatileInterval = 10 * time.Second

// reporter publishes one cluster's engine cycles to Kubernetes. It is the only writer of
// status.topology and of the pods' role labels.
type reporter struct {
	m   *Manager
	key types.NamespacedName
	// engine is the engine reported on: status records its pending switchover as it is when
	// written, not as it was when a cycle began.
	engine *topology.Engine

	// writeMu serializes the writes of status.topology (cycles and switchover requests), so
	// that one computed before a request cannot land after the request's own write.
	writeMu sync.Mutex

	mu        sync.Mutex
	lastWrite time.Time
	// metricInstances are the instances whose series the last report set.
	metricInstances map[string]bool
	// promotion is a change of primary not yet recorded in status: kept and written again
	// until it lands, and no label moves before it has.
	promotion *dolphinv1.PromotionRecord
	// restart is the pod of a replaced primary still to be deleted.
	restart *pendingRestart
	// restartedForWaiting is the lost primary whose pod was restarted for a failover that
	// waits for writes only it holds (topology.Decision.RestartLostPrimary): once per
	// failover, never the pod that replaced it.
	restartedForWaiting string
	// serviceSelects is the pod the primary Service selects after the last report (""
	// unknown or none), and serviceLeft when it stopped selecting each pod: a lost
	// primary's pod is deleted only serviceDrain after that (restartLostPrimary).
	serviceSelects string
	serviceLeft    map[string]time.Time
	// withheld are the replicas the last report kept out of the replicas Service (why, by
	// instance), for the event when one comes back.
	withheld map[string]string
	// lastErr is the last plan error reported as an event (to report each new one once).
	lastErr string
}

// pendingRestart is a lost primary's pod that must be deleted (and so restarted) once.
type pendingRestart struct {
	pod string
	uid types.UID // the pod seen at the first attempt; another UID means it was replaced
	// lostSince is when the primary was first missed (zero: unknown). A pod created after it
	// is not the one that was lost: the StatefulSet re-created it (someone deleted the lost
	// one), and it is starting on the same volume already.
	lostSince time.Time
	// waiting is true when a failover waits for the lost primary (not replaced yet).
	waiting bool
}

// Report implements topology.Reporter.
func (r *reporter) Report(ctx context.Context, rep topology.Report) {
	log := r.m.Log.WithValues("cluster", r.key.String())
	if rep.Err != nil {
		r.planFailed(ctx, rep.Err)
	} else {
		r.lastErr = ""
	}
	// Status first: the record of a promotion must exist before Services follow the labels.
	if err := r.status(ctx, rep); err != nil {
		r.failed(ctx, "status", err)
		if r.pendingPromotion() {
			log.Error(err, "writing status.topology; role labels stay until the promotion is recorded")
			r.metrics(rep)
			// The promoted replica takes no traffic before its record exists, and the lost
			// primary none either: it may have been kept in the primary Service until this
			// promotion (docs/design/0050), and one that comes back would take writes.
			if err := r.pointPrimaryService(ctx, topology.Report{Roles: withoutPrimary(rep.Roles)}); err != nil {
				r.failed(ctx, "service", err)
			}
			return
		}
		log.Error(err, "writing status.topology")
	}
	// Metrics with the status, before the labels and the lost primary's restart (which can
	// take a while): whoever sees a promotion recorded finds it counted too.
	r.metrics(rep)
	if err := r.pointPrimaryService(ctx, rep); err != nil {
		r.failed(ctx, "service", err)
		log.Error(err, "pointing the primary Service at the primary")
	}
	if err := r.label(ctx, rep); err != nil {
		r.failed(ctx, "labels", err)
		log.Error(err, "setting pod role labels")
	}
	if err := r.restartLostPrimary(ctx, rep); err != nil {
		r.failed(ctx, "restart", err)
		log.Error(err, "restarting the failed-over primary's pod")
	}
}

func (r *reporter) pendingPromotion() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.promotion != nil
}

// failed counts a failure to publish what the engine decided and reports it as an event.
func (r *reporter) failed(ctx context.Context, stage string, err error) {
	metrics.EngineErrors.WithLabelValues(r.key.Namespace, r.key.Name, stage).Inc()
	r.event(ctx, corev1.EventTypeWarning, "TopologyReportFailed", "Report", "could not write the topology's %s to Kubernetes: %v", stage, err)
}

// planFailed counts a failed plan; each new error is also an event.
func (r *reporter) planFailed(ctx context.Context, err error) {
	metrics.EngineErrors.WithLabelValues(r.key.Namespace, r.key.Name, "plan").Inc()
	if msg := err.Error(); msg != r.lastErr {
		r.lastErr = msg
		r.event(ctx, corev1.EventTypeWarning, "TopologyStepFailed", "Reconcile", "%s", msg)
	}
}

func (r *reporter) event(ctx context.Context, typ, reason, action, note string, args ...any) {
	if r.m.Recorder == nil {
		return
	}
	var c dolphinv1.MySQLCluster
	if err := r.m.Client.Get(ctx, r.key, &c); err == nil {
		r.m.Recorder.Eventf(&c, nil, typ, reason, action, note, args...)
	}
}

// label sets mysql.dolphin.dev/role on the pods as the engine decided (topology.Roles); the
// primary and replica Services select on it. Pods that do not exist (yet) are skipped.
func (r *reporter) label(ctx context.Context, rep topology.Report) error {
	var errs []error
	// The primary label goes on last, and only once no other pod still carries it: labeling
	// the new primary first (map order) left two primaries in the Service for a moment — for
	// seconds when the operator died in between — and readers that reached the old one, now a
	// lagging replica, read stale data (the chaos suite's stale reads).
	stillPrimary := false
	for _, name := range labelOrder(rep.Roles) {
		role := rep.Roles[name]
		var pod corev1.Pod
		if err := r.m.Client.Get(ctx, types.NamespacedName{Namespace: r.key.Namespace, Name: name}, &pod); err != nil {
			if !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("reading pod %s: %w", name, err))
				stillPrimary = true // unknown: it may still be labeled primary
			}
			continue
		}
		current := topology.Role(pod.Labels[resources.RoleLabel])
		if current == role {
			continue
		}
		if role == topology.RolePrimary && stillPrimary {
			errs = append(errs, fmt.Errorf("not labeling %s primary while another pod may still be labeled so", name))
			continue
		}
		var value any = string(role)
		if role == topology.RoleNone {
			value = nil // remove the label
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{resources.RoleLabel: value}}})
		if err := r.m.Client.Patch(ctx, &pod, client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("labeling pod %s: %w", name, err))
			if current == topology.RolePrimary {
				stillPrimary = true
			}
			continue
		}
		switch why := rep.Withheld[name]; {
		case current == topology.RoleReplica && role == topology.RoleNone && why != "":
			r.event(ctx, corev1.EventTypeWarning, "ReplicaUnpublished", "Unpublish", "%s leaves the replicas Service: %s", name, why)
		case current == topology.RoleNone && role == topology.RoleReplica && r.withheld[name] != "":
			r.event(ctx, corev1.EventTypeNormal, "ReplicaPublished", "Publish", "%s is back in the replicas Service (was: %s)", name, r.withheld[name])
		}
	}
	r.withheld = maps.Clone(rep.Withheld)
	return errors.Join(errs...)
}

// labelOrder is the order role labels are set in: every role but primary first (sorted by
// name), the primary last.
func labelOrder(roles map[string]topology.Role) []string {
	names := slices.Sorted(maps.Keys(roles))
	slices.SortStableFunc(names, func(a, b string) int {
		pa, pb := roles[a] == topology.RolePrimary, roles[b] == topology.RolePrimary
		switch {
		case pa == pb:
			return 0
		case pa:
			return 1
		default:
			return -1
		}
	})
	return names
}

// statusBackoff retries a status write that failed for a passing reason (a slow or
// restarting API server) within one report.
var statusBackoff = wait.Backoff{Duration: 50 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 7, Cap: 2 * time.Second}

// status writes status.topology when something significant changed, or at most every
// volatileInterval when only positions and lag moved. It reads the cluster live (never the
// cache, which may not have seen the last promotion yet) and patches only status.topology
// without a resourceVersion precondition: the reconciler writes the other status fields,
// so the two never conflict. A promotion is kept until its record lands.
func (r *reporter) status(ctx context.Context, rep topology.Report) error {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	r.mu.Lock()
	if p := rep.Promotion; p != nil {
		r.promotion = &dolphinv1.PromotionRecord{
			From: p.From, To: p.To, Planned: p.Planned, Reason: rep.Decision.Message,
			Duration: metav1.Duration{Duration: p.Duration}, Time: metav1.Now(), LossAccepted: rep.Decision.LossAccepted,
		}
	}
	promotion := r.promotion
	r.mu.Unlock()

	var c dolphinv1.MySQLCluster
	var newlyErrant []string
	var newlyAlone *dolphinv1.AcknowledgedAlone
	var cutOver, verified *dolphinv1.ExternalReplication
	written := false
	err := retry.OnError(statusBackoff, func(err error) bool { return ctx.Err() == nil && !apierrors.IsNotFound(err) }, func() error {
		if err := r.m.APIReader().Get(ctx, r.key, &c); err != nil {
			return err
		}
		next := topologyStatus(c.Status.Topology, rep)
		if r.engine != nil {
			next.SwitchoverInProgress = switchoverStatus(r.engine.PendingSwitchover())
		}
		if promotion != nil {
			next.LastPromotion = promotion
		}
		newlyErrant, newlyAlone = newlyReported(c.Status.Topology, next)
		cutOver, verified = externalNews(c.Status.Topology, next)
		if equality.Semantic.DeepEqual(c.Status.Topology, next) {
			return nil
		}
		if promotion == nil && c.Status.Topology != nil && onlyVolatileChanged(c.Status.Topology, next) && time.Since(r.lastWrite) < volatileInterval {
			return nil
		}
		patch := client.MergeFrom(c.DeepCopy())
		c.Status.Topology = next
		if err := r.m.Client.Status().Patch(ctx, &c, patch); err != nil {
			return err
		}
		r.lastWrite, written = time.Now(), true
		return nil
	})
	if err != nil {
		return fmt.Errorf("writing status.topology: %w", err)
	}
	r.mu.Lock()
	if r.promotion == promotion {
		r.promotion = nil
	}
	r.mu.Unlock()
	refused := ""
	if rep.Err == nil {
		refused = rep.Decision.SwitchoverRefused
	}
	if r.m.Recorder == nil || (!written && promotion == nil && refused == "") {
		return nil
	}
	if !written {
		newlyAlone = nil // said once, with the write that recorded it
	}
	r.events(&c, promotion, refused, newlyAlone, newlyErrant)
	if written {
		r.externalEvents(&c, cutOver, verified)
	}
	return nil
}

// newlyReported returns what next reports that old did not: instances newly errant, and a
// primary newly acknowledging writes alone.
func newlyReported(old, next *dolphinv1.TopologyStatus) (errant []string, alone *dolphinv1.AcknowledgedAlone) {
	if a := next.AcknowledgedAlone; a != nil && (old == nil || old.AcknowledgedAlone == nil || old.AcknowledgedAlone.Primary != a.Primary) {
		alone = a
	}
	if old != nil {
		for _, n := range next.ErrantInstances {
			if !slices.Contains(old.ErrantInstances, n) {
				errant = append(errant, n)
			}
		}
	}
	return errant, alone
}

// events records what a status write brought: a primary acknowledging alone, a promotion
// (and the loss a failover accepted), a refused switchover, newly errant instances.
func (r *reporter) events(c *dolphinv1.MySQLCluster, promotion *dolphinv1.PromotionRecord, refused string,
	newlyAlone *dolphinv1.AcknowledgedAlone, newlyErrant []string) {
	if a := newlyAlone; a != nil {
		r.m.Recorder.Eventf(c, r.podRef(a.Primary), corev1.EventTypeWarning, "AcknowledgedAlone", "Replicate",
			"%s acknowledges writes no replica has received (semi-sync fell back, or its source side was restarted): "+
				"a failover from it now waits for it or for your consent (status.topology.acknowledgedAlone)", a.Primary)
	}
	if p := promotion; p != nil && p.LossAccepted != "" {
		r.m.Recorder.Eventf(c, r.podRef(p.To), corev1.EventTypeWarning, "FailoverLossAccepted", "Promote",
			"failover from %s to %s %s", p.From, p.To, p.LossAccepted)
	}
	if refused != "" {
		r.m.Recorder.Eventf(c, nil, corev1.EventTypeWarning, "SwitchoverRefused", "Switchover", "%s", refused)
	}
	if p := promotion; p != nil {
		kind, typ := "Failover", corev1.EventTypeWarning
		if p.Planned {
			kind, typ = "Switchover", corev1.EventTypeNormal
		}
		r.m.Recorder.Eventf(c, r.podRef(p.To), typ, kind, "Promote", "%s from %s to %s in %s: %s",
			kind, p.From, p.To, p.Duration.Duration.Round(time.Millisecond), p.Reason)
	}
	for _, n := range newlyErrant {
		r.m.Recorder.Eventf(c, r.podRef(n), corev1.EventTypeWarning, "ErrantInstance", "Fence", "%s holds transactions the primary lacks; it is kept out of the topology", n)
	}
}

// recordSwitchover writes the engine's pending switchover into status.topology now (a
// switchover requested and not recorded would be forgotten by a restarted operator).
func (r *reporter) recordSwitchover(ctx context.Context) error {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	err := retry.OnError(statusBackoff, func(err error) bool { return ctx.Err() == nil && !apierrors.IsNotFound(err) }, func() error {
		var c dolphinv1.MySQLCluster
		if err := r.m.APIReader().Get(ctx, r.key, &c); err != nil {
			return err
		}
		want := switchoverStatus(r.engine.PendingSwitchover())
		id := r.engine.State().LastSwitchoverRequest
		if t := c.Status.Topology; (t == nil && want == nil && id == "") ||
			(t != nil && equality.Semantic.DeepEqual(t.SwitchoverInProgress, want) && t.LastSwitchoverRequest == id) {
			return nil
		}
		patch := client.MergeFrom(c.DeepCopy())
		if c.Status.Topology == nil {
			c.Status.Topology = &dolphinv1.TopologyStatus{}
		}
		c.Status.Topology.SwitchoverInProgress = want
		c.Status.Topology.LastSwitchoverRequest = id
		return r.m.Client.Status().Patch(ctx, &c, patch)
	})
	if err != nil {
		return fmt.Errorf("recording the switchover request in status.topology: %w", err)
	}
	return nil
}

// switchoverStatus is status.topology.switchoverInProgress for a pending request.
func switchoverStatus(sw *topology.SwitchoverRequest) *dolphinv1.SwitchoverProgress {
	if sw == nil {
		return nil
	}
	return &dolphinv1.SwitchoverProgress{To: sw.To, Fenced: sw.Fenced, From: sw.From}
}

// podRef names an instance's pod as an event's related object. The recorder merges events
// with the same regarding object, related object, reason and action into one series that
// keeps the first note, so events of one reason about different pods need the pod to stay
// apart.
func (r *reporter) podRef(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: r.key.Namespace, Name: name}}
}

// topologyStatus converts a cycle's outcome into status.topology.
func topologyStatus(old *dolphinv1.TopologyStatus, rep topology.Report) *dolphinv1.TopologyStatus {
	d := rep.Decision
	t := &dolphinv1.TopologyStatus{
		State: string(d.State), Message: d.Message, Primary: rep.Persisted.Primary,
		SemiSyncFallback: d.SemiSyncFallback, NoSemiSyncReplica: d.NoSemiSyncReplica, CommitsWaiting: d.CommitsWaiting,
		CredentialsGeneration: rep.CredentialsGeneration, LastSwitchoverRequest: rep.Persisted.LastSwitchoverRequest,
	}
	if rep.Err != nil {
		t.Message += "; last plan failed: " + rep.Err.Error()
	}
	if old != nil {
		t.LastPromotion = old.LastPromotion
	}
	for n, yes := range rep.Persisted.Errant {
		if yes {
			t.ErrantInstances = append(t.ErrantInstances, n)
		}
	}
	slices.Sort(t.ErrantInstances)
	for n, yes := range rep.Persisted.Replaced {
		if yes {
			t.ReplacedPrimaries = append(t.ReplacedPrimaries, n)
		}
	}
	slices.Sort(t.ReplacedPrimaries)
	if f := rep.Persisted.Failover; f != nil {
		t.FailoverInProgress = &dolphinv1.FailoverProgress{From: f.From, Fenced: f.Fenced, ReceivedBy: f.ReceivedBy}
		if f.Received != nil {
			t.FailoverInProgress.Received = f.Received.String()
		}
	}
	if tl := rep.Persisted.Tail; tl != nil && tl.Received != nil {
		t.FailoverTail = &dolphinv1.FailoverTail{From: tl.From, Received: tl.Received.String(), HeldBy: tl.HeldBy}
	}
	if a := rep.Persisted.AckedAlone; a != nil {
		t.AcknowledgedAlone = &dolphinv1.AcknowledgedAlone{Primary: a.Primary, Since: metav1.NewTime(a.Since)}
		if a.UpTo != nil {
			t.AcknowledgedAlone.UpTo = a.UpTo.String()
		}
	}
	t.SwitchoverInProgress = switchoverStatus(rep.Persisted.Switchover)
	t.ExternalSource = externalReplication(rep)
	for _, in := range rep.Instances {
		rec := rep.Persisted.Instances[in.Name]
		it := dolphinv1.InstanceTopology{Name: in.Name, Reachable: in.Reachable(),
			CredentialsGeneration: rec.Credentials, ReplicationCredentialsGeneration: rec.Replication}
		if in.Err != nil {
			it.Error = in.Err.Error()
		}
		if st := in.Status; st != nil {
			it.ReadOnly, it.Version = st.ReadOnly, st.Version
			if st.Executed != nil {
				it.GTIDExecuted = st.Executed.String()
			}
			if rs := st.Replica; rs != nil {
				it.Replicating = rs.IORunning && rs.SQLRunning
				it.ReplicationLagSeconds = rs.SecondsBehindSource
				it.Unpublished = rep.Withheld[in.Name]
				if rs.LastSQLError != "" {
					it.Error = rs.LastSQLError
				} else if rs.LastIOError != "" {
					it.Error = rs.LastIOError
				}
			}
		}
		t.Instances = append(t.Instances, it)
	}
	return t
}

// onlyVolatileChanged reports whether a and b differ only in GTID positions and lag.
func onlyVolatileChanged(a, b *dolphinv1.TopologyStatus) bool {
	strip := func(t *dolphinv1.TopologyStatus) *dolphinv1.TopologyStatus {
		t = t.DeepCopy()
		for i := range t.Instances {
			t.Instances[i].GTIDExecuted, t.Instances[i].ReplicationLagSeconds = "", nil
		}
		if x := t.ExternalSource; x != nil {
			x.Received, x.LagSeconds = "", nil
		}
		return t
	}
	return equality.Semantic.DeepEqual(strip(a), strip(b))
}

func (r *reporter) metrics(rep topology.Report) {
	ns, name := r.key.Namespace, r.key.Name
	metrics.SemiSyncFallback.WithLabelValues(ns, name).Set(boolGauge(rep.Decision.SemiSyncFallback))
	metrics.WritesAtRisk.WithLabelValues(ns, name).Set(boolGauge(rep.Persisted.AckedAlone != nil))
	metrics.WritesWaiting.WithLabelValues(ns, name).Set(boolGauge(rep.Decision.NoSemiSyncReplica || rep.Decision.CommitsWaiting))
	seen := map[string]bool{}
	for _, in := range rep.Instances {
		seen[in.Name] = true
		metrics.InstanceUp.WithLabelValues(ns, name, in.Name).Set(boolGauge(in.Reachable()))
		// The primary does not replicate, and errant instances are stopped on purpose (the
		// Degraded condition and its alerts speak for them): no replicating series for either.
		if in.Name == rep.Decision.Primary || rep.Decision.Errant[in.Name] {
			metrics.InstanceReplicating.DeleteLabelValues(ns, name, in.Name)
		} else {
			replicating := in.Status != nil && in.Status.Replica != nil && in.Status.Replica.IORunning && in.Status.Replica.SQLRunning
			metrics.InstanceReplicating.WithLabelValues(ns, name, in.Name).Set(boolGauge(replicating))
		}
		// A lag the server does not know (replication stopped, unreachable) is no series: a
		// frozen last value would keep a lag alert firing.
		if in.Name != rep.Decision.Primary && in.Status != nil && in.Status.Replica != nil && in.Status.Replica.SecondsBehindSource != nil {
			metrics.ReplicationLag.WithLabelValues(ns, name, in.Name).Set(float64(*in.Status.Replica.SecondsBehindSource))
		} else {
			metrics.ReplicationLag.DeleteLabelValues(ns, name, in.Name)
		}
	}
	r.mu.Lock()
	for old := range r.metricInstances {
		if !seen[old] {
			metrics.ForgetInstance(ns, name, old)
		}
	}
	r.metricInstances = seen
	r.mu.Unlock()
	if p := rep.Promotion; p != nil {
		kind := "failover"
		if p.Planned {
			kind = "switchover"
		} else {
			metrics.FailoverDuration.WithLabelValues(ns, name).Observe(p.Duration.Seconds())
		}
		metrics.PromotionsTotal.WithLabelValues(ns, name, kind).Inc()
	}
}

// boolGauge is a gauge's value for a condition: 1 or 0.
func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
