package controller

import (
	"bytes"
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// reconcileMetricsSecret keeps `<name>-metrics` equal to what a scraper of the agents'
// /metrics needs from the agent Secret: the metrics token and the agents' CA. A scraper is
// given this Secret, never the agent Secret, whose token runs backups and clones.
func (r *MySQLClusterReconciler) reconcileMetricsSecret(ctx context.Context, c *dolphinv1.MySQLCluster) error {
	var agentSecret corev1.Secret
	agentKey := types.NamespacedName{Namespace: c.Namespace, Name: resources.AgentSecretName(c)}
	if err := r.Client.Get(ctx, agentKey, &agentSecret); err != nil {
		return fmt.Errorf("reading Secret %s: %w", agentKey, err)
	}
	want := resources.MetricsSecretData(&agentSecret)
	key := types.NamespacedName{Namespace: c.Namespace, Name: resources.MetricsSecretName(c)}
	var s corev1.Secret
	err := r.Client.Get(ctx, key, &s)
	switch {
	case apierrors.IsNotFound(err):
		s = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace,
				Labels: resources.CredentialsSecretLabels(c), OwnerReferences: []metav1.OwnerReference{resources.OwnerReference(c)}},
			Type: corev1.SecretTypeOpaque,
			Data: want,
		}
		if err := r.Client.Create(ctx, &s); err != nil {
			return fmt.Errorf("creating Secret %s: %w", key, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("reading Secret %s: %w", key, err)
	case maps.EqualFunc(want, s.Data, bytes.Equal):
		return nil
	}
	patch := client.MergeFromWithOptions(s.DeepCopy(), client.MergeFromWithOptimisticLock{})
	s.Data = want
	if err := r.Client.Patch(ctx, &s, patch); err != nil {
		return fmt.Errorf("updating Secret %s: %w", key, err)
	}
	return nil
}
