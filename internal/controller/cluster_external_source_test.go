package controller

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// seedPod is an instance pod whose seed container is in state now after last, restarted n times.
func seedPod(name string, now, last corev1.ContainerState, n int32) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{
		InitContainerStatuses: []corev1.ContainerStatus{{Name: resources.ContainerSeed, State: now, LastTerminationState: last, RestartCount: n}}}}
}

// TestExternalCopyOutcome: a failed copy is reported while the cluster has no primary, with
// the attempts left; after externalCopyAttempts it says Dolphin stopped and how to try again
// (and the first instance is not instructed again); a copy that failed and then succeeded,
// or a cluster that has its primary, reports nothing; a clone of the first instance that
// fails says so.
func TestExternalCopyOutcome(t *testing.T) {
	c := &dolphinv1.MySQLCluster{}
	c.Name = "db"
	c.Spec.Bootstrap = &dolphinv1.BootstrapSpec{External: &dolphinv1.ExternalSource{Host: "old", AccountSecretName: "s"}}
	c.Status.Conditions = []metav1.Condition{{Type: dolphinv1.ConditionExternalSourceReady, Status: metav1.ConditionTrue}}
	failed := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: "dolphin-seed: mariadb-dump failed: Lost connection"}}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	succeeded := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}
	for _, tc := range []struct {
		name    string
		pods    []corev1.Pod
		primary string
		want    string // "" for no error
	}{
		{"retrying", []corev1.Pod{seedPod("db-0", running, failed, 1)}, "", "it tries again (at most 3 times)"},
		{"given up", []corev1.Pod{seedPod("db-0", corev1.ContainerState{}, failed, 3)}, "", "delete pod db-0 to try again"},
		{"failed, then succeeded", []corev1.Pod{seedPod("db-0", succeeded, failed, 1)}, "", ""},
		{"established", []corev1.Pod{seedPod("db-0", running, failed, 1)}, "db-0", ""},
		{"a clone of the first fails", []corev1.Pod{seedPod("db-0", succeeded, corev1.ContainerState{}, 0), seedPod("db-1", running, failed, 1)}, "", "cloning db-1 from db-0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc := c.DeepCopy()
			if tc.primary != "" {
				cc.Status.Topology = &dolphinv1.TopologyStatus{Primary: tc.primary}
			}
			err := externalCopyOutcome(cc, tc.pods)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("error %v, want none", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	first := seedPod("db-0", corev1.ContainerState{}, failed, externalCopyAttempts)
	if plan, wait := decideSeed(c, []corev1.Pod{first}, &first); !strings.Contains(wait, "delete pod db-0") {
		t.Errorf("after %d failed copies: plan %+v wait %q, want no instruction", externalCopyAttempts, plan, wait)
	}
}
