package controller

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// Growing spec.storage.size (docs/design/0012-storage-growth.md). A StatefulSet's claim
// templates are immutable, so the storage step grows the existing claims itself, then
// replaces the StatefulSet (deleted with orphan propagation: pods and claims stay) so that
// the re-created one carries the new template. The pod template does not change, so the
// re-created StatefulSet adopts the running pods at the same revision and restarts none.
// Until the storage step has done so, the statefulset step keeps the live template's size,
// so that its apply never hits the immutable field and the steps after it still run.

// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get;list;watch

// dataTemplate is the name of the StatefulSet's data claim template (resources.dataClaim);
// the StatefulSet controller names each instance's claim <template>-<pod>.
const dataTemplate = "data"

// reasonStorageNotExpandable is the condition reason when the data volumes cannot grow.
const reasonStorageNotExpandable = "StorageNotExpandable"

// dataClaimName is the name of the data claim of the instance pod `pod`.
func dataClaimName(pod string) string { return dataTemplate + "-" + pod }

// claimOrdinal returns the instance ordinal of a data claim of cluster, if name is one.
func claimOrdinal(cluster, name string) (int, bool) {
	suffix, ok := strings.CutPrefix(name, dataClaimName(cluster)+"-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(suffix)
	if err != nil || n < 0 || strconv.Itoa(n) != suffix {
		return 0, false
	}
	return n, true
}

// claimTemplateSize is the storage request of a StatefulSet's data claim template.
func claimTemplateSize(sts *appsv1.StatefulSet) (resource.Quantity, bool) {
	for _, t := range sts.Spec.VolumeClaimTemplates {
		if t.Name == dataTemplate {
			q, ok := t.Spec.Resources.Requests[corev1.ResourceStorage]
			return q, ok
		}
	}
	return resource.Quantity{}, false
}

// requestsAtLeast reports whether a claim's storage request is at least want.
func requestsAtLeast(pvc *corev1.PersistentVolumeClaim, want resource.Quantity) bool {
	q := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	return q.Cmp(want) >= 0
}

func claimCapacity(pvc *corev1.PersistentVolumeClaim) (resource.Quantity, bool) {
	q, ok := pvc.Status.Capacity[corev1.ResourceStorage]
	return q, ok
}

// claimClass is the StorageClass of a claim as the API server's resize admission sees it:
// the legacy beta annotation, else spec.storageClassName ("" for none).
func claimClass(pvc *corev1.PersistentVolumeClaim) string {
	if class, ok := pvc.Annotations[corev1.BetaStorageClassAnnotation]; ok {
		return class
	}
	if pvc.Spec.StorageClassName != nil {
		return *pvc.Spec.StorageClassName
	}
	return ""
}

// storagePlan is what the storage step has to do to reach the desired size.
type storagePlan struct {
	// Grow are the bound claims whose request is below the desired size.
	Grow []string
	// Unbound are claims below the desired size that are not bound yet: Kubernetes expands
	// only bound claims, so they are grown once bound (their binding triggers a reconcile).
	Unbound []string
	// ReplaceStatefulSet is true when the StatefulSet's claim template is below the size.
	ReplaceStatefulSet bool
}

// empty reports whether there is nothing to do.
func (p storagePlan) empty() bool {
	return len(p.Grow) == 0 && len(p.Unbound) == 0 && !p.ReplaceStatefulSet
}

// planStorage decides what growing to want needs, from the live claim template size and the
// cluster's data claims. It never shrinks anything.
func planStorage(want, template resource.Quantity, claims []corev1.PersistentVolumeClaim) storagePlan {
	var p storagePlan
	for i := range claims {
		pvc := &claims[i]
		if pvc.DeletionTimestamp != nil || requestsAtLeast(pvc, want) {
			continue
		}
		if pvc.Status.Phase == corev1.ClaimBound {
			p.Grow = append(p.Grow, pvc.Name)
		} else {
			p.Unbound = append(p.Unbound, pvc.Name)
		}
	}
	sort.Strings(p.Grow)
	sort.Strings(p.Unbound)
	p.ReplaceStatefulSet = template.Cmp(want) < 0
	return p
}

// notExpandable checks that every claim named in names belongs to a StorageClass that
// allows volume expansion. classes holds the classes read (nil for one that does not
// exist). It returns nil when all can grow, otherwise a userError saying what to change.
func notExpandable(claims []corev1.PersistentVolumeClaim, names []string, classes map[string]*storagev1.StorageClass,
	from, want resource.Quantity,
) *userError {
	named := make(map[string]bool, len(names))
	for _, n := range names {
		named[n] = true
	}
	noClass, byClass := []string{}, map[string][]string{}
	for i := range claims {
		pvc := &claims[i]
		if !named[pvc.Name] {
			continue
		}
		class := claimClass(pvc)
		switch sc := classes[class]; {
		case class == "":
			noClass = append(noClass, pvc.Name)
		case sc == nil || sc.AllowVolumeExpansion == nil || !*sc.AllowVolumeExpansion:
			byClass[class] = append(byClass[class], pvc.Name)
		}
	}
	if len(noClass) == 0 && len(byClass) == 0 {
		return nil
	}
	var parts []string
	for _, class := range sortedKeys(byClass) {
		how := "set allowVolumeExpansion: true on it (if its provisioner supports expansion)"
		if classes[class] == nil {
			how = "it does not exist; create it with allowVolumeExpansion: true"
		}
		parts = append(parts, fmt.Sprintf("StorageClass %q of %s does not allow volume expansion: %s",
			class, strings.Join(byClass[class], ", "), how))
	}
	if len(noClass) > 0 {
		sort.Strings(noClass)
		parts = append(parts, fmt.Sprintf("%s have no StorageClass, and Kubernetes expands only claims whose "+
			"StorageClass sets allowVolumeExpansion: true: grow their volumes outside Kubernetes, or restore into a "+
			"new cluster", strings.Join(noClass, ", ")))
	}
	return &userError{Reason: reasonStorageNotExpandable, Message: fmt.Sprintf(
		"spec.storage.size asks for %s but the data volumes (%s now) cannot grow: %s; the instances keep running on "+
			"their current volumes", want.String(), from.String(), strings.Join(parts, "; "))}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// volumeProgress reports whether every claim has reached want (its status.capacity, as the
// storage system reports it, is at least want), and if not, a message for the Progressing
// condition naming the claims still expanding. Pass the data claims of the instances that
// run (observation.Claims).
func volumeProgress(pvcs []corev1.PersistentVolumeClaim, want resource.Quantity) (done bool, msg string) {
	var pending []string
	resizePending := false
	for i := range pvcs {
		pvc := &pvcs[i]
		capacity, ok := claimCapacity(pvc)
		if ok && capacity.Cmp(want) >= 0 {
			continue
		}
		now := "no capacity yet"
		if ok {
			now = capacity.String()
		}
		for _, c := range pvc.Status.Conditions {
			if c.Type == corev1.PersistentVolumeClaimFileSystemResizePending && c.Status == corev1.ConditionTrue {
				now += ", file system resize pending"
				resizePending = true
			}
		}
		pending = append(pending, fmt.Sprintf("%s (%s)", pvc.Name, now))
	}
	if len(pending) == 0 {
		return true, ""
	}
	sort.Strings(pending)
	msg = fmt.Sprintf("expanding data volumes to %s: %s", want.String(), strings.Join(pending, ", "))
	if resizePending {
		msg += "; the node grows a pending file system when the volume is next mounted (some drivers need a pod restart)"
	}
	return false, msg
}

// volumeCapacityOf is status.capacity of pod's data claim among claims, nil when unknown.
func volumeCapacityOf(claims []corev1.PersistentVolumeClaim, pod string) *resource.Quantity {
	name := dataClaimName(pod)
	for i := range claims {
		if claims[i].Name == name {
			if q, ok := claimCapacity(&claims[i]); ok {
				return &q
			}
			return nil
		}
	}
	return nil
}

// dataClaims lists every data claim of the cluster, of any ordinal (claims retained from
// instances scaled away grow too, so a later scale-up finds them at the right size).
func (r *MySQLClusterReconciler) dataClaims(ctx context.Context, c *dolphinv1.MySQLCluster) ([]corev1.PersistentVolumeClaim, error) {
	var list corev1.PersistentVolumeClaimList
	if err := r.Client.List(ctx, &list, client.InNamespace(c.Namespace), client.MatchingLabels(resources.SelectorLabels(c))); err != nil {
		return nil, fmt.Errorf("listing the data volume claims: %w", err)
	}
	out := list.Items[:0]
	for _, pvc := range list.Items {
		if _, ok := claimOrdinal(c.Name, pvc.Name); ok {
			out = append(out, pvc)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// instanceClaims lists the data claims of the instances that run: ordinals below replicas,
// and those of existing pods (an instance kept while a scale-down waits for a switchover).
func (r *MySQLClusterReconciler) instanceClaims(ctx context.Context, c *dolphinv1.MySQLCluster, replicas int32, pods []corev1.Pod) ([]corev1.PersistentVolumeClaim, error) {
	all, err := r.dataClaims(ctx, c)
	if err != nil {
		return nil, err
	}
	running := make(map[string]bool, len(pods))
	for _, p := range pods {
		running[dataClaimName(p.Name)] = true
	}
	var out []corev1.PersistentVolumeClaim
	for _, pvc := range all {
		if n, _ := claimOrdinal(c.Name, pvc.Name); n < int(replicas) || running[pvc.Name] {
			out = append(out, pvc)
		}
	}
	return out, nil
}

// withLiveClaimTemplate returns c with spec.storage.size set to the live StatefulSet's
// claim template size (claim templates are immutable: only the storage step changes the
// size, by replacing the StatefulSet). wait is true while the StatefulSet is being deleted
// for that replacement: its deletion triggers the reconcile that re-creates it.
func (r *MySQLClusterReconciler) withLiveClaimTemplate(ctx context.Context, c *dolphinv1.MySQLCluster) (_ *dolphinv1.MySQLCluster, wait bool, _ error) {
	var sts appsv1.StatefulSet
	key := types.NamespacedName{Namespace: c.Namespace, Name: resources.NamesFor(c).StatefulSet}
	switch err := r.Client.Get(ctx, key, &sts); {
	case apierrors.IsNotFound(err):
		return c, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("reading StatefulSet %s: %w", key, err)
	}
	if sts.DeletionTimestamp != nil {
		log.FromContext(ctx).Info("waiting for the StatefulSet being replaced to go", "name", key.Name)
		return c, true, nil
	}
	live, ok := claimTemplateSize(&sts)
	if !ok || live.Cmp(*c.Spec.Storage.Size) == 0 {
		return c, false, nil
	}
	c = c.DeepCopy()
	c.Spec.Storage.Size = &live
	return c, false, nil
}

// reconcileStorage grows the data volumes to spec.storage.size: it checks that their
// StorageClass allows expansion, raises each claim's request, and replaces the StatefulSet
// so that its claim template matches. It runs last, so that a class that cannot expand (a
// userError) stops none of the other steps.
func (r *MySQLClusterReconciler) reconcileStorage(ctx context.Context, c *dolphinv1.MySQLCluster) error {
	want := *c.Spec.Storage.Size
	var sts appsv1.StatefulSet
	key := types.NamespacedName{Namespace: c.Namespace, Name: resources.NamesFor(c).StatefulSet}
	switch err := r.Client.Get(ctx, key, &sts); {
	case apierrors.IsNotFound(err):
		return nil // created at the desired size by the statefulset step
	case err != nil:
		return fmt.Errorf("reading StatefulSet %s: %w", key, err)
	}
	template, ok := claimTemplateSize(&sts)
	if sts.DeletionTimestamp != nil || !ok {
		return nil
	}
	claims, err := r.dataClaims(ctx, c)
	if err != nil {
		return err
	}
	plan := planStorage(want, template, claims)
	if plan.empty() {
		return nil
	}
	classes := map[string]*storagev1.StorageClass{}
	for i := range claims {
		name := claimClass(&claims[i])
		if _, seen := classes[name]; seen || name == "" {
			continue
		}
		var sc storagev1.StorageClass
		switch err := r.Client.Get(ctx, types.NamespacedName{Name: name}, &sc); {
		case apierrors.IsNotFound(err):
			classes[name] = nil
		case err != nil:
			return fmt.Errorf("reading StorageClass %s: %w", name, err)
		default:
			classes[name] = &sc
		}
	}
	if ue := notExpandable(claims, append(plan.Grow, plan.Unbound...), classes, template, want); ue != nil {
		return ue
	}

	if len(plan.Grow) > 0 {
		if err := r.growClaims(ctx, claims, plan.Grow, want); err != nil {
			return err
		}
		r.event(c, corev1.EventTypeNormal, "VolumesExpanding", "ExpandVolumes",
			"growing data volume claims %s to %s", strings.Join(plan.Grow, ", "), want.String())
	}
	if len(plan.Unbound) > 0 {
		log.FromContext(ctx).Info("claims grow once bound", "claims", plan.Unbound)
	}
	if plan.ReplaceStatefulSet {
		// Orphan: the pods keep running and the claims stay (with deletePolicy Delete the
		// StatefulSet owns them, and any other propagation would delete the data). The UID
		// precondition deletes only the StatefulSet that was read.
		if err := r.Client.Delete(ctx, &sts, client.PropagationPolicy("Orphan"), client.Preconditions{UID: &sts.UID}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting StatefulSet %s to re-create it with %s claims: %w", key, want.String(), err)
		}
		r.event(c, corev1.EventTypeNormal, "StatefulSetReplaced", "ReplaceStatefulSet",
			"deleted StatefulSet %s with orphan propagation (pods and volumes keep running) to re-create it with %s volume claims instead of %s",
			key.Name, want.String(), template.String())
	}
	return nil
}

// growClaims raises the storage request of the named claims to want (never lowers it).
func (r *MySQLClusterReconciler) growClaims(ctx context.Context, claims []corev1.PersistentVolumeClaim, names []string, want resource.Quantity) error {
	grow := make(map[string]bool, len(names))
	for _, n := range names {
		grow[n] = true
	}
	for i := range claims {
		pvc := &claims[i]
		if !grow[pvc.Name] || requestsAtLeast(pvc, want) {
			continue
		}
		patch := client.MergeFrom(pvc.DeepCopy())
		if pvc.Spec.Resources.Requests == nil {
			pvc.Spec.Resources.Requests = corev1.ResourceList{}
		}
		pvc.Spec.Resources.Requests[corev1.ResourceStorage] = want
		if err := r.Client.Patch(ctx, pvc, patch); err != nil {
			return fmt.Errorf("growing claim %s to %s: %w", pvc.Name, want.String(), err)
		}
	}
	return nil
}

// claimToCluster maps a data claim to its cluster: a claim's capacity or binding changes
// the cluster's status and what the storage step does.
func claimToCluster(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	name := l[resources.LabelInstance]
	if name == "" || l[resources.LabelName] == "" {
		return nil
	}
	if _, ok := claimOrdinal(name, o.GetName()); !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}

// storageClassToClusters maps a StorageClass to the clusters waiting because their volumes
// could not grow, so that fixing the class resumes them.
func (r *MySQLClusterReconciler) storageClassToClusters(ctx context.Context, _ client.Object) []reconcile.Request {
	var list dolphinv1.MySQLClusterList
	if err := r.Client.List(ctx, &list); err != nil {
		log.FromContext(ctx).Error(err, "listing clusters for a StorageClass change")
		return nil
	}
	var reqs []reconcile.Request
	for _, c := range list.Items {
		for _, cond := range c.Status.Conditions {
			if cond.Reason == reasonStorageNotExpandable {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&c)})
				break
			}
		}
	}
	return reqs
}
