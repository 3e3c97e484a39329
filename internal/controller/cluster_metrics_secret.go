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
// /metrics needs from the agent Secret: the metrics token and the agents' CA (the previous CA
// too, after a renewal, until the agents serve the new certificate). A scraper is given this
// Secret, never the agent Secret, whose token runs backups and clones.
//
// Metrics never hold up the cluster: until the cache shows the agent Secret with its metrics
// token the step waits for the update event, and a Secret of that name Dolphin does not own is
// left alone with a warning event.
func (r *MySQLClusterReconciler) reconcileMetricsSecret(ctx context.Context, c *dolphinv1.MySQLCluster) error {
	var agentSecret corev1.Secret
	agentKey := types.NamespacedName{Namespace: c.Namespace, Name: resources.AgentSecretName(c)}
	switch err := r.Client.Get(ctx, agentKey, &agentSecret); {
	case apierrors.IsNotFound(err):
		return nil // just created: its event brings the cluster back
	case err != nil:
		return fmt.Errorf("reading Secret %s: %w", agentKey, err)
	case len(agentSecret.Data[resources.AgentMetricsTokenKey]) == 0 || len(agentSecret.Data[resources.AgentCAKey]) == 0:
		return nil // the cache has not seen the keys reconcileAgentSecret added yet
	}
	key := types.NamespacedName{Namespace: c.Namespace, Name: resources.MetricsSecretName(c)}
	var s corev1.Secret
	err := r.Client.Get(ctx, key, &s)
	if apierrors.IsNotFound(err) {
		s = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace,
				Labels: resources.CredentialsSecretLabels(c), OwnerReferences: []metav1.OwnerReference{resources.OwnerReference(c)}},
			Type: corev1.SecretTypeOpaque,
			Data: resources.MetricsSecretData(&agentSecret, nil),
		}
		err = r.Client.Create(ctx, &s)
		if err == nil {
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating Secret %s: %w", key, err)
		}
		// Not in the cache, yet there: a Secret without Dolphin's label.
		if err := r.apiReader().Get(ctx, key, &s); err != nil {
			return fmt.Errorf("reading Secret %s: %w", key, err)
		}
	} else if err != nil {
		return fmt.Errorf("reading Secret %s: %w", key, err)
	}
	if owner := metav1.GetControllerOf(&s); owner == nil || owner.UID != c.UID {
		r.event(c, corev1.EventTypeWarning, "MetricsSecretNotOwned", "Update",
			"Secret %s exists and is not this cluster's: Dolphin keeps the token scrapers of the instances' metrics need there; rename or delete it (the instances' metrics are not scrapeable until then)", key.Name)
		return nil
	}
	want := resources.MetricsSecretData(&agentSecret, s.Data)
	if maps.EqualFunc(want, s.Data, bytes.Equal) {
		return nil
	}
	patch := client.MergeFromWithOptions(s.DeepCopy(), client.MergeFromWithOptimisticLock{})
	s.Data = want
	if err := r.Client.Patch(ctx, &s, patch); err != nil {
		return fmt.Errorf("updating Secret %s: %w", key, err)
	}
	return nil
}
