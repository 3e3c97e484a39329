package controller

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dolphin-operator/dolphin/internal/resources"
)

// startingPod is a pod the kubelet of node n saw at since: Pending, its sandbox not ready.
func startingPod(since time.Time) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "db-0"},
		Spec: corev1.PodSpec{NodeName: "n", Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-db-0"}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(since.Add(-time.Second))},
			{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(since)},
		}},
	}
}

func TestKubeletRetryDue(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	type want struct {
		retry     bool
		lookAgain time.Duration
	}
	cases := []struct {
		name string
		pod  func() *corev1.Pod
		now  time.Time
		want want
	}{
		{"just seen: look again when due", func() *corev1.Pod { return startingPod(t0) }, t0.Add(500 * time.Millisecond),
			want{false, 1500 * time.Millisecond}},
		{"sandbox not ready past the wait: retry", func() *corev1.Pod { return startingPod(t0) }, t0.Add(kubeletRetryAfter),
			want{true, 0}},
		{"retried a second ago: wait for the retry", func() *corev1.Pod {
			p := startingPod(t0)
			p.Annotations = map[string]string{resources.KubeletRetryAnnotation: t0.Add(4 * time.Second).Format(time.RFC3339Nano)}
			return p
		}, t0.Add(5 * time.Second), want{false, time.Second}},
		{"retried long enough ago: again", func() *corev1.Pod {
			p := startingPod(t0)
			p.Annotations = map[string]string{resources.KubeletRetryAnnotation: t0.Add(4 * time.Second).Format(time.RFC3339Nano)}
			return p
		}, t0.Add(6 * time.Second), want{true, 0}},
		{"past the window: the kubelet's own retries", func() *corev1.Pod { return startingPod(t0) }, t0.Add(kubeletRetryWindow + time.Second),
			want{false, 0}},
		{"sandbox ready", func() *corev1.Pod {
			p := startingPod(t0)
			p.Status.Conditions[1].Status = corev1.ConditionTrue
			return p
		}, t0.Add(5 * time.Second), want{false, 0}},
		{"kubelet has not seen it (no condition)", func() *corev1.Pod {
			p := startingPod(t0)
			p.Status.Conditions = p.Status.Conditions[:1]
			return p
		}, t0.Add(5 * time.Second), want{false, 0}},
		{"not scheduled", func() *corev1.Pod {
			p := startingPod(t0)
			p.Spec.NodeName = ""
			return p
		}, t0.Add(5 * time.Second), want{false, 0}},
		{"running (a sandbox lost later is the kubelet's)", func() *corev1.Pod {
			p := startingPod(t0)
			p.Status.Phase = corev1.PodRunning
			return p
		}, t0.Add(5 * time.Second), want{false, 0}},
		{"being deleted", func() *corev1.Pod {
			p := startingPod(t0)
			p.DeletionTimestamp = &metav1.Time{Time: t0}
			return p
		}, t0.Add(5 * time.Second), want{false, 0}},
		{"node clock a little ahead: counted from now", func() *corev1.Pod { return startingPod(t0.Add(time.Second)) }, t0,
			want{false, kubeletRetryAfter}},
		{"node clock well ahead: left to the kubelet", func() *corev1.Pod { return startingPod(t0.Add(10 * time.Second)) }, t0,
			want{false, 0}},
		{"last retry near the window's end: no more", func() *corev1.Pod {
			p := startingPod(t0)
			p.Annotations = map[string]string{resources.KubeletRetryAnnotation: t0.Add(kubeletRetryWindow - time.Second).Format(time.RFC3339Nano)}
			return p
		}, t0.Add(kubeletRetryWindow - time.Second/2), want{false, 0}},
		{"retry dated ahead by hand: no wait past the window", func() *corev1.Pod {
			p := startingPod(t0)
			p.Annotations = map[string]string{resources.KubeletRetryAnnotation: t0.Add(time.Hour).Format(time.RFC3339Nano)}
			return p
		}, t0.Add(3 * time.Second), want{false, 0}},
		{"unreadable annotation: as if never retried", func() *corev1.Pod {
			p := startingPod(t0)
			p.Annotations = map[string]string{resources.KubeletRetryAnnotation: "soon"}
			return p
		}, t0.Add(3 * time.Second), want{true, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			retry, lookAgain := kubeletRetryDue(tc.pod(), tc.now)
			if got := (want{retry, lookAgain}); got != tc.want {
				t.Errorf("got retry=%v lookAgain=%v, want retry=%v lookAgain=%v", retry, lookAgain, tc.want.retry, tc.want.lookAgain)
			}
		})
	}
}

func TestClaimsBoundFor(t *testing.T) {
	pod := startingPod(time.Now())
	claim := func(name string, phase corev1.PersistentVolumeClaimPhase) corev1.PersistentVolumeClaim {
		return corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PersistentVolumeClaimStatus{Phase: phase}}
	}
	if !claimsBoundFor(pod, []corev1.PersistentVolumeClaim{claim("data-db-1", corev1.ClaimPending), claim("data-db-0", corev1.ClaimBound)}) {
		t.Error("the pod's claim is Bound: want true")
	}
	if claimsBoundFor(pod, []corev1.PersistentVolumeClaim{claim("data-db-0", corev1.ClaimPending)}) {
		t.Error("the pod's claim is Pending: want false")
	}
	if claimsBoundFor(pod, []corev1.PersistentVolumeClaim{claim("data-db-1", corev1.ClaimBound)}) {
		t.Error("the pod's claim is not known: want false")
	}
	noClaims := startingPod(time.Now())
	noClaims.Spec.Volumes = nil
	if !claimsBoundFor(noClaims, nil) {
		t.Error("a pod without claims: want true")
	}
}
