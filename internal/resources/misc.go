package resources

import (
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// PodDisruptionBudget lets voluntary disruptions (node drains) take at most one instance at
// a time. Pods that are not healthy can always be evicted, so a crash-looping instance never
// blocks a drain.
func PodDisruptionBudget(c *dolphinv1.MySQLCluster) *policyv1ac.PodDisruptionBudgetApplyConfiguration {
	return policyv1ac.PodDisruptionBudget(NamesFor(c).PodDisruptionBudget, c.Namespace).
		WithLabels(CommonLabels(c)).
		WithOwnerReferences(ownerReference(c)).
		WithSpec(policyv1ac.PodDisruptionBudgetSpec().
			WithMaxUnavailable(intstr.FromInt32(1)).
			WithUnhealthyPodEvictionPolicy(policyv1.AlwaysAllow).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(c))))
}

// ServiceAccount is the identity of the instance pods. The database needs no Kubernetes API
// access, so no token is mounted.
func ServiceAccount(c *dolphinv1.MySQLCluster) *corev1ac.ServiceAccountApplyConfiguration {
	return corev1ac.ServiceAccount(NamesFor(c).ServiceAccount, c.Namespace).
		WithLabels(CommonLabels(c)).
		WithOwnerReferences(ownerReference(c)).
		WithAutomountServiceAccountToken(false)
}
