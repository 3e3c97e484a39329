package e2e

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// readyPhase is one step on a new cluster's way to Ready and when, after the apply, the last
// of its instances reached it, as the bench saw it polling (testenv.Eventually, at most
// 100 ms apart: the resolution of every phase; the objects' own timestamps are whole seconds).
type readyPhase struct {
	name string
	at   time.Duration
}

// readyRound is one apply → Ready of a 3-instance cluster.
type readyRound struct {
	total  time.Duration
	phases []readyPhase
}

// String is the round's log line: each phase's time after the apply, in order.
func (r readyRound) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "total=%.2fs", r.total.Seconds())
	for _, p := range r.phases {
		fmt.Fprintf(&b, " %s=%.2fs", p.name, p.at.Seconds())
	}
	return b.String()
}

// applyToReady creates a cluster of 3 instances named name and waits until it is Ready with a
// Healthy topology and no errant instance, recording when every instance was created,
// scheduled, past each init container (the seed one fills the data directory), running, and
// Ready, and when the topology became Healthy.
func (s *stack) applyToReady(name string) readyRound {
	s.t.Helper()
	cluster := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name},
		Spec: dolphinv1.MySQLClusterSpec{Instances: 3, Storage: dolphinv1.StorageSpec{DeletePolicy: dolphinv1.VolumeDelete}}}
	applied := time.Now()
	if err := s.c.Create(s.ctx, cluster); err != nil {
		s.t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(cluster)
	seen := map[string]time.Duration{}
	var order []string
	mark := func(phase string, reached bool) {
		if _, ok := seen[phase]; reached && !ok {
			seen[phase] = time.Since(applied)
			order = append(order, phase)
		}
	}
	var round readyRound
	testenv.Eventually(s.t, 180*time.Second, "cluster "+name+" Ready", func() error {
		pods := s.clusterPods(name)
		all := func(ok func(*corev1.Pod) bool) bool {
			return len(pods) == 3 && !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return !ok(&p) })
		}
		mark("pods", len(pods) == 3)
		mark("scheduled", all(func(p *corev1.Pod) bool { return podCondition(p, corev1.PodScheduled) }))
		if _, ok := seen["volumes_bound"]; !ok {
			claims := s.clusterClaims(name)
			mark("volumes_bound", len(claims) == 3 && !slices.ContainsFunc(claims, func(c corev1.PersistentVolumeClaim) bool {
				return c.Status.Phase != corev1.ClaimBound
			}))
		}
		if len(pods) == 3 {
			for _, ic := range pods[0].Spec.InitContainers {
				mark("init:"+ic.Name, all(func(p *corev1.Pod) bool { return initDone(p, ic.Name) }))
			}
		}
		mark("running", all(func(p *corev1.Pod) bool { return containersRunning(p) }))
		mark("pods_ready", all(podReady))
		if err := s.c.Get(s.ctx, key, cluster); err != nil {
			return err
		}
		tp := cluster.Status.Topology
		mark("healthy", tp != nil && tp.State == "Healthy" && len(tp.ErrantInstances) == 0)
		if !meta.IsStatusConditionTrue(cluster.Status.Conditions, "Ready") || tp == nil || tp.State != "Healthy" || len(tp.ErrantInstances) > 0 {
			return fmt.Errorf("phase %s topology %+v", cluster.Status.Phase, tp)
		}
		round.total = time.Since(applied)
		return nil
	})
	for _, p := range order {
		round.phases = append(round.phases, readyPhase{p, seen[p]})
	}
	if seen["init:dolphin-tools"]-seen["volumes_bound"] > slowToolsInit {
		s.logPodEvents(name, applied)
	}
	return round
}

// slowToolsInit is how long the tools init container may take after the volumes are bound
// before a round logs its pods' events (it takes ~2 s; some rounds under load took 12 s).
const slowToolsInit = 6 * time.Second

// logPodEvents logs the events of cluster name's pods, in order, with their time after
// applied (the kubelet's events have whole seconds).
func (s *stack) logPodEvents(name string, applied time.Time) {
	s.t.Helper()
	var events corev1.EventList
	if err := s.c.List(s.ctx, &events, client.InNamespace(s.ns)); err != nil {
		s.t.Logf("listing events: %v", err)
		return
	}
	at := func(e corev1.Event) time.Time {
		if !e.EventTime.IsZero() {
			return e.EventTime.Time
		}
		return e.FirstTimestamp.Time
	}
	var lines []corev1.Event
	for _, e := range events.Items {
		if e.InvolvedObject.Kind == "Pod" && strings.HasPrefix(e.InvolvedObject.Name, name+"-") && !at(e).Before(applied.Add(-time.Second)) {
			lines = append(lines, e)
		}
	}
	slices.SortStableFunc(lines, func(a, b corev1.Event) int { return at(a).Compare(at(b)) })
	for _, e := range lines {
		s.t.Logf("  event +%.0fs %s %s %s: %s", at(e).Sub(applied).Seconds(), e.InvolvedObject.Name, e.Source.Component, e.Reason, e.Message)
	}
}

// deleteCluster deletes the cluster and waits until its pods, its claims and their volumes
// are gone, so that the next round measures a creation on a node that is not still removing
// the previous cluster (the bench's clusters delete their volumes).
func (s *stack) deleteCluster(name string) {
	s.t.Helper()
	c := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name}}
	volumes := map[string]bool{}
	for _, claim := range s.clusterClaims(name) {
		if claim.Spec.VolumeName != "" {
			volumes[claim.Spec.VolumeName] = true
		}
	}
	if err := s.c.Delete(s.ctx, c); client.IgnoreNotFound(err) != nil {
		s.t.Fatal(err)
	}
	testenv.Eventually(s.t, 180*time.Second, "cluster "+name+"'s pods, claims and volumes gone", func() error {
		if n := len(s.clusterPods(name)); n > 0 {
			return fmt.Errorf("%d pods left", n)
		}
		if n := len(s.clusterClaims(name)); n > 0 {
			return fmt.Errorf("%d claims left", n)
		}
		for v := range volumes {
			err := s.c.Get(s.ctx, client.ObjectKey{Name: v}, &corev1.PersistentVolume{})
			if err == nil {
				return fmt.Errorf("volume %s left", v)
			}
			if client.IgnoreNotFound(err) != nil {
				return err
			}
		}
		return nil
	})
}

// clusterClaims are the cluster's PersistentVolumeClaims (its data volumes).
func (s *stack) clusterClaims(name string) []corev1.PersistentVolumeClaim {
	s.t.Helper()
	var claims corev1.PersistentVolumeClaimList
	if err := s.c.List(s.ctx, &claims, client.InNamespace(s.ns), client.MatchingLabels{"app.kubernetes.io/instance": name}); err != nil {
		s.t.Fatal(err)
	}
	return claims.Items
}

// podCondition reports whether p's condition typ is True.
func podCondition(p *corev1.Pod, typ corev1.PodConditionType) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == typ {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// initDone reports whether p's init container name exited 0.
func initDone(p *corev1.Pod, name string) bool {
	for _, st := range p.Status.InitContainerStatuses {
		if st.Name == name {
			return st.State.Terminated != nil && st.State.Terminated.ExitCode == 0
		}
	}
	return false
}

// containersRunning reports whether every container of p runs (ready or not).
func containersRunning(p *corev1.Pod) bool {
	if len(p.Status.ContainerStatuses) < len(p.Spec.Containers) {
		return false
	}
	for _, st := range p.Status.ContainerStatuses {
		if st.State.Running == nil {
			return false
		}
	}
	return true
}

// readySummary is the per-phase median over the rounds, in the order of the first round.
func readySummary(rounds []readyRound) string {
	if len(rounds) == 0 {
		return ""
	}
	var b strings.Builder
	for _, p := range rounds[0].phases {
		var ds []time.Duration
		for _, r := range rounds {
			for _, q := range r.phases {
				if q.name == p.name {
					ds = append(ds, q.at)
				}
			}
		}
		fmt.Fprintf(&b, " %s_p50=%.2fs", strings.ReplaceAll(p.name, ":", "_"), pctl(ds, 50))
	}
	return strings.TrimSpace(b.String())
}

// scaleUpOne adds one instance to cluster name and times the new instance's way to Ready, as
// applyToReady does for a new cluster: created, scheduled, its volume bound, past each init
// container (the seed clones a healthy peer), running, Ready, and the cluster Ready and
// Healthy with every instance. It then removes the instance again (and waits until the
// cluster is healthy without it), so that what follows runs on the cluster it had.
func (s *stack) scaleUpOne(name string) readyRound {
	s.t.Helper()
	key := client.ObjectKey{Namespace: s.ns, Name: name}
	var cluster dolphinv1.MySQLCluster
	if err := s.c.Get(s.ctx, key, &cluster); err != nil {
		s.t.Fatal(err)
	}
	before := cluster.Spec.Instances
	pod := fmt.Sprintf("%s-%d", name, before)
	patch := client.MergeFrom(cluster.DeepCopy())
	cluster.Spec.Instances = before + 1
	asked := time.Now()
	if err := s.c.Patch(s.ctx, &cluster, patch); err != nil {
		s.t.Fatal(err)
	}
	seen := map[string]time.Duration{}
	var order []string
	mark := func(phase string, reached bool) {
		if _, ok := seen[phase]; reached && !ok {
			seen[phase] = time.Since(asked)
			order = append(order, phase)
		}
	}
	type waitReason struct {
		at  time.Duration
		why string
	}
	var (
		round readyRound
		waits []waitReason
	)
	testenv.Eventually(s.t, 240*time.Second, fmt.Sprintf("%s Ready with %d instances", name, before+1), func() error {
		var p corev1.Pod
		if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: pod}, &p); err == nil {
			mark("pod", true)
			mark("scheduled", podCondition(&p, corev1.PodScheduled))
			for _, ic := range p.Spec.InitContainers {
				mark("init:"+ic.Name, initDone(&p, ic.Name))
			}
			mark("running", containersRunning(&p))
			mark("pod_ready", podReady(&p))
		} else if client.IgnoreNotFound(err) != nil {
			return err
		}
		if _, ok := seen["volume_bound"]; !ok {
			var claim corev1.PersistentVolumeClaim
			if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: "data-" + pod}, &claim); err == nil {
				mark("volume_bound", claim.Status.Phase == corev1.ClaimBound)
			}
		}
		if err := s.c.Get(s.ctx, key, &cluster); err != nil {
			return err
		}
		tp := cluster.Status.Topology
		mark("counted_ready", cluster.Status.ReadyInstances == before+1)
		if !meta.IsStatusConditionTrue(cluster.Status.Conditions, "Ready") || cluster.Status.ReadyInstances != before+1 ||
			tp == nil || tp.State != "Healthy" || len(tp.ErrantInstances) > 0 {
			// What the cluster waits for, each time it changes: where the time after the pod is
			// Ready goes.
			why := fmt.Sprintf("%d ready", cluster.Status.ReadyInstances)
			if c := meta.FindStatusCondition(cluster.Status.Conditions, "Ready"); c != nil {
				why += fmt.Sprintf(", Ready=%s %s: %s", c.Status, c.Reason, c.Message)
			}
			if tp != nil {
				why += fmt.Sprintf(", topology %s: %s", tp.State, tp.Message)
			}
			if len(waits) == 0 || waits[len(waits)-1].why != why {
				waits = append(waits, waitReason{time.Since(asked), why})
			}
			return errors.New(why)
		}
		round.total = time.Since(asked)
		return nil
	})
	for _, p := range order {
		round.phases = append(round.phases, readyPhase{p, seen[p]})
	}
	for _, w := range waits {
		s.t.Logf("  scale-up +%.2fs waiting: %s", w.at.Seconds(), w.why)
	}
	if podReadyAt, ok := seen["pod_ready"]; ok && round.total-podReadyAt > 3*time.Second {
		s.t.Logf("the cluster counted the new pod Ready %.2fs after it was: logs kept with DOLPHIN_E2E_KEEP", (round.total - podReadyAt).Seconds())
		s.keepLogs = true
	}
	if err := s.c.Get(s.ctx, key, &cluster); err != nil {
		s.t.Fatal(err)
	}
	patch = client.MergeFrom(cluster.DeepCopy())
	cluster.Spec.Instances = before
	if err := s.c.Patch(s.ctx, &cluster, patch); err != nil {
		s.t.Fatal(err)
	}
	s.waitHealthyN(key, int(before))
	return round
}
