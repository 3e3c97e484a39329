package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// TestEnvtestPodStartRetriesAPodTheKubeletSetAside: envtest runs no kubelet, so the test writes
// what a kubelet writes after a first sync that failed on a volume race (PodReadyToStartContainers
// False, the pod Pending) on three pods of a cluster: db-0 with its claim Bound, db-1 with its
// claim still Pending, db-2 with its sandbox ready. Only db-0 gets the retry annotation (and
// an event); the step asks to look again when the next retry could be due; a second run right
// after changes nothing; once db-1's claim is Bound, db-1 is retried too. (That the annotation
// makes a real kubelet sync at once is checked on a real node: internal/realnode, kubeletRetriesOnAnAnnotation.)
func TestEnvtestPodStartRetriesAPodTheKubeletSetAside(t *testing.T) {
	needEnvtest(t)
	ctx := context.Background()
	c := directClient(t, nil)
	ns := newNamespace(t)
	key := createCluster(t, c, ns, "db", dolphinv1.MySQLClusterSpec{Instances: 3})
	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatal(err)
	}
	var sts appsv1.StatefulSet
	if err := c.Get(ctx, key, &sts); err != nil {
		t.Fatal(err)
	}
	tmpl := sts.Spec.VolumeClaimTemplates[0]
	seen := metav1.NewTime(time.Now().Add(-3 * time.Second)) // the kubelet's first sync
	claimPhase := map[string]corev1.PersistentVolumeClaimPhase{"db-0": corev1.ClaimBound, "db-1": corev1.ClaimPending, "db-2": corev1.ClaimBound}
	for i := range 3 {
		name := fmt.Sprintf("db-%d", i)
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: tmpl.Name + "-" + name, Labels: tmpl.Labels},
			Spec:       *tmpl.Spec.DeepCopy(),
		}
		if err := c.Create(ctx, pvc); err != nil {
			t.Fatal(err)
		}
		pvc.Status.Phase = claimPhase[name]
		if err := c.Status().Update(ctx, pvc); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: sts.Spec.Template.Labels},
			Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "mysqld", Image: "mariadb"}},
				Volumes: []corev1.Volume{{Name: tmpl.Name, VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name}}}}},
		}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		sandbox := corev1.ConditionFalse
		if name == "db-2" {
			sandbox = corev1.ConditionTrue
		}
		pod.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: seen},
			{Type: corev1.PodReadyToStartContainers, Status: sandbox, LastTransitionTime: seen},
		}}
		if err := c.Status().Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}

	rec := events.NewFakeRecorder(100)
	r := &MySQLClusterReconciler{Client: c, Scheme: envScheme, Recorder: rec}
	now := time.Now() // the runs' times are given: a slow machine does not change what is due
	run := func(at time.Time) (stepOutcome, map[string]string) {
		t.Helper()
		var out stepOutcome
		r.retryPodStarts(ctrl.LoggerInto(ctx, ctrl.Log), getCluster(t, c, key), &out, at)
		return out, retryAnnotations(t, c, ns)
	}

	out, got := run(now)
	if got["db-0"] == "" || got["db-1"] != "" || got["db-2"] != "" {
		t.Fatalf("retry annotations %v: want db-0's only (db-1's claim Pending, db-2's sandbox ready)", got)
	}
	if out.requeueAfter <= 0 || out.requeueAfter > kubeletRetryAfter {
		t.Errorf("asked to look again after %v, want within %v", out.requeueAfter, kubeletRetryAfter)
	}
	select {
	case e := <-rec.Events:
		if !strings.Contains(e, "KubeletRetry") || !strings.Contains(e, "db-0") {
			t.Errorf("event %q, want KubeletRetry about db-0", e)
		}
	default:
		t.Error("no event for the retry")
	}

	first := got["db-0"]
	out, got = run(now.Add(500 * time.Millisecond))
	if got["db-0"] != first || got["db-1"] != "" {
		t.Errorf("a second run 0.5 s later retried again: %v (first %q)", got, first)
	}
	if want := kubeletRetryAfter - 500*time.Millisecond; out.requeueAfter != want {
		t.Errorf("second run: asked to look again after %v, want %v (when db-0's next retry is due)", out.requeueAfter, want)
	}
	select {
	case e := <-rec.Events:
		t.Errorf("the second run recorded an event: %q", e)
	default:
	}
	if _, got = run(now.Add(kubeletRetryAfter)); got["db-0"] == first {
		t.Errorf("db-0's sandbox still not ready %v after the first retry: want another, annotations %v", kubeletRetryAfter, got)
	}

	var claim corev1.PersistentVolumeClaim
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: tmpl.Name + "-db-1"}, &claim); err != nil {
		t.Fatal(err)
	}
	claim.Status.Phase = corev1.ClaimBound
	if err := c.Status().Update(ctx, &claim); err != nil {
		t.Fatal(err)
	}
	if _, got = run(now.Add(kubeletRetryAfter + time.Second)); got["db-1"] == "" {
		t.Errorf("db-1's claim is Bound now: want it retried, annotations %v", got)
	}
}

// retryAnnotations maps each pod of ns to its KubeletRetryAnnotation.
func retryAnnotations(t *testing.T, c client.Client, ns string) map[string]string {
	t.Helper()
	var pods corev1.PodList
	if err := c.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range pods.Items {
		out[p.Name] = p.Annotations[resources.KubeletRetryAnnotation]
	}
	return out
}
