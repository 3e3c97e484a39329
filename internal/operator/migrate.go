package operator

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dolphin-operator/dolphin/internal/resources"
)

// labelOwnSecrets adds resources.CredentialsLabel to the Secrets Dolphin created before it
// labelled them (the generated credentials and history Secrets carry
// app.kubernetes.io/managed-by=dolphin). The operator caches only Secrets with that label,
// so without it the reconciler would see no Secret and fail to create one that exists.
// It reads live with reader and patches with w; namespace "" means all namespaces. It is
// idempotent, so replicas that run it at once do no harm.
func labelOwnSecrets(ctx context.Context, reader client.Reader, w client.Writer, namespace string, log logr.Logger) error {
	var list corev1.SecretList
	if err := reader.List(ctx, &list, client.InNamespace(namespace),
		client.MatchingLabels{resources.LabelManagedBy: resources.ManagedBy}); err != nil {
		return fmt.Errorf("listing Dolphin's Secrets to label them: %w", err)
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{resources.CredentialsLabel: "true"}}})
	if err != nil {
		return fmt.Errorf("encoding the label patch: %w", err)
	}
	labelled := 0
	for i := range list.Items {
		s := &list.Items[i]
		if s.Labels[resources.CredentialsLabel] == "true" {
			continue
		}
		if err := w.Patch(ctx, s, client.RawPatch(types.MergePatchType, body)); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("labelling Secret %s/%s with %s=true: %w", s.Namespace, s.Name, resources.CredentialsLabel, err)
		}
		labelled++
	}
	if labelled > 0 {
		log.Info("labelled Secrets created by an earlier operator version", "count", labelled, "label", resources.CredentialsLabel)
	}
	return nil
}
