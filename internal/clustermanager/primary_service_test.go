package clustermanager

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/topology"
)

// The primary Service follows the published primary by pod name, names no pod when none is
// published, and is left alone before the engine has published anything.
func TestPrimaryServiceSelectorFollowsThePublishedPrimary(t *testing.T) {
	cases := []struct {
		name    string
		roles   map[string]topology.Role
		wantPod string
		wantOK  bool
	}{
		{"nothing published yet", nil, "", false},
		{"a primary", map[string]topology.Role{"db-0": topology.RoleReplica, "db-1": topology.RolePrimary, "db-2": topology.RoleNone}, "db-1", true},
		{"no primary", map[string]topology.Role{"db-0": topology.RoleNone, "db-1": topology.RoleReplica}, "", true},
	}
	for _, tc := range cases {
		sel, ok := primaryServiceSelector("db", tc.roles)
		if ok != tc.wantOK {
			t.Fatalf("%s: ok %v, want %v", tc.name, ok, tc.wantOK)
		}
		if !ok {
			continue
		}
		if want := resources.PrimaryPodSelector("db", tc.wantPod); !maps.Equal(sel, want) {
			t.Errorf("%s: selector %v, want %v", tc.name, sel, want)
		}
		if pod, onePod := resources.SelectsOnePod(sel); !onePod || pod != tc.wantPod {
			t.Errorf("%s: selects pod %q (one-pod form %v), want %q", tc.name, pod, onePod, tc.wantPod)
		}
	}
}

// A promotion whose record cannot be written (the API refuses the status) publishes no new
// primary, and takes the lost primary out of the primary Service: it may have been kept there
// until this promotion (docs/design/0050), and a silent one that comes back would take writes.
func TestPromotionNotRecordedWithdrawsThePrimaryService(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-primary"},
		Spec: corev1.ServiceSpec{Selector: resources.PrimaryPodSelector("db", "db-0")}}
	// No MySQLCluster: writing status.topology fails.
	r, c := fakeReporter(t, svc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r.Report(ctx, topology.Report{
		Promotion: &topology.Promotion{From: "db-0", To: "db-1", Duration: 2 * time.Second},
		Roles:     map[string]topology.Role{"db-0": topology.RoleNone, "db-1": topology.RolePrimary, "db-2": topology.RoleReplica},
		Instances: []topology.InstanceView{{Name: "db-0"}},
	})
	if !r.pendingPromotion() {
		t.Fatal("the promotion was recorded although the cluster does not exist")
	}
	var got corev1.Service
	if err := c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "db-primary"}, &got); err != nil {
		t.Fatal(err)
	}
	if want := resources.PrimaryPodSelector("db", ""); !maps.Equal(got.Spec.Selector, want) {
		t.Fatalf("primary Service selects %v, want %v (no pod until the promotion is recorded)", got.Spec.Selector, want)
	}
}

// A promotion's report moves the primary Service and restarts the replaced primary's pod —
// but only serviceDrain after the Service stopped selecting it: kube-proxy applies the move up
// to its minSyncPeriod later, and a client reconnecting meanwhile to a pod being deleted waits
// for its SYN retries (the chaos suite's sysbench, ~2 min).
func TestReplacedPrimaryRestartsOnlyOnceTheServiceLeftIt(t *testing.T) {
	cluster := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db"}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-primary"},
		Spec: corev1.ServiceSpec{Selector: resources.PrimaryPodSelector("db", "db-0")}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-0", UID: "u0",
		CreationTimestamp: metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))}}
	r, c := fakeReporter(t, cluster, svc, pod)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	roles := map[string]topology.Role{"db-0": topology.RoleNone, "db-1": topology.RolePrimary, "db-2": topology.RoleReplica}
	lost := []topology.InstanceView{{Name: "db-0"}} // not reachable
	r.Report(ctx, topology.Report{Promotion: &topology.Promotion{From: "db-0", To: "db-1", Duration: 2 * time.Second},
		Roles: roles, Instances: lost})
	var got corev1.Service
	if err := c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "db-primary"}, &got); err != nil {
		t.Fatal(err)
	}
	if want := resources.PrimaryPodSelector("db", "db-1"); !maps.Equal(got.Spec.Selector, want) {
		t.Fatalf("primary Service selects %v, want %v", got.Spec.Selector, want)
	}
	exists := func() bool {
		err := c.Get(ctx, types.NamespacedName{Namespace: "ns", Name: "db-0"}, &corev1.Pod{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	if !exists() {
		t.Fatal("db-0's pod was deleted in the report that moved the Service away from it")
	}
	r.Report(ctx, topology.Report{Roles: roles, Instances: lost})
	if !exists() {
		t.Fatal("db-0's pod was deleted less than serviceDrain after the Service left it")
	}
	r.serviceLeft["db-0"] = time.Now().Add(-serviceDrain - time.Second) // as if the drain had passed
	r.Report(ctx, topology.Report{Roles: roles, Instances: lost})
	if exists() {
		t.Fatal("db-0's pod was not deleted once the drain had passed")
	}
}

// fakeReporter is the reporter of cluster ns/db on a fake API holding objs.
func fakeReporter(t *testing.T, objs ...client.Object) (*reporter, client.Client) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := dolphinv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&dolphinv1.MySQLCluster{}).Build()
	return &reporter{m: &Manager{Client: c, Log: logr.Discard()}, key: types.NamespacedName{Namespace: "ns", Name: "db"}}, c
}
