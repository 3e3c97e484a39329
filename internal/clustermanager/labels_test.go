package clustermanager

import (
	"context"
	"errors"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/topology"
)

// labeledPods is a fake API with pods db-0 (labeled primary), db-1 and db-2 (replicas); patches
// are recorded in order, and fail for the pods in failing.
func labeledPods(t *testing.T, failing map[string]bool) (*reporter, *[]string, client.Client) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var objs []client.Object
	for name, role := range map[string]string{"db-0": "primary", "db-1": "replica", "db-2": "replica"} {
		objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
			Labels: map[string]string{resources.RoleLabel: role}}})
	}
	var order []string
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			order = append(order, obj.GetName())
			if failing[obj.GetName()] {
				return errors.New("API server unavailable")
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	}).Build()
	r := &reporter{m: &Manager{Client: c, Log: logr.Discard()}, key: types.NamespacedName{Namespace: "ns", Name: "db"}}
	return r, &order, c
}

func roleOf(t *testing.T, c client.Client, name string) string {
	t.Helper()
	var p corev1.Pod
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	return p.Labels[resources.RoleLabel]
}

// A switchover from db-0 to db-2 takes the primary label off db-0 before putting it on db-2:
// never two pods labeled primary, so the primary Service never sends a reader to the old one.
func TestLabelsMoveThePrimaryLast(t *testing.T) {
	roles := map[string]topology.Role{"db-0": topology.RoleReplica, "db-1": topology.RoleReplica, "db-2": topology.RolePrimary}
	for range 20 { // map order varies from run to run
		r, order, c := labeledPods(t, nil)
		if err := r.label(context.Background(), topology.Report{Roles: roles}); err != nil {
			t.Fatal(err)
		}
		if len(*order) != 2 || (*order)[0] != "db-0" || (*order)[1] != "db-2" {
			t.Fatalf("patches in order %v, want db-0 (demoted) then db-2 (promoted)", *order)
		}
		if roleOf(t, c, "db-0") != "replica" || roleOf(t, c, "db-2") != "primary" {
			t.Fatalf("labels db-0=%s db-2=%s", roleOf(t, c, "db-0"), roleOf(t, c, "db-2"))
		}
	}
}

// When the old primary's label cannot be removed, the new primary is not labeled either (the
// next report tries again): a Service without an endpoint for a moment, never with two.
func TestLabelsNoSecondPrimaryWhileTheOldKeepsItsLabel(t *testing.T) {
	r, _, c := labeledPods(t, map[string]bool{"db-0": true})
	roles := map[string]topology.Role{"db-0": topology.RoleReplica, "db-1": topology.RoleReplica, "db-2": topology.RolePrimary}
	if err := r.label(context.Background(), topology.Report{Roles: roles}); err == nil {
		t.Fatal("no error although the old primary kept its label")
	}
	if got := roleOf(t, c, "db-2"); got != "replica" {
		t.Fatalf("db-2 labeled %q while db-0 is still labeled primary", got)
	}
}
