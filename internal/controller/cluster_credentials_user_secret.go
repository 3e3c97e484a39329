package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// userSecretPollInterval is how often a cluster whose user-supplied credentials Secret does
// not exist looks for it again. Nothing else would notice its creation: the operator caches
// and watches only labelled Secrets (CacheByObject), and a Secret the user has just created
// carries no label of Dolphin's yet.
const userSecretPollInterval = 10 * time.Second

// pollingUserError is a userError whose fix no watch reports, so the reconcile looks again
// after `after` (still counted as waiting for the user, not as a failure to retry).
type pollingUserError struct {
	err   *userError
	after time.Duration
}

func (e *pollingUserError) Error() string { return e.err.Error() }
func (e *pollingUserError) Unwrap() error { return e.err }

// userErrorRequeueAfter is when a reconcile waiting for the user's fix err looks again by
// itself: zero when the fix arrives as a watch event (a spec change, a labelled Secret).
func userErrorRequeueAfter(err error) time.Duration {
	var p *pollingUserError
	if errors.As(err, &p) {
		return p.after
	}
	return 0
}

// apiReader reads live from the API server (liveReader).
func (r *MySQLClusterReconciler) apiReader() client.Reader { return liveReader(r.APIReader, r.Client) }

// reconcileUserCredentials reads the Secret named in spec.credentials.secretName, which the
// user owns. Dolphin changes nothing in it but one label, CredentialsLabel, which brings it
// into the operator's cache and watch so that a password rotation is seen at once; its
// passwords go to the Dolphin-owned history Secret as the current generation.
func (r *MySQLClusterReconciler) reconcileUserCredentials(ctx context.Context, c *dolphinv1.MySQLCluster) error {
	name := c.Spec.Credentials.SecretName
	key := types.NamespacedName{Namespace: c.Namespace, Name: name}
	s, err := r.readUserSecret(ctx, key)
	switch {
	case apierrors.IsNotFound(err):
		return &pollingUserError{after: userSecretPollInterval, err: &userError{Reason: "CredentialsSecretNotFound", Message: fmt.Sprintf(
			"Secret %q named in spec.credentials.secretName does not exist: create it with the keys %s",
			name, strings.Join(resources.CredentialKeys, ", "))}}
	case err != nil:
		return fmt.Errorf("reading Secret %s: %w", key, err)
	}
	if err := r.labelUserSecret(ctx, c, s); err != nil {
		return err
	}
	if missing := resources.MissingCredentialKeys(s); len(missing) > 0 {
		return &userError{Reason: "CredentialsSecretIncomplete", Message: fmt.Sprintf(
			"Secret %q lacks the keys %s: add them (non-empty)", name, strings.Join(missing, ", "))}
	}
	return r.reconcileCredentialHistory(ctx, c, s.Data)
}

// readUserSecret reads a user-supplied Secret (see readSecretCachedOrLive).
func (r *MySQLClusterReconciler) readUserSecret(ctx context.Context, key types.NamespacedName) (*corev1.Secret, error) {
	return readSecretCachedOrLive(ctx, r.Client, r.apiReader(), key)
}

// labelUserSecret adds CredentialsLabel to the user's Secret s (see labelCredentialsSecret).
func (r *MySQLClusterReconciler) labelUserSecret(ctx context.Context, c *dolphinv1.MySQLCluster, s *corev1.Secret) error {
	labelled, err := labelCredentialsSecret(ctx, r.Client, s)
	if labelled {
		r.event(c, corev1.EventTypeNormal, "CredentialsSecretLabeled", "Label",
			"labelled Secret %s with %s=true so that Dolphin watches it for password changes (nothing else in it was changed)",
			s.Name, resources.CredentialsLabel)
	}
	return err
}

// labelCredentialsSecret adds CredentialsLabel to a Secret the user owns unless it has it,
// and reports whether it did. A merge patch of that one label: it fails on a Secret deleted
// meanwhile instead of creating one, and leaves every other field, and any other writer's
// change, alone. s is updated from the answer.
func labelCredentialsSecret(ctx context.Context, c client.Client, s *corev1.Secret) (bool, error) {
	if s.Labels[resources.CredentialsLabel] == "true" {
		return false, nil
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{resources.CredentialsLabel: "true"}}})
	if err != nil {
		return false, fmt.Errorf("encoding the label patch: %w", err)
	}
	if err := c.Patch(ctx, s, client.RawPatch(types.MergePatchType, body)); err != nil {
		return false, fmt.Errorf("labelling Secret %s/%s with %s=true: %w", s.Namespace, s.Name, resources.CredentialsLabel, err)
	}
	return true, nil
}
