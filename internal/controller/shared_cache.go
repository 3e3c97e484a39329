package controller

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dolphin-operator/dolphin/internal/resources"
)

// CacheByObject restricts the manager's cache to Dolphin's own objects of every namespaced
// kind the reconciler watches: without it the operator would keep a copy of every Secret,
// Pod, claim and ConfigMap in the namespaces it watches (the whole cluster by default).
// Pass it as cache.Options.ByObject.
//
//   - Secrets: CredentialsLabel=true. Dolphin's own credentials and history Secrets carry it
//     from creation; a user-supplied credentials Secret gets it when the reconciler first
//     reads it with the uncached APIReader (reconcileUserCredentials). A label selector
//     cannot OR, so the one label covers both.
//   - Data volume claims: app.kubernetes.io/name=mysql with an app.kubernetes.io/instance,
//     the labels of the StatefulSet claim template (immutable, so claims lack managed-by).
//   - Everything else Dolphin creates: app.kubernetes.io/managed-by=dolphin.
//
// A cached Get of an object outside its selector answers NotFound, and no watch sees it:
// code that must read such an object uses the APIReader.
//
// Each keeps only Dolphin's own managedFields entries (KeepOwnManagedFields): the no-op check
// of applyChild reads Dolphin's; the kubelet's status entries on every pod, the controller
// manager's on StatefulSets and claims are memory the operator never reads.
func CacheByObject() map[client.Object]cache.ByObject {
	managed := labels.SelectorFromSet(labels.Set{resources.LabelManagedBy: resources.ManagedBy})
	byManaged := cache.ByObject{Label: managed, Transform: KeepOwnManagedFields}
	return map[client.Object]cache.ByObject{
		&corev1.Secret{}: {Label: labels.SelectorFromSet(labels.Set{resources.CredentialsLabel: "true"}),
			Transform: KeepOwnManagedFields},
		&corev1.PersistentVolumeClaim{}: {Label: claimSelector(), Transform: KeepOwnManagedFields},
		&corev1.Pod{}:                   byManaged,
		&corev1.ConfigMap{}:             byManaged,
		&corev1.Service{}:               byManaged,
		&corev1.ServiceAccount{}:        byManaged,
		&appsv1.StatefulSet{}:           byManaged,
		&policyv1.PodDisruptionBudget{}: byManaged,
	}
}

// KeepOwnManagedFields is a cache transform that drops every managedFields entry but those of
// Dolphin's field managers (resources.FieldManager, resources.TopologyFieldManager). Only for
// kinds Dolphin never writes with an Update: an Update that sends a partial managedFields list
// would replace the server's (patches and applies do not send it).
func KeepOwnManagedFields(in any) (any, error) {
	obj, ok := in.(metav1.Object)
	if !ok {
		return in, nil
	}
	entries := obj.GetManagedFields()
	var own []metav1.ManagedFieldsEntry
	for _, e := range entries {
		if e.Manager == resources.FieldManager || e.Manager == resources.TopologyFieldManager {
			own = append(own, e)
		}
	}
	if len(own) < len(entries) {
		obj.SetManagedFields(own) // a new slice: the dropped entries' memory goes with the old one
	}
	return in, nil
}

// claimSelector selects the data volume claims of every cluster.
func claimSelector() labels.Selector {
	name, err := labels.NewRequirement(resources.LabelName, selection.Equals, []string{resources.AppName})
	if err != nil {
		panic(err) // constant, valid input
	}
	instance, err := labels.NewRequirement(resources.LabelInstance, selection.Exists, nil)
	if err != nil {
		panic(err)
	}
	return labels.NewSelector().Add(*name, *instance)
}
