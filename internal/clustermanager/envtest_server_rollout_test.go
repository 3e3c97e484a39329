package clustermanager

import (
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	mysqlcontroller "github.com/dolphin-operator/dolphin/internal/controller"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/testenv"
	"github.com/dolphin-operator/dolphin/internal/topology"
)

// gatedAddresser hides instances from the engine while the stand-in kubelet restarts them.
type gatedAddresser struct {
	loopback
	mu     sync.Mutex
	hidden map[int]bool
}

func (g *gatedAddresser) Member(c *dolphinv1.MySQLCluster, i int) topology.Member {
	m := g.loopback.Member(c, i)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.hidden[i] {
		m.Host = ""
	}
	return m
}

func (g *gatedAddresser) hide(i int, hidden bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hidden[i] = hidden
}

// startRolloutOperator is startOperator with instances the stand-in can hide.
func startRolloutOperator(t *testing.T, ns string) (*operatorEnv, *gatedAddresser) {
	var gate *gatedAddresser
	o := startOperator(t, ns, dolphinv1.FailoverSpec{
		Detection: dolphinv1.DetectionSpec{Interval: &metav1.Duration{Duration: 500 * time.Millisecond}, Attempts: 3}},
		func(l loopback) Addresser { gate = &gatedAddresser{loopback: l, hidden: map[int]bool{}}; return gate })
	return o, gate
}

// podRestart is one pod the operator deleted and the stand-in brought back, with what the
// engine's record said when the deletion was seen.
type podRestart struct {
	pod      string
	revision string // of the re-created pod
	primary  string // status.topology.primary at the deletion
	promoted *dolphinv1.PromotionRecord
	others   string // instances other than the deleted one that were not healthy, "" = none
}

// standInController does what envtest lacks, for the cluster's StatefulSet: the StatefulSet
// controller (status with the revision of the template, pods re-created at that revision)
// and the kubelet (the instance's mariadbd stopped when its pod goes, started again with
// --init-rpl-role=SLAVE, the pod marked ready).
type standInController struct {
	o    *operatorEnv
	gate *gatedAddresser
	cl   *dolphinv1.MySQLCluster // its own copy: the test reads into o.cluster

	mu       sync.Mutex
	restarts []podRestart
	maxDown  int    // most pods missing at once
	current  string // status.currentRevision
	errs     []error
	initial  string // the revision before the test changed anything
}

// revisionOf names a pod template as the StatefulSet controller does: by a hash of it.
func revisionOf(sts *appsv1.StatefulSet) string {
	b, _ := json.Marshal(sts.Spec.Template)
	sum := sha256.Sum256(b)
	return sts.Name + "-" + hex.EncodeToString(sum[:5])
}

// startStandIn labels the running pods with the current revision, then keeps the
// StatefulSet status and pods in line until the test ends.
func startStandIn(t *testing.T, o *operatorEnv, gate *gatedAddresser) *standInController {
	t.Helper()
	var sts appsv1.StatefulSet
	testenv.Eventually(t, 30*time.Second, "StatefulSet applied", func() error { return o.c.Get(o.ctx, o.key, &sts) })
	s := &standInController{o: o, gate: gate, cl: o.cluster.DeepCopy(), current: revisionOf(&sts), initial: revisionOf(&sts)}
	for i := range 3 {
		var p corev1.Pod
		if err := o.c.Get(o.ctx, client.ObjectKey{Namespace: o.ns, Name: resources.PodName(s.cl, i)}, &p); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(p.DeepCopy())
		p.Labels[appsv1.ControllerRevisionHashLabelKey] = s.current
		if err := o.c.Patch(o.ctx, &p, patch); err != nil {
			t.Fatal(err)
		}
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if err := s.sync(t); err != nil && o.ctx.Err() == nil {
				s.mu.Lock()
				s.errs = append(s.errs, err)
				s.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
		for _, err := range s.errs {
			t.Errorf("stand-in StatefulSet controller: %v", err)
		}
	})
	return s
}

// sync runs one pass: re-create missing pods (restarting their servers), then the status.
func (s *standInController) sync(t *testing.T) error {
	o := s.o
	var sts appsv1.StatefulSet
	if err := o.c.Get(o.ctx, o.key, &sts); err != nil {
		return err
	}
	rev := revisionOf(&sts)
	var pods corev1.PodList
	if err := o.c.List(o.ctx, &pods, client.InNamespace(o.ns)); err != nil {
		return err
	}
	byName := map[string]corev1.Pod{}
	for _, p := range pods.Items {
		byName[p.Name] = p
	}
	var missing []int
	for i := range int(*sts.Spec.Replicas) {
		if _, ok := byName[resources.PodName(s.cl, i)]; !ok {
			missing = append(missing, i)
		}
	}
	s.mu.Lock()
	s.maxDown = max(s.maxDown, len(missing))
	s.mu.Unlock()
	for _, i := range missing {
		if err := s.recreate(t, i, rev); err != nil {
			return err
		}
		byName[resources.PodName(s.cl, i)] = corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{appsv1.ControllerRevisionHashLabelKey: rev}},
			Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	}
	// What statefulSetSettled and nextRollout read: revisions, replicas, updated and ready pods.
	st := appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, UpdateRevision: rev, Replicas: int32(len(byName))}
	for _, p := range byName {
		if slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
		}) {
			st.ReadyReplicas++
		}
		if p.Labels[appsv1.ControllerRevisionHashLabelKey] == rev {
			st.UpdatedReplicas++
		}
	}
	s.mu.Lock()
	if st.UpdatedReplicas == *sts.Spec.Replicas && st.ReadyReplicas == *sts.Spec.Replicas {
		s.current = rev
	}
	st.CurrentRevision = s.current
	s.mu.Unlock()
	if equality.Semantic.DeepEqual(st, sts.Status) {
		return nil
	}
	sts.Status = st
	if err := o.c.Status().Update(o.ctx, &sts); err != nil {
		return fmt.Errorf("updating the StatefulSet status: %w", err)
	}
	return nil
}

// recreate brings instance i back after the operator deleted its pod.
func (s *standInController) recreate(t *testing.T, i int, rev string) error {
	o := s.o
	name := resources.PodName(s.cl, i)
	var c dolphinv1.MySQLCluster
	if err := o.c.Get(o.ctx, o.key, &c); err != nil {
		return err
	}
	r := podRestart{pod: name, revision: rev}
	if tp := c.Status.Topology; tp != nil {
		r.primary, r.promoted = tp.Primary, tp.LastPromotion.DeepCopy()
		var bad []string
		for _, in := range tp.Instances {
			if in.Name != name && (!in.Reachable || (in.Name != tp.Primary && !in.Replicating)) {
				bad = append(bad, in.Name)
			}
		}
		r.others = strings.Join(bad, ",")
	}
	t.Logf("stand-in: pod %s deleted (primary %s, not healthy: %q): restarting its server at revision %s", name, r.primary, r.others, rev)
	if err := s.stop(t, i); err != nil {
		return err
	}
	labels := resources.CommonLabels(s.cl)
	labels[appsv1.ControllerRevisionHashLabelKey] = rev
	labels[appsv1.StatefulSetPodNameLabel] = name
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: o.ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "mysqld", Image: "mariadb"}}}}
	if err := o.c.Create(o.ctx, p); err != nil {
		return fmt.Errorf("re-creating pod %s: %w", name, err)
	}
	o.db.Instances[i].Start(t, "--init-rpl-role=SLAVE")
	s.gate.hide(i, false)
	ready := client.MergeFrom(p.DeepCopy())
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if err := o.c.Status().Patch(o.ctx, p, ready); err != nil {
		return fmt.Errorf("marking pod %s ready: %w", name, err)
	}
	s.mu.Lock()
	s.restarts = append(s.restarts, r)
	s.mu.Unlock()
	return nil
}

// stop stops instance i's server as the kubelet would, hidden from the engine until it is
// started again. dbtest's Start checks a server as root over its socket without a password,
// and the engine gave root@localhost the credentials Secret's: it is emptied first (without
// binary logging), and the engine sets it again once it sees the restarted server.
func (s *standInController) stop(t *testing.T, i int) error {
	o := s.o
	s.gate.hide(i, true)
	in := o.db.Instances[i]
	if !in.Running() {
		return nil
	}
	var sec corev1.Secret
	if err := o.c.Get(o.ctx, client.ObjectKey{Namespace: o.ns, Name: "shop-credentials"}, &sec); err != nil {
		return err
	}
	db, err := sql.Open("mysql", fmt.Sprintf("%s:%s@tcp(%s)/?timeout=2s&readTimeout=10s", resources.OperatorUser, sec.Data[resources.OperatorPasswordKey], in.Addr()))
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one session: sql_log_bin = 0 holds for the ALTER
	for _, q := range []string{"SET SESSION sql_log_bin = 0", "ALTER USER 'root'@'localhost' IDENTIFIED BY ''"} {
		if _, err := db.Exec(q); err != nil {
			return fmt.Errorf("%s on %s: %w", q, in.Name, err)
		}
	}
	in.Stop(t)
	return nil
}

func (s *standInController) done() ([]podRestart, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.restarts), s.maxDown
}

// setConfig sets spec.mysqlConfig with a merge patch (the operator writes the object too).
func (o *operatorEnv) setConfig(t *testing.T, cfg map[string]dolphinv1.MySQLConfigValue) {
	t.Helper()
	if err := o.c.Get(o.ctx, o.key, o.cluster); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(o.cluster.DeepCopy())
	o.cluster.Spec.MySQLConfig = cfg
	if err := o.c.Patch(o.ctx, o.cluster, patch); err != nil {
		t.Fatal(err)
	}
}

// waitRolledOut waits until every pod runs a revision other than before, is ready, and the
// cluster is Ready, Healthy and no longer progressing.
func (o *operatorEnv) waitRolledOut(t *testing.T, before string) {
	t.Helper()
	testenv.Eventually(t, 180*time.Second, "rolled out", func() error {
		var sts appsv1.StatefulSet
		if err := o.c.Get(o.ctx, o.key, &sts); err != nil {
			return err
		}
		if st := sts.Status; st.UpdateRevision == before || st.CurrentRevision != st.UpdateRevision || st.UpdatedReplicas != 3 {
			return fmt.Errorf("StatefulSet status %+v", st)
		}
		if err := o.c.Get(o.ctx, o.key, o.cluster); err != nil {
			return err
		}
		st := o.cluster.Status
		if p := meta.FindStatusCondition(st.Conditions, dolphinv1.ConditionProgressing); p == nil || p.Status != metav1.ConditionFalse {
			return fmt.Errorf("Progressing %+v", p)
		}
		if !meta.IsStatusConditionTrue(st.Conditions, dolphinv1.ConditionReady) || st.Topology.State != "Healthy" {
			return fmt.Errorf("not Ready/Healthy: %s %+v", st.Topology.State, st.Conditions)
		}
		return nil
	})
}

// clusterEvents returns the notes of the events on the cluster with a given reason, oldest first.
func (o *operatorEnv) clusterEvents(t *testing.T, reason string) []string {
	t.Helper()
	var evs eventsv1.EventList
	if err := o.c.List(o.ctx, &evs, client.InNamespace(o.ns)); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(evs.Items, func(a, b eventsv1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
	var out []string
	for _, e := range evs.Items {
		if e.Regarding.Name == "shop" && e.Reason == reason {
			out = append(out, e.Note)
		}
	}
	return out
}

// appWriter inserts a new id every 5 ms through an application account into whichever
// instance status.topology.primary names, and keeps the acknowledged ids.
type appWriter struct {
	pools      []*sql.DB // per instance
	acked      []int
	failed     int
	pause      time.Duration // longest time between two acknowledged writes
	primary    int           // ordinal written to last
	stop, done chan struct{}
}

func startAppWriter(t *testing.T, o *operatorEnv) *appWriter {
	t.Helper()
	o.declareAppAccount(t)
	w := &appWriter{stop: make(chan struct{}), done: make(chan struct{})}
	for _, in := range o.db.Instances {
		db, err := sql.Open("mysql", fmt.Sprintf("%s:%s@tcp(%s)/?timeout=2s&readTimeout=10s&writeTimeout=10s", appUser, appPassword, in.Addr()))
		if err != nil {
			t.Fatal(err)
		}
		w.pools = append(w.pools, db)
	}
	go func() {
		defer close(w.done)
		last := time.Now()
		for id := 1; ; id++ {
			select {
			case <-w.stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			var c dolphinv1.MySQLCluster // the record of the primary, as a client's Service follows it
			if err := o.c.Get(o.ctx, o.key, &c); err == nil && c.Status.Topology != nil {
				_, _ = fmt.Sscanf(c.Status.Topology.Primary, "shop-%d", &w.primary)
			}
			if _, err := w.pools[w.primary].Exec("INSERT INTO app.rows VALUES (?)", id); err != nil {
				w.failed++
				continue
			}
			w.acked = append(w.acked, id)
			w.pause, last = max(w.pause, time.Since(last)), time.Now()
		}
	}()
	t.Cleanup(func() {
		w.halt()
		for _, p := range w.pools {
			p.Close()
		}
	})
	return w
}

func (w *appWriter) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// check stops the writer and verifies that every acknowledged row is on the primary.
func (w *appWriter) check(t *testing.T) {
	t.Helper()
	w.halt()
	if len(w.acked) == 0 {
		t.Fatal("no application write was acknowledged: the test proves nothing")
	}
	rows, err := w.pools[w.primary].Query("SELECT id FROM app.rows")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	have := map[int]bool{}
	for rows.Next() {
		var id int
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		have[id] = true
	}
	var lost []int
	for _, id := range w.acked {
		if !have[id] {
			lost = append(lost, id)
		}
	}
	if len(lost) > 0 {
		t.Errorf("%d acknowledged writes lost on the primary shop-%d: %v", len(lost), w.primary, lost[:min(len(lost), 20)])
	}
	t.Logf("application writer: %d writes acknowledged, %d failed, %d rows on shop-%d, longest pause between acknowledged writes %v",
		len(w.acked), w.failed, len(have), w.primary, w.pause.Round(time.Millisecond))
}

// TestEnvtestServerRollingRestart: a static setting changes the pod template; the operator
// restarts the replicas one at a time (each back and caught up before the next), switches the
// primary over to an updated replica, then restarts the former primary; an application
// writer following the record of the primary loses no acknowledged write.
func TestEnvtestServerRollingRestart(t *testing.T) {
	o, gate := startRolloutOperator(t, "rollout")
	o.waitReady(t)
	s := startStandIn(t, o, gate)
	before := s.initial
	w := startAppWriter(t, o)
	time.Sleep(500 * time.Millisecond) // some writes before the rollout

	o.setConfig(t, map[string]dolphinv1.MySQLConfigValue{"performance_schema": "ON"})
	o.waitRolledOut(t, before)
	time.Sleep(500 * time.Millisecond) // some writes after it
	w.check(t)

	restarts, maxDown := s.done()
	var order []string
	for _, r := range restarts {
		order = append(order, r.pod)
	}
	if got := strings.Join(order, " "); got != "shop-2 shop-1 shop-0" {
		t.Fatalf("pods restarted in the order %q, want replicas first (highest ordinal first), the former primary last", got)
	}
	if maxDown != 1 {
		t.Errorf("%d pods were down at once, want 1", maxDown)
	}
	for _, r := range restarts {
		if r.revision == before {
			t.Errorf("%s re-created at the old revision", r.pod)
		}
		if r.others != "" {
			t.Errorf("%s was deleted while %s were not healthy and caught up", r.pod, r.others)
		}
	}
	for _, r := range restarts[:2] {
		if r.primary != "shop-0" || (r.promoted != nil && r.promoted.Planned) {
			t.Errorf("replica %s restarted with primary %s, last promotion %+v: want before the switchover", r.pod, r.primary, r.promoted)
		}
	}
	last := restarts[2]
	if lp := last.promoted; lp == nil || !lp.Planned || lp.From != "shop-0" || lp.To == "shop-0" || last.primary != lp.To {
		t.Errorf("the former primary was restarted with primary %s and last promotion %+v: want after a switchover away from it", last.primary, lp)
	} else {
		t.Logf("switchover from shop-0 to %s took %v", lp.To, lp.Duration.Duration)
	}
	if err := o.c.Get(o.ctx, o.key, o.cluster); err != nil {
		t.Fatal(err)
	}
	if p := o.cluster.Status.Topology.Primary; p != last.primary || o.roleOf(p) != "primary" || o.roleOf("shop-0") != "replica" {
		t.Errorf("after the rollout: primary %s, roles %s=%s shop-0=%s", p, p, o.roleOf(p), o.roleOf("shop-0"))
	}

	// Events are written by the recorder in the background: wait for them, then require
	// exactly one per pod.
	var restartEvents []string
	testenv.Eventually(t, 30*time.Second, "a RollingRestart event per pod", func() error {
		restartEvents = o.clusterEvents(t, "RollingRestart")
		for _, pod := range order {
			if !slices.ContainsFunc(restartEvents, func(n string) bool { return strings.HasPrefix(n, "deleted pod "+pod+":") }) {
				return fmt.Errorf("no RollingRestart event for %s: %q", pod, restartEvents)
			}
		}
		return nil
	})
	if len(restartEvents) != 3 {
		t.Errorf("RollingRestart events %q, want one per pod", restartEvents)
	}
	if sw := o.clusterEvents(t, "RolloutSwitchover"); len(sw) != 1 || !strings.Contains(sw[0], "from shop-0 to the updated replica "+last.primary) {
		t.Errorf("RolloutSwitchover events %q, want one naming shop-0 and %s", sw, last.primary)
	}
	t.Logf("events: %q", restartEvents)
}

// TestEnvtestServerRolloutHeldWhileDegraded: with a replica's server down the rollout does
// not start, and the Progressing condition says why and how to force it; with the force
// annotation it runs, one pod at a time, and ends with every pod updated.
func TestEnvtestServerRolloutHeldWhileDegraded(t *testing.T) {
	o, gate := startRolloutOperator(t, "rollout-held")
	o.waitReady(t)
	s := startStandIn(t, o, gate)
	before := s.initial

	if err := s.stop(t, 1); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "topology degraded", func() error {
		if err := o.c.Get(o.ctx, o.key, o.cluster); err != nil {
			return err
		}
		if st := o.cluster.Status.Topology.State; st != "Degraded" {
			return fmt.Errorf("state %s", st)
		}
		return nil
	})
	o.setConfig(t, map[string]dolphinv1.MySQLConfigValue{"performance_schema": "ON"})
	testenv.Eventually(t, 30*time.Second, "rollout held", func() error {
		if err := o.c.Get(o.ctx, o.key, o.cluster); err != nil {
			return err
		}
		p := meta.FindStatusCondition(o.cluster.Status.Conditions, dolphinv1.ConditionProgressing)
		if p == nil || p.Reason != "RollingOut" || !strings.Contains(p.Message, "held while the topology is Degraded") ||
			!strings.Contains(p.Message, mysqlcontroller.ForceRolloutAnnotation+"=true") {
			return fmt.Errorf("Progressing %+v", p)
		}
		return nil
	})
	time.Sleep(3 * time.Second) // several engine cycles and reconciles
	if restarts, _ := s.done(); len(restarts) != 0 {
		t.Fatalf("pods restarted while the cluster was degraded: %+v", restarts)
	}

	if err := o.c.Get(o.ctx, o.key, o.cluster); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(o.cluster.DeepCopy())
	o.cluster.Annotations = map[string]string{mysqlcontroller.ForceRolloutAnnotation: "true"}
	if err := o.c.Patch(o.ctx, o.cluster, patch); err != nil {
		t.Fatal(err)
	}
	o.waitRolledOut(t, before)
	restarts, maxDown := s.done()
	if len(restarts) != 3 || restarts[0].pod != "shop-2" || restarts[0].others == "" || restarts[2].pod != "shop-0" {
		t.Errorf("forced rollout: %+v, want shop-2 first while degraded, shop-0 last", restarts)
	}
	if maxDown != 1 {
		t.Errorf("%d pods were down at once, want 1 (forced rollouts still go one at a time)", maxDown)
	}
	if ev := o.clusterEvents(t, "RollingRestart"); len(ev) == 0 || !strings.Contains(ev[0], "forced by "+mysqlcontroller.ForceRolloutAnnotation) {
		t.Errorf("RollingRestart events %q, want the first saying it was forced", ev)
	}
}
