package controller

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// TestEnvtestPlannedWorkIsNotDegraded: through the real API server, a 3-instance cluster whose
// third pod is still initializing (a clone runs in its seed container) is Progressing, with
// Degraded False (PlannedChange); the same pod once its server has restarted four times is
// trouble: phase Degraded, Degraded True naming the container and the restarts.
func TestEnvtestPlannedWorkIsNotDegraded(t *testing.T) {
	needEnvtest(t)
	c := directClient(t, nil)
	ctx := context.Background()
	key := createCluster(t, c, newNamespace(t), "plan", dolphinv1.MySQLClusterSpec{Instances: 3})
	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatal(err)
	}
	cluster := getCluster(t, c, key)
	pod := func(i int, role string, status corev1.PodStatus) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: resources.PodName(cluster, i), Labels: resources.CommonLabels(cluster)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: resources.ContainerMySQLD, Image: "mariadb"}}}}
		if role != "" {
			p.Labels[resources.RoleLabel] = role
		}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		p.Status = status
		if err := c.Status().Update(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ready := corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: resources.ContainerMySQLD, Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}}
	pod(0, "primary", ready)
	pod(1, "replica", ready)
	third := pod(2, "", corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{{Name: resources.ContainerSeed,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}})

	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatal(err)
	}
	st := getCluster(t, c, key).Status
	d := meta.FindStatusCondition(st.Conditions, dolphinv1.ConditionDegraded)
	if st.Phase != dolphinv1.PhaseProgressing || d == nil || d.Status != metav1.ConditionFalse || d.Reason != "PlannedChange" ||
		!meta.IsStatusConditionTrue(st.Conditions, dolphinv1.ConditionProgressing) {
		t.Fatalf("a clone in progress: phase %s, Degraded %+v, conditions %+v; want Progressing, Degraded False/PlannedChange", st.Phase, d, st.Conditions)
	}

	third.Status = corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: resources.ContainerMySQLD, RestartCount: 4,
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1}},
		State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}}
	if err := c.Status().Update(ctx, third); err != nil {
		t.Fatal(err)
	}
	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatal(err)
	}
	st = getCluster(t, c, key).Status
	d = meta.FindStatusCondition(st.Conditions, dolphinv1.ConditionDegraded)
	if st.Phase != dolphinv1.PhaseDegraded || d == nil || d.Status != metav1.ConditionTrue || !strings.Contains(d.Message, "restarted 4 times") {
		t.Fatalf("a crash-looping server: phase %s, Degraded %+v; want Degraded True naming the restarts", st.Phase, d)
	}
}
