package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// rolloutCase builds the observed state of a cluster "shop" whose StatefulSet's template
// moved from revision "old" to "new".
type rolloutCase struct {
	sts  *appsv1.StatefulSet
	pods []corev1.Pod
	topo *dolphinv1.TopologyStatus
}

// newRollout: n pods at revision "old", all ready, shop-0 primary, Healthy, every replica
// replicating with no lag; the StatefulSet's update revision is "new".
func newRollout(n int) *rolloutCase {
	rc := &rolloutCase{
		sts: &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: "shop", Generation: 3},
			Spec:       appsv1.StatefulSetSpec{Replicas: ptr.To(int32(n))},
			Status: appsv1.StatefulSetStatus{ObservedGeneration: 3, Replicas: int32(n),
				CurrentRevision: "old", UpdateRevision: "new"},
		},
		topo: &dolphinv1.TopologyStatus{State: topologyHealthy, Primary: "shop-0"},
	}
	for i := range n {
		name := fmt.Sprintf("shop-%d", i)
		p := pod(name, dolphinv1.RoleReplica, true)
		p.UID = types.UID("uid-" + name)
		p.Labels[appsv1.ControllerRevisionHashLabelKey] = "old"
		rc.pods = append(rc.pods, p)
		in := dolphinv1.InstanceTopology{Name: name, Reachable: true, GTIDExecuted: "0-1-100"}
		if i > 0 {
			in.Replicating, in.ReplicationLagSeconds = true, ptr.To(int64(0))
		}
		rc.topo.Instances = append(rc.topo.Instances, in)
	}
	return rc
}

func (rc *rolloutCase) pod(name string) *corev1.Pod {
	for i := range rc.pods {
		if rc.pods[i].Name == name {
			return &rc.pods[i]
		}
	}
	panic(name)
}

func (rc *rolloutCase) inst(name string) *dolphinv1.InstanceTopology {
	if in := topologyInstance(rc.topo, name); in != nil {
		return in
	}
	panic(name)
}

// updated marks pods as re-created at the new revision.
func (rc *rolloutCase) updated(names ...string) *rolloutCase {
	for _, n := range names {
		rc.pod(n).Labels[appsv1.ControllerRevisionHashLabelKey] = "new"
	}
	return rc
}

func (rc *rolloutCase) notReady(name string) *rolloutCase {
	rc.pod(name).Status.Conditions[0].Status = corev1.ConditionFalse
	return rc
}

func (rc *rolloutCase) lag(name string, s int64) *rolloutCase {
	rc.inst(name).ReplicationLagSeconds = &s
	return rc
}

func (rc *rolloutCase) primary(name string) *rolloutCase {
	rc.topo.Primary = name
	for i := range rc.topo.Instances {
		in := &rc.topo.Instances[i]
		in.Replicating, in.ReplicationLagSeconds = in.Name != name, ptr.To(int64(0))
		if in.Name == name {
			in.ReplicationLagSeconds = nil
		}
	}
	return rc
}

func (rc *rolloutCase) state(s, msg string) *rolloutCase {
	rc.topo.State, rc.topo.Message = s, msg
	return rc
}

func (rc *rolloutCase) with(f func(rc *rolloutCase)) *rolloutCase { f(rc); return rc }

// upgraded records the engine-upgrade step's run on pods (EngineUpgradedAnnotation).
func (rc *rolloutCase) upgraded(names ...string) *rolloutCase {
	for _, n := range names {
		p := rc.pod(n)
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[EngineUpgradedAnnotation] = "11.8.9-MariaDB"
	}
	return rc
}

// engineUpgrades is input for a MariaDB cluster: restarted pods wait for their upgrade.
func (rc *rolloutCase) engineUpgrades(forced bool) rolloutInput {
	in := rc.input(forced)
	in.EngineUpgrades = true
	return in
}

func (rc *rolloutCase) input(forced bool) rolloutInput {
	return rolloutInput{StatefulSet: rc.sts, Pods: rc.pods, Topology: rc.topo, Forced: forced}
}

func TestNextRollout(t *testing.T) {
	cases := []struct {
		name   string
		in     rolloutInput
		kind   rolloutKind
		pod    string   // deleted pod or switchover target
		phrase []string // in the message
	}{
		{"no StatefulSet", rolloutInput{}, rolloutNothing, "", nil},
		{"no revision reported yet (no StatefulSet controller)",
			newRollout(3).with(func(rc *rolloutCase) { rc.sts.Status.UpdateRevision = "" }).input(false), rolloutNothing, "", nil},
		{"every pod at the update revision",
			newRollout(3).updated("shop-0", "shop-1", "shop-2").input(false), rolloutNothing, "", nil},
		{"pods without a revision label are left alone",
			newRollout(3).with(func(rc *rolloutCase) {
				for i := range rc.pods {
					delete(rc.pods[i].Labels, appsv1.ControllerRevisionHashLabelKey)
				}
			}).input(false), rolloutNothing, "", nil},
		{"StatefulSet being replaced (storage growth)",
			newRollout(3).with(func(rc *rolloutCase) { rc.sts.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)} }).input(false),
			rolloutNothing, "", nil},
		{"new spec not observed by the StatefulSet controller",
			newRollout(3).with(func(rc *rolloutCase) { rc.sts.Generation = 4 }).input(false), rolloutWait, "", []string{"not observed"}},

		// Replicas first, highest ordinal first, one at a time.
		{"healthy: the highest outdated replica first",
			newRollout(3).input(false), rolloutDeletePod, "shop-2", []string{"restarting shop-2 (an outdated replica)", "0/3 instances updated"}},
		{"then the next replica once the first is back and caught up",
			newRollout(3).updated("shop-2").input(false), rolloutDeletePod, "shop-1", []string{"restarting shop-1", "1/3"}},
		{"restarted replica not re-created yet",
			newRollout(3).with(func(rc *rolloutCase) { rc.pods = rc.pods[:2] }).input(false), rolloutWait, "", []string{"waiting for shop-2 to be re-created"}},
		{"restarted replica still terminating",
			newRollout(3).with(func(rc *rolloutCase) { rc.pod("shop-2").DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)} }).input(false),
			rolloutWait, "", []string{"waiting for shop-2 to terminate"}},
		{"restarted replica not ready",
			newRollout(3).updated("shop-2").notReady("shop-2").input(false), rolloutWait, "", []string{"waiting for shop-2 to be ready and caught up"}},
		{"restarted replica not ready: forced waits too",
			newRollout(3).updated("shop-2").notReady("shop-2").input(true), rolloutWait, "", []string{"waiting for shop-2 to be ready"}},
		{"restarted replica lags",
			newRollout(3).updated("shop-2").lag("shop-2", 3).input(false), rolloutWait, "", []string{"waiting for shop-2 to be ready and caught up (3s behind)"}},
		{"restarted replica not replicating yet",
			newRollout(3).updated("shop-2").with(func(rc *rolloutCase) { rc.inst("shop-2").Replicating = false }).input(false),
			rolloutWait, "", []string{"shop-2", "not replicating"}},
		{"restarted replica's lag unknown",
			newRollout(3).updated("shop-2").with(func(rc *rolloutCase) { rc.inst("shop-2").ReplicationLagSeconds = nil }).input(false),
			rolloutWait, "", []string{"shop-2", "lag unknown"}},
		{"restarted replica not observed by the engine yet",
			newRollout(3).updated("shop-2").with(func(rc *rolloutCase) { rc.topo.Instances = rc.topo.Instances[:2] }).input(false),
			rolloutWait, "", []string{"shop-2", "not observed yet"}},
		{"MariaDB: a restarted replica's system tables not upgraded yet",
			newRollout(3).updated("shop-2").engineUpgrades(false), rolloutWait, "",
			[]string{"waiting for shop-2's system tables to be upgraded"}},
		{"MariaDB: forced waits for the upgrade too",
			newRollout(3).updated("shop-2").engineUpgrades(true), rolloutWait, "", []string{"shop-2's system tables"}},
		{"MariaDB: the next replica once the restarted one is upgraded",
			newRollout(3).updated("shop-2").upgraded("shop-2").engineUpgrades(false), rolloutDeletePod, "shop-1", nil},
		{"MariaDB: no switchover before the updated replicas are upgraded",
			newRollout(3).updated("shop-1", "shop-2").upgraded("shop-2").engineUpgrades(false), rolloutWait, "",
			[]string{"shop-1's system tables"}},
		{"MariaDB: switchover once they are",
			newRollout(3).updated("shop-1", "shop-2").upgraded("shop-1", "shop-2").engineUpgrades(false), rolloutSwitchover, "shop-1", nil},
		{"an outdated pod is not waited for (its tables were checked when it started, or are at the old version)",
			newRollout(3).engineUpgrades(false), rolloutDeletePod, "shop-2", nil},
		{"an outdated replica lags: nothing starts",
			newRollout(3).lag("shop-1", 2).input(false), rolloutWait, "", []string{"waiting for shop-1", "2s behind"}},

		// Then a switchover to an updated replica, then the former primary.
		{"only the primary outdated: switchover to an updated replica",
			newRollout(3).updated("shop-1", "shop-2").input(false), rolloutSwitchover, "shop-1",
			[]string{"from shop-0 to the updated replica shop-1", "2/3"}},
		{"switchover target: the one that executed what the primary did",
			newRollout(3).updated("shop-1", "shop-2").with(func(rc *rolloutCase) { rc.inst("shop-1").GTIDExecuted = "0-1-99" }).input(false),
			rolloutSwitchover, "shop-2", nil},
		{"switchover target: never an outdated replica (forced, an outdated replica left)",
			newRollout(3).updated("shop-2").with(func(rc *rolloutCase) { rc.topo.Primary = "shop-0" }).input(true),
			rolloutDeletePod, "shop-1", nil},
		{"switchover target: not an errant replica (forced)",
			newRollout(3).updated("shop-1", "shop-2").with(func(rc *rolloutCase) { rc.topo.ErrantInstances = []string{"shop-1"} }).input(true),
			rolloutSwitchover, "shop-2", nil},
		{"switchover target: not a replica that does not replicate (forced)",
			newRollout(3).updated("shop-1", "shop-2").with(func(rc *rolloutCase) { rc.inst("shop-1").Replicating = false }).input(true),
			rolloutSwitchover, "shop-2", nil},
		{"switchover running",
			newRollout(3).updated("shop-1", "shop-2").state("Switchover", "switchover to shop-1: fencing shop-0").input(true),
			rolloutWait, "", []string{"Switchover"}},
		{"after the switchover: the former primary, like a replica",
			newRollout(3).updated("shop-1", "shop-2").primary("shop-1").with(func(rc *rolloutCase) {
				rc.topo.LastPromotion = &dolphinv1.PromotionRecord{From: "shop-0", To: "shop-1", Planned: true}
			}).input(false),
			rolloutDeletePod, "shop-0", []string{"the former primary, after the switchover to shop-1"}},
		{"after the switchover: the former primary waits until it caught up",
			newRollout(3).updated("shop-1", "shop-2").primary("shop-1").lag("shop-0", 1).input(false),
			rolloutWait, "", []string{"waiting for shop-0 to be ready and caught up"}},
		{"the record not moved yet: no deletion of the primary",
			newRollout(3).updated("shop-1", "shop-2").with(func(rc *rolloutCase) {
				rc.topo.LastPromotion = &dolphinv1.PromotionRecord{From: "shop-0", To: "shop-1", Planned: true}
			}).input(false),
			rolloutSwitchover, "shop-1", nil},

		// A degraded cluster holds the rollout unless forced.
		{"topology degraded: held",
			newRollout(3).state("Degraded", "shop-1 unreachable").input(false), rolloutWait, "",
			[]string{"held while the topology is Degraded: shop-1 unreachable", ForceRolloutAnnotation + "=true"}},
		{"topology degraded: forced",
			newRollout(3).state("Degraded", "shop-1 unreachable").input(true), rolloutDeletePod, "shop-2", []string{"forced by " + ForceRolloutAnnotation}},
		{"errant instance: held",
			newRollout(3).with(func(rc *rolloutCase) { rc.topo.ErrantInstances = []string{"shop-2"} }).input(false), rolloutWait, "", []string{"held", "errant"}},
		{"failover in progress: held",
			newRollout(3).state("Failover", "").with(func(rc *rolloutCase) { rc.topo.FailoverInProgress = &dolphinv1.FailoverProgress{From: "shop-0"} }).input(false),
			rolloutWait, "", []string{"held while a failover from shop-0 is in progress"}},
		{"failover in progress: forced",
			newRollout(3).state("PrimaryLost", "").with(func(rc *rolloutCase) { rc.topo.FailoverInProgress = &dolphinv1.FailoverProgress{From: "shop-0"} }).input(true),
			rolloutDeletePod, "shop-2", nil},
		{"an outdated pod not ready: held",
			newRollout(3).notReady("shop-1").input(false), rolloutWait, "", []string{"held while shop-1 is not ready"}},
		{"forced: an outdated replica that is not ready goes first",
			newRollout(3).notReady("shop-1").input(true), rolloutDeletePod, "shop-1", nil},
		{"no topology record yet",
			newRollout(3).with(func(rc *rolloutCase) { rc.topo = nil }).input(false), rolloutWait, "", []string{"record a primary"}},
		{"forced without a record: the labeled primary still goes last, after a switchover",
			newRollout(2).updated("shop-1").with(func(rc *rolloutCase) {
				rc.topo = nil
				rc.pod("shop-0").Labels["mysql.dolphin.dev/role"] = "primary"
			}).input(true),
			rolloutWait, "", []string{"take over from the primary shop-0"}},
		{"forced, no updated replica can take over: the primary waits",
			newRollout(3).updated("shop-1", "shop-2").state("Degraded", "").with(func(rc *rolloutCase) {
				rc.inst("shop-1").Reachable, rc.inst("shop-2").Replicating = false, false
			}).input(true),
			rolloutWait, "", []string{"waiting for an updated replica that can take over from the primary shop-0"}},
		{"a replica stuck on a template that never worked is replaced without force",
			newRollout(3).state("Degraded", "shop-2 unreachable").with(func(rc *rolloutCase) {
				rc.sts.Status.UpdateRevision = "fixed"
				rc.pod("shop-2").Labels[appsv1.ControllerRevisionHashLabelKey] = "new"
				rc.pod("shop-2").Status.Conditions[0].Status = corev1.ConditionFalse
			}).input(false),
			rolloutDeletePod, "shop-2", []string{"never became ready"}},
		{"a replica at the current revision that is not ready is no stuck rollout",
			newRollout(3).notReady("shop-2").state("Degraded", "shop-2 unreachable").input(false), rolloutWait, "", []string{"held"}},

		// A single instance restarts in place.
		{"single instance",
			newRollout(1).input(false), rolloutDeletePod, "shop-0", []string{"the only instance", "no replica to switch over to"}},
		{"single instance re-created: done",
			newRollout(1).updated("shop-0").input(false), rolloutNothing, "", nil},
		{"pods past spec.instances (scale-down) are not waited for",
			newRollout(3).updated("shop-1", "shop-2").with(func(rc *rolloutCase) { rc.sts.Spec.Replicas = ptr.To(int32(2)) }).input(false),
			rolloutSwitchover, "shop-1", []string{"1/2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := nextRollout(tc.in)
			if got.Kind != tc.kind || got.Pod != tc.pod {
				t.Fatalf("nextRollout = %s %q (%s), want %s %q", got.Kind, got.Pod, got.Message, tc.kind, tc.pod)
			}
			for _, p := range tc.phrase {
				if !strings.Contains(got.Message, p) {
					t.Errorf("message %q lacks %q", got.Message, p)
				}
			}
			if got.Kind == rolloutDeletePod {
				if want := types.UID("uid-" + got.Pod); got.UID != want {
					t.Errorf("UID precondition %q, want %q", got.UID, want)
				}
			}
			if got.Kind == rolloutSwitchover {
				if got.From != tc.in.Topology.Primary {
					t.Errorf("switchover from %q, want the recorded primary %q", got.From, tc.in.Topology.Primary)
				}
				for _, p := range tc.in.Pods {
					if p.Name == got.Pod && p.Labels[appsv1.ControllerRevisionHashLabelKey] != tc.in.StatefulSet.Status.UpdateRevision {
						t.Errorf("switchover target %s is not at the update revision", got.Pod)
					}
				}
			}
		})
	}
}

// TestRolloutOrder plays a whole rollout of three instances: every step's action is applied
// to the observed state the way the StatefulSet controller and the engine would, and the
// order must be replicas (one at a time, highest first), switchover, former primary.
func TestRolloutOrder(t *testing.T) {
	rc := newRollout(3)
	var steps []string
	for i := 0; i < 10; i++ {
		a := nextRollout(rc.input(false))
		switch a.Kind {
		case rolloutNothing:
			if got, want := strings.Join(steps, " "), "delete:shop-2 delete:shop-1 switchover:shop-1 delete:shop-0"; got != want {
				t.Fatalf("rollout order %q, want %q", got, want)
			}
			return
		case rolloutDeletePod:
			steps = append(steps, "delete:"+a.Pod)
			rc.updated(a.Pod)
			// Right after the restart the replica is not ready, then not caught up. (Once
			// the last pod is updated, the rollout has nothing left to do: the StatefulSet's
			// status tells when that pod is ready, statefulSetSettled.)
			rc.notReady(a.Pod)
			if b := nextRollout(rc.input(false)); a.Pod != "shop-0" && (b.Kind != rolloutWait || !strings.Contains(b.Message, a.Pod)) {
				t.Fatalf("after restarting %s: %s %q, want a wait naming it", a.Pod, b.Kind, b.Message)
			}
			rc.pod(a.Pod).Status.Conditions[0].Status = corev1.ConditionTrue
			if a.Pod != "shop-0" {
				rc.lag(a.Pod, 4)
				if b := nextRollout(rc.input(false)); b.Kind != rolloutWait || !strings.Contains(b.Message, a.Pod+" to be ready and caught up") {
					t.Fatalf("after restarting %s: %s %q, want a wait for its catch-up", a.Pod, b.Kind, b.Message)
				}
				rc.lag(a.Pod, 0)
			}
		case rolloutSwitchover:
			steps = append(steps, "switchover:"+a.Pod)
			rc.primary(a.Pod)
		default:
			t.Fatalf("step %d: %s %q", i, a.Kind, a.Message)
		}
	}
	t.Fatalf("no end after %v", steps)
}

// TestRolloutProgressNamesTheInstance: the Progressing condition says what the rollout waits for.
func TestRolloutProgressNamesTheInstance(t *testing.T) {
	rc := newRollout(3).updated("shop-2").lag("shop-2", 2)
	for i := range rc.pods {
		rc.pods[i].Labels["mysql.dolphin.dev/role"] = "replica"
	}
	rc.pod("shop-0").Labels["mysql.dolphin.dev/role"] = "primary"
	rc.sts.Status.ReadyReplicas, rc.sts.Status.UpdatedReplicas = 3, 1
	st := computeStatus(observation{Generation: 1, Replicas: 3, StatefulSet: rc.sts, Pods: rc.pods,
		Previous: dolphinv1.MySQLClusterStatus{Topology: rc.topo}}, metav1.Now())
	c := meta.FindStatusCondition(st.Conditions, dolphinv1.ConditionProgressing)
	want := "rolling out: waiting for shop-2 to be ready and caught up (2s behind); 1/3 instances updated"
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != "RollingOut" || c.Message != want {
		t.Fatalf("Progressing %+v, want True RollingOut %q", c, want)
	}
	rc.updated("shop-0", "shop-1").lag("shop-2", 0)
	if msg := rolloutProgress(rc.sts, rc.pods, rc.topo, false, false); msg != "" {
		t.Errorf("rolloutProgress after the rollout = %q, want \"\"", msg)
	}
}

// TestEnvtestUpgradeToOnDeleteKeepsPods: a StatefulSet applied by an operator version that
// used RollingUpdate takes OnDelete without a change to its pod template (no restart on
// operator upgrade), and a rollout step deletes one pod per reconcile, only when the engine's
// record shows the cluster healthy, and never the one it already deleted.
func TestEnvtestUpgradeToOnDeleteKeepsPods(t *testing.T) {
	needEnvtest(t)
	ctx := context.Background()
	c := directClient(t, nil)
	ns := newNamespace(t)
	key := createCluster(t, c, ns, "db", dolphinv1.MySQLClusterSpec{Instances: 2})
	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatal(err)
	}
	// The previous operator version's StatefulSet: the same object with RollingUpdate, built
	// at the template generation of that version (1), without the annotations of later ones.
	old, err := resources.StatefulSet(resources.Defaulted(getCluster(t, c, key)), resources.BuildOptions{TemplateGeneration: 1})
	if err != nil {
		t.Fatal(err)
	}
	old.Spec.UpdateStrategy.WithType(appsv1.RollingUpdateStatefulSetStrategyType)
	if err := c.Apply(ctx, old, client.FieldOwner(resources.FieldManager), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	uids := standInStatefulSetController(t, c, key, "rev1")
	var before appsv1.StatefulSet
	if err := c.Get(ctx, key, &before); err != nil {
		t.Fatal(err)
	}
	if before.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
		t.Fatalf("set-up: strategy %+v", before.Spec.UpdateStrategy)
	}

	res, err, reasons := reconcileRecording(t, c, key)
	if err != nil || res.RequeueAfter != 0 {
		t.Fatalf("reconcile after the upgrade: %v %v", res, err)
	}
	var after appsv1.StatefulSet
	if err := c.Get(ctx, key, &after); err != nil {
		t.Fatal(err)
	}
	if after.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType || after.Spec.UpdateStrategy.RollingUpdate != nil {
		t.Errorf("strategy %+v, want OnDelete", after.Spec.UpdateStrategy)
	}
	if !equality.Semantic.DeepEqual(before.Spec.Template, after.Spec.Template) {
		t.Errorf("the pod template changed with the strategy: the StatefulSet controller would restart every pod")
	}
	if slices.Contains(reasons, "RollingRestart") {
		t.Errorf("events %v: a pod was restarted by the operator upgrade", reasons)
	}
	checkPods := func(want map[string]types.UID) {
		t.Helper()
		for name, uid := range want {
			var p corev1.Pod
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &p); err != nil || p.UID != uid || p.DeletionTimestamp != nil {
				t.Errorf("pod %s replaced or deleted: %v %s %v", name, err, p.UID, p.DeletionTimestamp)
			}
		}
	}
	checkPods(uids)

	// A rollout (the stand-in StatefulSet controller reports revision rev2), pods ready, the
	// engine's record Healthy: one reconcile deletes db-1, the next deletes nothing more.
	after.Status.ObservedGeneration, after.Status.UpdateRevision, after.Status.UpdatedReplicas = after.Generation, "rev2", 0
	if err := c.Status().Update(ctx, &after); err != nil {
		t.Fatal(err)
	}
	cl := getCluster(t, c, key)
	patch := client.MergeFrom(cl.DeepCopy())
	cl.Status.Topology = &dolphinv1.TopologyStatus{State: topologyHealthy, Primary: "db-0", Instances: []dolphinv1.InstanceTopology{
		{Name: "db-0", Reachable: true}, {Name: "db-1", Reachable: true, Replicating: true, ReplicationLagSeconds: ptr.To(int64(0))}}}
	if err := c.Status().Patch(ctx, cl, patch); err != nil {
		t.Fatal(err)
	}
	for name := range uids {
		var p corev1.Pod
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &p); err != nil {
			t.Fatal(err)
		}
		ready := client.MergeFrom(p.DeepCopy())
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		if err := c.Status().Patch(ctx, &p, ready); err != nil {
			t.Fatal(err)
		}
	}
	var restarts int
	for range 3 {
		_, err, reasons := reconcileRecording(t, c, key)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range reasons {
			if r == "RollingRestart" {
				restarts++
			}
		}
	}
	if restarts != 1 {
		t.Errorf("%d RollingRestart events, want 1", restarts)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "db-1"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Errorf("db-1 not deleted: %v", err)
	}
	checkPods(map[string]types.UID{"db-0": uids["db-0"]})
	cond := meta.FindStatusCondition(getCluster(t, c, key).Status.Conditions, dolphinv1.ConditionProgressing)
	if cond == nil || cond.Reason != "RollingOut" || !strings.Contains(cond.Message, "waiting for db-1 to be re-created") {
		t.Errorf("Progressing %+v, want RollingOut waiting for db-1", cond)
	}
}
