package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// primaryTimeline follows, through watches, how the primary Service moved after a fault: when
// a pod other than the old primary first carried the primary role label, and when the
// `<cluster>-primary` EndpointSlices first listed a ready endpoint other than the old primary's
// address. With the first acknowledged write it splits a round's client-view outage into
// Dolphin's part (until the label) and the path to the client (EndpointSlice controller, the
// Service proxy, the client's reconnect) — docs/design/0035's time budget.
type primaryTimeline struct {
	mu       sync.Mutex
	at       time.Time // the fault
	old      string    // the primary before it
	oldIPs   map[string]bool
	labeled  time.Time // first time another pod was labeled primary
	endpoint time.Time // first time the Service had a ready endpoint that is not the old primary
	// history is every change of the primary Service's selector and ready endpoints, for
	// explaining a stale read or a slow move after the fact (the last maxHistory kept).
	history []timelineEntry
	// lastSelector and lastEndpoints are the last recorded states (a change is recorded once).
	lastSelector, lastEndpoints string
}

// timelineEntry is one recorded change of the primary Service.
type timelineEntry struct {
	at   time.Time
	what string
}

// maxHistory bounds the primary Service's recorded changes over a long run.
const maxHistory = 400

// watchPrimaryTimeline starts the watches for cluster; they end with the test.
func (s *stack) watchPrimaryTimeline(cluster string) *primaryTimeline {
	s.t.Helper()
	wc, err := client.NewWithWatch(s.cfg, client.Options{Scheme: s.c.Scheme()})
	if err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(s.ctx)
	s.t.Cleanup(cancel)
	tl := &primaryTimeline{}
	go follow(ctx, func(ctx context.Context) (watch.Interface, error) {
		return wc.Watch(ctx, &corev1.PodList{}, client.InNamespace(s.ns), client.MatchingLabels{"app.kubernetes.io/instance": cluster})
	}, tl.pod)
	go follow(ctx, func(ctx context.Context) (watch.Interface, error) {
		return wc.Watch(ctx, &discoveryv1.EndpointSliceList{}, client.InNamespace(s.ns),
			client.MatchingLabels{discoveryv1.LabelServiceName: cluster + "-primary"})
	}, tl.slice)
	go follow(ctx, func(ctx context.Context) (watch.Interface, error) {
		return wc.Watch(ctx, &corev1.ServiceList{}, client.InNamespace(s.ns),
			client.MatchingFields{"metadata.name": cluster + "-primary"})
	}, tl.service)
	return tl
}

// record adds a change to the history (the caller holds mu).
func (tl *primaryTimeline) record(at time.Time, what string) {
	tl.history = append(tl.history, timelineEntry{at: at, what: what})
	if len(tl.history) > maxHistory {
		tl.history = tl.history[len(tl.history)-maxHistory:]
	}
}

func (tl *primaryTimeline) service(obj client.Object) {
	now := time.Now()
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return
	}
	sel := fmt.Sprintf("selector %v", svc.Spec.Selector[appsv1.StatefulSetPodNameLabel])
	if _, byPod := svc.Spec.Selector[appsv1.StatefulSetPodNameLabel]; !byPod {
		sel = fmt.Sprintf("selector %v", svc.Spec.Selector)
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if sel != tl.lastSelector {
		tl.lastSelector = sel
		tl.record(now, sel)
	}
}

// History describes the primary Service's recorded changes between from and to, one per line
// with its UTC time.
func (tl *primaryTimeline) History(from, to time.Time) string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var b strings.Builder
	for _, e := range tl.history {
		if !e.at.Before(from) && !e.at.After(to) {
			fmt.Fprintf(&b, "%s %s\n", e.at.UTC().Format("15:04:05.000"), e.what)
		}
	}
	return b.String()
}

// follow runs a watch and hands every object it delivers to seen, watching again (from the
// current state) whenever the watch ends — an API server restart is one of the faults.
func follow(ctx context.Context, start func(context.Context) (watch.Interface, error), seen func(client.Object)) {
	for ctx.Err() == nil {
		w, err := start(ctx)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		for ev := range w.ResultChan() {
			if obj, ok := ev.Object.(client.Object); ok && ev.Type != watch.Deleted && ev.Type != watch.Error {
				seen(obj)
			}
		}
		w.Stop()
	}
}

// arm starts a round: old is the primary, oldIPs its pod's addresses, at the fault's time.
func (tl *primaryTimeline) arm(old string, oldIPs []string, at time.Time) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.at, tl.old, tl.labeled, tl.endpoint = at, old, time.Time{}, time.Time{}
	tl.oldIPs = map[string]bool{}
	for _, ip := range oldIPs {
		tl.oldIPs[ip] = true
	}
}

func (tl *primaryTimeline) pod(obj client.Object) {
	now := time.Now()
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if !tl.at.IsZero() && tl.labeled.IsZero() && obj.GetName() != tl.old &&
		obj.GetLabels()[resources.RoleLabel] == "primary" {
		tl.labeled = now
	}
}

func (tl *primaryTimeline) slice(obj client.Object) {
	now := time.Now()
	sl, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var ready []string
	for _, ep := range sl.Endpoints {
		if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
			ready = append(ready, ep.Addresses...)
		}
	}
	if eps := fmt.Sprintf("endpoints %s %v", sl.Name, ready); eps != tl.lastEndpoints {
		tl.lastEndpoints = eps
		tl.record(now, eps)
	}
	if tl.at.IsZero() || !tl.endpoint.IsZero() {
		return
	}
	for _, ep := range sl.Endpoints {
		if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
			continue
		}
		for _, addr := range ep.Addresses {
			if !tl.oldIPs[addr] {
				tl.endpoint = now
				return
			}
		}
	}
}

// String describes the round so far: "label +2.41s endpoint +2.44s", or that the primary
// Service did not move (a fault that needs no failover).
func (tl *primaryTimeline) String() string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	since := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return fmt.Sprintf("+%.2fs", t.Sub(tl.at).Seconds())
	}
	if tl.labeled.IsZero() && tl.endpoint.IsZero() {
		return "primary Service unmoved"
	}
	return fmt.Sprintf("label %s endpoint %s", since(tl.labeled), since(tl.endpoint))
}

// podIPs returns the addresses of pod (none when it is gone).
func (s *stack) podIPs(pod string) []string {
	s.t.Helper()
	var p corev1.Pod
	if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: pod}, &p); err != nil {
		return nil
	}
	var ips []string
	for _, ip := range p.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	return ips
}

// replicaLag describes each replica's Seconds_Behind_Master as the engine last reported it
// ("chaos-0 0s chaos-2 14s"): a failover waits for the promoted replica to apply what it
// received, and the other replica, re-pointed, fetches again what it had not applied before
// it can acknowledge the new primary's commits — so a lagging replica shows in the outage.
func (s *stack) replicaLag(key client.ObjectKey) string {
	var c dolphinv1.MySQLCluster
	if err := s.c.Get(s.ctx, key, &c); err != nil || c.Status.Topology == nil {
		return "unknown"
	}
	var parts []string
	for _, in := range c.Status.Topology.Instances {
		if in.ReplicationLagSeconds != nil {
			parts = append(parts, fmt.Sprintf("%s %ds", in.Name, *in.ReplicationLagSeconds))
		}
	}
	if len(parts) == 0 {
		return "none reported"
	}
	return strings.Join(parts, " ")
}
