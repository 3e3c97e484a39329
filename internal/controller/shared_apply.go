package controller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dolphin-operator/dolphin/internal/resources"
)

// applyOutcome says what applyChild did.
type applyOutcome string

const (
	outcomeCreated   applyOutcome = "Created"
	outcomeUpdated   applyOutcome = "Updated"
	outcomeUnchanged applyOutcome = "Unchanged"
)

// applyChild server-side-applies desired under Dolphin's field manager, unless the fields
// Dolphin owns on the live object already equal desired: then it sends nothing. live is an
// empty object of the child's type, filled by a Get; extract returns the part of a live
// object owned by a field manager (client-go's generated Extract<Kind> functions).
func applyChild[O client.Object, A runtime.ApplyConfiguration](
	ctx context.Context, c client.Client, key types.NamespacedName, live O, desired A,
	extract func(O, string) (A, error),
) (applyOutcome, error) {
	outcome := outcomeCreated
	switch err := c.Get(ctx, key, live); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return "", fmt.Errorf("reading %T %s: %w", live, key, err)
	default:
		owned, err := extract(live, resources.FieldManager)
		if err != nil {
			return "", fmt.Errorf("extracting Dolphin's fields of %T %s: %w", live, key, err)
		}
		if equality.Semantic.DeepEqual(owned, desired) {
			return outcomeUnchanged, nil
		}
		outcome = outcomeUpdated
	}
	if err := c.Apply(ctx, desired, client.FieldOwner(resources.FieldManager), client.ForceOwnership); err != nil {
		return "", fmt.Errorf("applying %T %s: %w", live, key, err)
	}
	return outcome, nil
}
