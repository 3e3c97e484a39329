package clustermanager

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1alpha1"
	"github.com/dolphin-operator/dolphin/internal/metrics"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/topology"
)

// volatileInterval bounds how often status is rewritten when only volatile observations
// (GTID positions, lag) changed.
const volatileInterval = 10 * time.Second

// reporter publishes one cluster's engine cycles to Kubernetes.
type reporter struct {
	m   *Manager
	key types.NamespacedName

	mu        sync.Mutex
	lastWrite time.Time
}

// Report implements topology.Reporter.
func (r *reporter) Report(ctx context.Context, rep topology.Report) {
	log := r.m.Log.WithValues("cluster", r.key.String())
	// Status first: the record of a promotion must exist before Services follow the labels.
	if err := r.status(ctx, rep); err != nil {
		log.Error(err, "writing status.topology")
	}
	if err := r.label(ctx, rep); err != nil {
		log.Error(err, "setting pod role labels")
	}
	if err := r.restartLostPrimary(ctx, rep); err != nil {
		log.Error(err, "restarting the failed-over primary's pod")
	}
	r.metrics(rep)
}

// lostPrimaryGrace is the termination grace given to the pod of a primary that was failed
// over while it did not answer: a hung server cannot shut down cleanly anyway.
const lostPrimaryGrace = int64(1)

// restartLostPrimary deletes the pod of a primary that a failover replaced while it did not
// answer (hung, or cut off from everyone). Left alone, a hung primary that resumes would
// commit what was waiting for an acknowledgement and be errant; killed, it restarts with
// --init-rpl-role=SLAVE, rolls back what nobody acknowledged and rejoins as a replica
// (docs/design/0011). A replaced primary that answers (restarted behind a replica) rejoins
// by itself and is left alone. The StatefulSet re-creates the pod on the same volume.
func (r *reporter) restartLostPrimary(ctx context.Context, rep topology.Report) error {
	p := rep.Promotion
	if p == nil || p.Planned || p.From == "" {
		return nil
	}
	for _, in := range rep.Instances {
		if in.Name == p.From && in.Reachable() {
			return nil
		}
	}
	var pod corev1.Pod
	if err := r.m.Client.Get(ctx, types.NamespacedName{Namespace: r.key.Namespace, Name: p.From}, &pod); err != nil {
		return client.IgnoreNotFound(err)
	}
	if pod.DeletionTimestamp != nil {
		return nil
	}
	uid := pod.UID
	if err := r.m.Client.Delete(ctx, &pod, client.GracePeriodSeconds(lostPrimaryGrace),
		client.Preconditions{UID: &uid}); err != nil {
		return client.IgnoreNotFound(err)
	}
	if r.m.Recorder != nil {
		var c dolphinv1.MySQLCluster
		if err := r.m.Client.Get(ctx, r.key, &c); err == nil {
			r.m.Recorder.Eventf(&c, &pod, corev1.EventTypeWarning, "RestartedLostPrimary", "Delete",
				"deleted pod %s of the replaced primary, which did not answer, so that it restarts and rejoins as a replica", p.From)
		}
	}
	return nil
}

// roles decides the role label of every instance from a cycle's outcome.
func roles(rep topology.Report) map[string]dolphinv1.InstanceRole {
	d := rep.Decision
	primary := rep.Persisted.Primary
	planned := func(kind topology.StepKind, name string) bool {
		return rep.Err == nil && slices.ContainsFunc(d.Plan, func(s topology.Step) bool { return s.Kind == kind && s.Instance == name })
	}
	out := map[string]dolphinv1.InstanceRole{}
	for _, in := range rep.Instances {
		role := dolphinv1.RoleUnknown
		switch {
		case !in.Reachable() || rep.Persisted.Errant[in.Name]:
		case in.Name == primary && d.State != topology.StateSplitBrain &&
			(!in.Status.ReadOnly || planned(topology.StepPromote, in.Name)) && !planned(topology.StepFence, in.Name):
			role = dolphinv1.RolePrimary
		case in.Name != primary && (in.Status.Replica != nil || planned(topology.StepReplicate, in.Name)) && in.Status.ReadOnly:
			role = dolphinv1.RoleReplica
		}
		out[in.Name] = role
	}
	return out
}

// label sets mysql.dolphin.dev/role on the pods; the primary and replica Services select on
// it. Pods that do not exist (yet) are skipped.
func (r *reporter) label(ctx context.Context, rep topology.Report) error {
	for name, role := range roles(rep) {
		var pod corev1.Pod
		if err := r.m.Client.Get(ctx, types.NamespacedName{Namespace: r.key.Namespace, Name: name}, &pod); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return err
		}
		if dolphinv1.InstanceRole(pod.Labels[resources.RoleLabel]) == role {
			continue
		}
		var value any = string(role)
		if role == dolphinv1.RoleUnknown {
			value = nil // remove the label
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{resources.RoleLabel: value}}})
		if err := r.m.Client.Patch(ctx, &pod, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return fmt.Errorf("labeling pod %s: %w", name, err)
		}
	}
	return nil
}

// status writes status.topology when something significant changed, or at most every
// volatileInterval when only positions and lag moved. It retries on conflicts with the
// reconciler's status writes, so that a promotion is never lost from the record.
func (r *reporter) status(ctx context.Context, rep topology.Report) error {
	var promotion *dolphinv1.PromotionRecord
	if p := rep.Promotion; p != nil {
		promotion = &dolphinv1.PromotionRecord{
			From: p.From, To: p.To, Planned: p.Planned, Reason: rep.Decision.Message,
			Duration: metav1.Duration{Duration: p.Duration}, Time: metav1.Now(),
		}
	}
	var c dolphinv1.MySQLCluster
	var newlyErrant []string
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := r.m.Client.Get(ctx, r.key, &c); err != nil {
			return err
		}
		next := topologyStatus(c.Status.Topology, rep)
		if promotion != nil {
			next.LastPromotion = promotion
		}
		newlyErrant = nil
		if old := c.Status.Topology; old != nil {
			for _, n := range next.ErrantInstances {
				if !slices.Contains(old.ErrantInstances, n) {
					newlyErrant = append(newlyErrant, n)
				}
			}
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if equality.Semantic.DeepEqual(c.Status.Topology, next) {
			return nil
		}
		if c.Status.Topology != nil && onlyVolatileChanged(c.Status.Topology, next) && time.Since(r.lastWrite) < volatileInterval {
			return nil
		}
		patch := client.MergeFromWithOptions(c.DeepCopy(), client.MergeFromWithOptimisticLock{})
		c.Status.Topology = next
		if err := r.m.Client.Status().Patch(ctx, &c, patch); err != nil {
			return err
		}
		r.lastWrite = time.Now()
		return nil
	})
	if err != nil {
		return fmt.Errorf("writing status.topology: %w", client.IgnoreNotFound(err))
	}
	if r.m.Recorder == nil {
		return nil
	}
	if p := rep.Promotion; p != nil {
		kind, typ := "Failover", corev1.EventTypeWarning
		if p.Planned {
			kind, typ = "Switchover", corev1.EventTypeNormal
		}
		r.m.Recorder.Eventf(&c, nil, typ, kind, "Promote", "%s from %s to %s in %s: %s",
			kind, p.From, p.To, p.Duration.Round(time.Millisecond), rep.Decision.Message)
	}
	for _, n := range newlyErrant {
		r.m.Recorder.Eventf(&c, nil, corev1.EventTypeWarning, "ErrantInstance", "Fence", "%s holds transactions the primary lacks; it is kept out of the topology", n)
	}
	return nil
}

// topologyStatus converts a cycle's outcome into status.topology.
func topologyStatus(old *dolphinv1.TopologyStatus, rep topology.Report) *dolphinv1.TopologyStatus {
	d := rep.Decision
	t := &dolphinv1.TopologyStatus{
		State: string(d.State), Message: d.Message, Primary: rep.Persisted.Primary,
		SemiSyncFallback: d.SemiSyncFallback,
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
	if f := rep.Persisted.Failover; f != nil {
		t.FailoverInProgress = &dolphinv1.FailoverProgress{From: f.From, Fenced: f.Fenced}
	}
	for _, in := range rep.Instances {
		it := dolphinv1.InstanceTopology{Name: in.Name, Reachable: in.Reachable()}
		if in.Err != nil {
			it.Error = in.Err.Error()
		}
		if st := in.Status; st != nil {
			it.ReadOnly = st.ReadOnly
			if st.Executed != nil {
				it.GTIDExecuted = st.Executed.String()
			}
			if rs := st.Replica; rs != nil {
				it.Replicating = rs.IORunning && rs.SQLRunning
				it.ReplicationLagSeconds = rs.SecondsBehindSource
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
		return t
	}
	return equality.Semantic.DeepEqual(strip(a), strip(b))
}

func (r *reporter) metrics(rep topology.Report) {
	ns, name := r.key.Namespace, r.key.Name
	fallback := 0.0
	if rep.Decision.SemiSyncFallback {
		fallback = 1
	}
	metrics.SemiSyncFallback.WithLabelValues(ns, name).Set(fallback)
	for _, in := range rep.Instances {
		if in.Status != nil && in.Status.Replica != nil && in.Status.Replica.SecondsBehindSource != nil {
			metrics.ReplicationLag.WithLabelValues(ns, name, in.Name).Set(float64(*in.Status.Replica.SecondsBehindSource))
		}
	}
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
