package resources

import (
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// ownerReference makes the cluster the controlling owner of a child, so that the garbage
// collector deletes the child with the cluster and the controller is triggered by its changes.
func ownerReference(c *dolphinv1.MySQLCluster) *metav1ac.OwnerReferenceApplyConfiguration {
	return metav1ac.OwnerReference().
		WithAPIVersion(dolphinv1.GroupVersion.String()).
		WithKind("MySQLCluster").
		WithName(c.Name).
		WithUID(c.UID).
		WithController(true).
		WithBlockOwnerDeletion(true)
}

// mergeLabels returns the union of maps; later maps win.
func mergeLabels(maps ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range maps {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// nonEmpty returns m, or nil when m is empty, so that apply configurations do not claim
// ownership of empty maps.
func nonEmpty(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}
