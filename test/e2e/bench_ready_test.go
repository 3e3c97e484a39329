package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/objectstore/s3test"
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
	return s.createToReady(&dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name},
		Spec: dolphinv1.MySQLClusterSpec{Instances: 3, Storage: dolphinv1.StorageSpec{DeletePolicy: dolphinv1.VolumeDelete}}})
}

// createToReady creates cluster (of 3 instances) and times its way to Ready as applyToReady
// describes.
func (s *stack) createToReady(cluster *dolphinv1.MySQLCluster) readyRound {
	s.t.Helper()
	name := cluster.Name
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
	waits := &clusterWaits{start: applied}
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
			return waits.note(cluster)
		}
		round.total = time.Since(applied)
		return nil
	})
	for _, p := range order {
		round.phases = append(round.phases, readyPhase{p, seen[p]})
	}
	podsReady, ok := seen["pods_ready"]
	s.logIfLate(name, waits, podsReady, round.total, ok)
	if seen["init:dolphin-tools"]-seen["volumes_bound"] > slowToolsInit {
		s.logPodEvents(name, applied)
	}
	return round
}

// clusterWaits records, each time it changes, what a cluster on its way to Ready waits for
// (its Ready condition and topology): where the time after its pods are Ready goes.
type clusterWaits struct {
	start time.Time
	waits []clusterWait
}

type clusterWait struct {
	at  time.Duration
	why string
}

// note records why, if it differs from the last reason, and returns it as an error.
func (w *clusterWaits) note(c *dolphinv1.MySQLCluster) error {
	why := fmt.Sprintf("%d ready", c.Status.ReadyInstances)
	if cond := meta.FindStatusCondition(c.Status.Conditions, "Ready"); cond != nil {
		why += fmt.Sprintf(", Ready=%s %s: %s", cond.Status, cond.Reason, cond.Message)
	}
	if tp := c.Status.Topology; tp != nil {
		why += fmt.Sprintf(", topology %s: %s", tp.State, tp.Message)
	}
	if len(w.waits) == 0 || w.waits[len(w.waits)-1].why != why {
		w.waits = append(w.waits, clusterWait{time.Since(w.start), why})
	}
	return errors.New(why)
}

// logIfLate logs the reasons and keeps the run's logs (DOLPHIN_E2E_KEEP) when the cluster
// was counted Ready more than 3 s after its pods were.
func (s *stack) logIfLate(what string, w *clusterWaits, podsReady, total time.Duration, ok bool) {
	s.t.Helper()
	if !ok || total-podsReady <= 3*time.Second {
		return
	}
	for _, x := range w.waits {
		s.t.Logf("  %s +%.2fs waiting: %s", what, x.at.Seconds(), x.why)
	}
	s.t.Logf("%s: the cluster was Ready %.2fs after its pods were: logs kept with DOLPHIN_E2E_KEEP", what, (total - podsReady).Seconds())
	s.keepLogs = true
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
	var round readyRound
	waits := &clusterWaits{start: asked}
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
			return waits.note(&cluster)
		}
		round.total = time.Since(asked)
		return nil
	})
	for _, p := range order {
		round.phases = append(round.phases, readyPhase{p, seen[p]})
	}
	podReady, ok := seen["pod_ready"]
	s.logIfLate("scale-up", waits, podReady, round.total, ok)
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

// restoreToReady backs cluster src up to an S3 server started on the node's network, then
// creates a new 3-instance cluster from that backup and times its way to Ready as applyToReady
// does (the seed init container downloads, verifies and prepares the backup), and deletes it
// again. The round's line carries the backup's own time and size.
func (s *stack) restoreToReady(src string) (readyRound, string) {
	s.t.Helper()
	srv := s3test.StartOn(s.t, s.gateway())
	s.createS3Secret("s3", srv.AccessKey, srv.SecretKey)
	s.setBackupStore(client.ObjectKey{Namespace: s.ns, Name: src}, srv)
	b := s.backupAndWait(src+"-bench-backup", src, dolphinv1.BackupSucceeded)
	round := s.createToReady(&dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "restored"},
		Spec: dolphinv1.MySQLClusterSpec{Instances: 3, Storage: dolphinv1.StorageSpec{DeletePolicy: dolphinv1.VolumeDelete},
			Bootstrap: &dolphinv1.BootstrapSpec{Backup: &dolphinv1.BackupReference{Name: b.Name}}}})
	s.deleteCluster("restored")
	return round, fmt.Sprintf("backup_duration=%s backup_stored=%s", b.Status.Duration, b.Status.StoredSize)
}

// kubeletVolumeBackoffs reads the real node's kubelet log (the whole run: the ready rounds,
// the scale-up, the restore and the failover rounds) for the pods the kubelet set aside
// because it could not process a claim — each waits out the kubelet's 10–15 s pod-sync
// back-off before it is tried again — and says why, by cause with the claim's name left out.
// Two races of Kubernetes' own cause them here: the node authorizer refusing the claim because
// it has not yet related the new pod to the node (kubernetes/kubernetes#49880), and a claim
// the scheduler already counts as bound (volume name set) whose status the volume controller
// has not yet written ("PVC is not bound"). ok is false without a kubelet log (the process
// node).
func (s *stack) kubeletVolumeBackoffs() (pods map[string]string, ok bool) {
	s.t.Helper()
	b, err := os.ReadFile(filepath.Join(s.dir, "logs", "kubelet.log"))
	if err != nil {
		return nil, false
	}
	return volumeBackoffs(string(b)), true
}

// operatorKubeletRetries counts the pods the operator asked the kubelet to sync again over the
// run (KubeletRetry events on the clusters, about a pod: docs/design/0069), by pod.
func (s *stack) operatorKubeletRetries() map[string]int {
	s.t.Helper()
	var events corev1.EventList
	if err := s.c.List(s.ctx, &events, client.InNamespace(s.ns)); err != nil {
		s.t.Errorf("listing events: %v", err)
		return nil
	}
	pods := map[string]int{}
	for _, e := range events.Items {
		if e.Reason != "KubeletRetry" || e.Related == nil {
			continue
		}
		n := 1
		if e.Series != nil {
			n = int(e.Series.Count)
		} else if e.Count > 1 {
			n = int(e.Count)
		}
		pods[e.Related.Name] += n
	}
	return pods
}

// volumeBackoffs maps each pod a kubelet log shows set aside for a volume it could not process
// to the first such cause.
func volumeBackoffs(log string) map[string]string {
	pods := map[string]string{}
	for _, m := range volumeBackoff.FindAllStringSubmatch(log, -1) {
		if _, seen := pods[m[2]]; seen {
			continue
		}
		cause := m[1]
		switch {
		case strings.Contains(cause, "no relationship found"):
			cause = "the node authorizer refused the claim (pod not yet related to the node)"
		case strings.Contains(cause, "PVC is not bound"):
			cause = "claim not yet bound in its status"
		}
		pods[m[2]] = cause
	}
	return pods
}

// volumeBackoff matches the kubelet's "Error syncing pod, skipping" for a volume it could not
// process: the cause and the pod.
var volumeBackoff = regexp.MustCompile(`"Error syncing pod, skipping" err="unmounted volumes=.*?failed to process volumes=\[[^\]]*\]: (error processing PVC .*?)" pod="([^"]+)"`)
