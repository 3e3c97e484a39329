package clustermanager

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/topology"
)

// primaryServiceSelector is the selector the primary Service gets for the roles the engine
// published: the primary's pod by name, or no pod when no instance is published as primary.
// ok is false when the engine published no roles (nothing observed yet): the selector stays
// as it is.
func primaryServiceSelector(cluster string, roles map[string]topology.Role) (selector map[string]string, ok bool) {
	if len(roles) == 0 {
		return nil, false
	}
	for name, role := range roles {
		if role == topology.RolePrimary {
			return resources.PrimaryPodSelector(cluster, name), true
		}
	}
	return resources.PrimaryPodSelector(cluster, ""), true
}

// pointPrimaryService points the primary Service at the pod the engine published as primary,
// before the role labels move: a change of primary is then one change of the Service's
// selector, which reaches kube-proxy as one EndpointSlice write, instead of two pod label
// changes that kube-proxy applies at least its minSyncPeriod apart (docs/design/0050). The
// selector is applied with the topology reporter's own field manager, which takes it over
// from the reconciler (resources.PrimaryService leaves it out from then on).
func (r *reporter) pointPrimaryService(ctx context.Context, rep topology.Report) error {
	want, ok := primaryServiceSelector(r.key.Name, rep.Roles)
	if !ok {
		return nil
	}
	name := resources.NamesFor(&dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Name: r.key.Name}}).PrimaryService
	var svc corev1.Service
	switch err := r.m.Client.Get(ctx, types.NamespacedName{Namespace: r.key.Namespace, Name: name}, &svc); {
	case apierrors.IsNotFound(err):
		return nil // the reconciler creates it
	case err != nil:
		return fmt.Errorf("reading Service %s: %w", name, err)
	}
	wantPod, _ := resources.SelectsOnePod(want)
	oldPod, _ := resources.SelectsOnePod(svc.Spec.Selector)
	if maps.Equal(svc.Spec.Selector, want) {
		r.serviceSelects = wantPod
		return nil
	}
	apply := corev1ac.Service(name, r.key.Namespace).WithSpec(corev1ac.ServiceSpec().WithSelector(want))
	if err := r.m.Client.Apply(ctx, apply, client.FieldOwner(resources.TopologyFieldManager), client.ForceOwnership); err != nil {
		r.serviceSelects = oldPod
		return fmt.Errorf("pointing Service %s at %v: %w", name, want, err)
	}
	r.m.Log.Info("primary Service moved", "cluster", r.key.String(), "from", podOrNone(oldPod), "to", podOrNone(wantPod))
	if oldPod != "" && oldPod != wantPod {
		if r.serviceLeft == nil {
			r.serviceLeft = map[string]time.Time{}
		}
		r.serviceLeft[oldPod] = time.Now()
	}
	r.serviceSelects = wantPod
	return nil
}

// withoutPrimary returns roles with no instance published as primary: the primary Service
// then selects no pod.
func withoutPrimary(roles map[string]topology.Role) map[string]topology.Role {
	out := make(map[string]topology.Role, len(roles))
	for name, role := range roles {
		if role == topology.RolePrimary {
			role = topology.RoleNone
		}
		out[name] = role
	}
	return out
}

// podOrNone names a pod a Service selects, or says it selects none.
func podOrNone(pod string) string {
	if pod == "" {
		return "(no pod)"
	}
	return pod
}
