package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/topology"
)

// ConditionCredentialsApplied is True when every instance has the passwords of the
// credentials Secret; False while a rotation is being applied or cannot be.
const ConditionCredentialsApplied = "CredentialsApplied"

// reconcileCredentialHistory keeps the Dolphin-owned history Secret: the current passwords
// as the newest generation, plus every earlier generation an instance still has. The
// topology engine logs in with those to rotate an instance to the current passwords; the
// history outlives operator restarts, so an instance that was down during a rotation
// catches up whenever it comes back.
func (r *MySQLClusterReconciler) reconcileCredentialHistory(ctx context.Context, c *dolphinv1.MySQLCluster, current map[string][]byte) error {
	key := types.NamespacedName{Namespace: c.Namespace, Name: resources.CredentialsHistorySecretName(c)}
	var live corev1.Secret
	err := r.Client.Get(ctx, key, &live)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading Secret %s: %w", key, err)
	}
	exists := err == nil
	var old resources.CredentialHistory
	if exists {
		old = resources.ReadCredentialHistory(&live)
	} else {
		old = resources.ReadCredentialHistory(nil)
	}
	next := resources.NextCredentialHistory(old, current, generationsInUse(c))
	if exists && slices.Equal(old.Generations, next.Generations) {
		return nil
	}
	desired := resources.CredentialHistorySecret(c, next)
	if !exists {
		if err := r.Client.Create(ctx, desired); err != nil {
			return fmt.Errorf("creating Secret %s: %w", key, err)
		}
		return nil
	}
	// A merge patch that states the whole history, without a resourceVersion precondition:
	// only this reconciler writes the Secret, and a reconcile on a cache that has not seen
	// the last write computes the same content again.
	data := map[string]any{}
	for k := range live.Data {
		data[k] = nil
	}
	for k, v := range desired.Data {
		data[k] = v
	}
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{resources.GenerationsAnnotation: desired.Annotations[resources.GenerationsAnnotation]}},
		"data":     data,
	})
	if err != nil {
		return fmt.Errorf("encoding Secret %s: %w", key, err)
	}
	if err := r.Client.Patch(ctx, &live, client.RawPatch(types.MergePatchType, body)); err != nil {
		return fmt.Errorf("updating Secret %s: %w", key, err)
	}
	if len(old.Generations) > 0 && old.Generations[0] != next.Generations[0] {
		r.event(c, corev1.EventTypeNormal, "CredentialsRotating", "Rotate",
			"the credentials Secret holds new passwords (generation %s): applying them to every instance before using them", next.Generations[0])
	}
	return nil
}

// generationsInUse lists the credentials generations the instances are recorded with; nil
// when nothing is recorded yet (then no generation may be forgotten).
func generationsInUse(c *dolphinv1.MySQLCluster) []string {
	t := c.Status.Topology
	if t == nil || len(t.Instances) == 0 {
		return nil
	}
	out := []string{}
	for _, in := range t.Instances {
		for _, g := range []string{in.CredentialsGeneration, in.ReplicationCredentialsGeneration} {
			if g != "" && !slices.Contains(out, g) {
				out = append(out, g)
			}
		}
	}
	return out
}

// credentialsCondition says whether every instance has the current credentials, from the
// engine's record; nil when the engine has recorded nothing yet.
func credentialsCondition(t *dolphinv1.TopologyStatus) *problem {
	if t == nil || t.CredentialsGeneration == "" || len(t.Instances) == 0 {
		return nil
	}
	cur := t.CredentialsGeneration
	var behind, unreachable []string
	for _, in := range t.Instances {
		if in.CredentialsGeneration == cur && (in.ReplicationCredentialsGeneration == "" || in.ReplicationCredentialsGeneration == cur) {
			continue
		}
		if strings.Contains(in.Error, topology.AllGenerationsRefused) {
			return &problem{"RotationFailed", fmt.Sprintf("%s: %s", in.Name, in.Error)}
		}
		if !in.Reachable {
			unreachable = append(unreachable, in.Name)
		}
		behind = append(behind, in.Name)
	}
	switch {
	case len(behind) == 0:
		return &problem{"Applied", "every instance has credentials generation " + cur}
	case len(unreachable) > 0:
		return &problem{"RotationPending", fmt.Sprintf("%s do not answer: they take credentials generation %s when they do (the old passwords stay in the history Secret until then)",
			strings.Join(unreachable, ", "), cur)}
	default:
		return &problem{"RotationInProgress", fmt.Sprintf("applying credentials generation %s to %s", cur, strings.Join(behind, ", "))}
	}
}
