package controller

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// TestFollowVerificationReadsAPodTheCacheHasNotSeen: the verification pod was just created and
// the cache has not seen it yet (the status update that recorded it wakes the reconcile at
// once): the check goes on rather than end Failed with "disappeared" (seen once in the e2e
// TestLocalBackupAndRestore right after an operator restart). Gone from the API server too,
// it ends Failed.
func TestFollowVerificationReadsAPodTheCacheHasNotSeen(t *testing.T) {
	sch := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{dolphinv1.AddToScheme, corev1.AddToScheme} {
		if err := add(sch); err != nil {
			t.Fatal(err)
		}
	}
	now := metav1.Now()
	backup := func() *dolphinv1.MySQLBackup {
		return &dolphinv1.MySQLBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b1"},
			Status: dolphinv1.MySQLBackupStatus{Verification: &dolphinv1.BackupVerificationStatus{
				Phase: dolphinv1.VerificationRunning, Request: "1", Pod: "b1-verify", StartTime: &now}}}
	}
	running := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b1-verify"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	ctx := context.Background()

	for _, tc := range []struct {
		name     string
		live     []client.Object
		want     dolphinv1.VerificationPhase
		requeued bool
	}{
		{name: "in the API server, not yet in the cache", live: []client.Object{running}, want: dolphinv1.VerificationRunning, requeued: true},
		{name: "gone from both", want: dolphinv1.VerificationFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := backup()
			cached := fake.NewClientBuilder().WithScheme(sch).WithObjects(b).WithStatusSubresource(b).Build()
			live := fake.NewClientBuilder().WithScheme(sch).WithObjects(tc.live...).Build()
			r := &MySQLBackupReconciler{Client: cached, APIReader: live}
			res, err := r.followVerification(ctx, b)
			if err != nil {
				t.Fatal(err)
			}
			var got dolphinv1.MySQLBackup
			if err := cached.Get(ctx, client.ObjectKeyFromObject(b), &got); err != nil {
				t.Fatal(err)
			}
			if got.Status.Verification == nil || got.Status.Verification.Phase != tc.want || (res.RequeueAfter > 0) != tc.requeued {
				t.Errorf("verification %+v, requeue %v: want phase %s, requeued %v", got.Status.Verification, res.RequeueAfter, tc.want, tc.requeued)
			}
		})
	}
}
