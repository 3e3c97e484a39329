package clustermanager

import (
	"context"
	"errors"
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

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
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

// A replaced primary's pod that holds its stop for a switchover is released through its agent
// before Dolphin deletes it, so its server stops the moment the deletion reaches the node (a
// hung primary resuming inside the hold would be fenced, and a fence lets it commit what was
// waiting for an acknowledgement); a pod without the hold is deleted without a call, and a
// release that fails does not keep the pod from being deleted.
func TestRestartLostPrimaryReleasesTheHoldFirst(t *testing.T) {
	for _, tc := range []struct {
		name        string
		hook        bool
		releaseErr  error
		wantRelease bool
	}{
		{"a pod that holds its stop", true, nil, true},
		{"a pod that holds its stop, agent unreachable", true, errors.New("dial: refused"), true},
		{"a pod without the hold", false, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scheme := runtime.NewScheme()
			if err := clientgoscheme.AddToScheme(scheme); err != nil {
				t.Fatal(err)
			}
			if err := dolphinv1.AddToScheme(scheme); err != nil {
				t.Fatal(err)
			}
			mysqld := corev1.Container{Name: resources.ContainerMySQLD}
			if tc.hook {
				mysqld.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
			}
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-0", UID: "u1",
				CreationTimestamp: metav1.NewTime(time.Now().Add(-time.Hour))},
				Spec: corev1.PodSpec{Containers: []corev1.Container{mysqld}}}
			cluster := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db"}}
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(pod, cluster).Build()
			var released []string
			release := func(ctx context.Context, rc *dolphinv1.MySQLCluster, p *corev1.Pod) error {
				if err := c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: p.Name}, &corev1.Pod{}); err != nil {
					t.Errorf("released %s after its deletion: %v", p.Name, err)
				}
				released = append(released, rc.Name+"/"+p.Name)
				return tc.releaseErr
			}
			r := &reporter{m: &Manager{Client: c, Log: logr.Discard(), ReleaseStop: release}, key: types.NamespacedName{Namespace: "ns", Name: "db"}}
			rep := topology.Report{
				Promotion: &topology.Promotion{From: "db-0", To: "db-1", Duration: 5 * time.Second},
				Instances: []topology.InstanceView{{Name: "db-0"}}, // not reachable
			}
			if err := r.restartLostPrimary(context.Background(), rep); err != nil {
				t.Fatal(err)
			}
			if err := c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: "db-0"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
				t.Fatalf("the replaced primary's pod was not deleted: %v", err)
			}
			if want := tc.wantRelease; (len(released) == 1 && released[0] == "db/db-0") != want || len(released) > 1 {
				t.Fatalf("released %v, want a release of db/db-0: %v", released, want)
			}
		})
	}
}
