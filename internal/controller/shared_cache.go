package controller

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
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
func CacheByObject() map[client.Object]cache.ByObject {
	managed := labels.SelectorFromSet(labels.Set{resources.LabelManagedBy: resources.ManagedBy})
	byManaged := cache.ByObject{Label: managed}
	return map[client.Object]cache.ByObject{
		&corev1.Secret{}:                {Label: labels.SelectorFromSet(labels.Set{resources.CredentialsLabel: "true"})},
		&corev1.PersistentVolumeClaim{}: {Label: claimSelector()},
		&corev1.Pod{}:                   byManaged,
		&corev1.ConfigMap{}:             byManaged,
		&corev1.Service{}:               byManaged,
		&corev1.ServiceAccount{}:        byManaged,
		&appsv1.StatefulSet{}:           byManaged,
		&policyv1.PodDisruptionBudget{}: byManaged,
	}
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
