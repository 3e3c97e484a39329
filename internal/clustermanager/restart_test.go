package clustermanager

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/dolphin-operator/dolphin/internal/topology"
)

// After an unplanned failover Dolphin deletes the lost primary's pod so that it restarts —
// but not a pod the StatefulSet created after the primary was lost (someone deleted the lost
// one during the failover, as the chaos suite's pod-delete-during-failover does): that one is
// already a restart, and deleting it again only delays it.
func TestRestartLostPrimarySparesAPodCreatedAfterTheLoss(t *testing.T) {
	for _, tc := range []struct {
		name        string
		createdAgo  time.Duration
		lostFor     time.Duration // the promotion's Duration
		wantDeleted bool
		// waiting: no promotion; a failover waits for the lost primary (RestartLostPrimary),
		// lost for lostFor (0: this engine did not see it begin).
		waiting bool
	}{
		{"the pod that was lost (created long before)", time.Hour, 5 * time.Second, true, false},
		{"a pod re-created during the failover", 0, 5 * time.Second, false, false},
		// An engine that did not see the loss begin reports no credible duration: the pod
		// is deleted, as it was before this rule (the safe side).
		{"a pod re-created, loss time not credible", 0, time.Duration(math.MaxInt64), true, false},
		{"waiting: the pod that was lost", time.Hour, 5 * time.Second, true, true},
		{"waiting: a pod re-created since the loss", 0, 5 * time.Second, false, true},
		{"waiting: loss time unknown", 0, 0, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scheme := runtime.NewScheme()
			if err := clientgoscheme.AddToScheme(scheme); err != nil {
				t.Fatal(err)
			}
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-0", UID: "u1",
				CreationTimestamp: metav1.NewTime(time.Now().Add(-tc.createdAgo).Truncate(time.Second))}}
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(pod).Build()
			r := &reporter{m: &Manager{Client: c, Log: logr.Discard()}, key: types.NamespacedName{Namespace: "ns", Name: "db"}}
			rep := topology.Report{
				Promotion: &topology.Promotion{From: "db-0", To: "db-1", Duration: tc.lostFor},
				Instances: []topology.InstanceView{{Name: "db-0"}}, // not reachable
			}
			if tc.waiting {
				rep.Promotion, rep.Decision.RestartLostPrimary = nil, "db-0"
				if tc.lostFor > 0 {
					rep.PrimaryLostSince = time.Now().Add(-tc.lostFor)
				}
			}
			if err := r.restartLostPrimary(context.Background(), rep); err != nil {
				t.Fatal(err)
			}
			err := c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "db-0"}, &corev1.Pod{})
			if deleted := apierrors.IsNotFound(err); deleted != tc.wantDeleted {
				t.Fatalf("pod deleted: %v (get: %v), want %v", deleted, err, tc.wantDeleted)
			}
			if r.restart != nil {
				t.Fatalf("restart still pending: %+v", r.restart)
			}
		})
	}
}
