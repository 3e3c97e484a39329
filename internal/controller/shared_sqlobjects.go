package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/sqlobjects"
	"github.com/dolphin-operator/dolphin/internal/topology"
)

// PrimarySQL reaches a cluster's primary for application users and databases. In the operator
// that is the topology engines (clustermanager.Manager), which know who the primary is and
// which password its accounts have.
type PrimarySQL interface {
	// PrimarySQL returns a connection to the cluster's primary as Dolphin's schema account,
	// or an error wrapping topology.ErrNoPrimary while the cluster has none.
	PrimarySQL(key types.NamespacedName) (*sqlobjects.Server, error)
}

// Timing of the MySQLUser and MySQLDatabase reconcilers.
const (
	// DefaultSQLResyncInterval is how often a converged user or database is compared with the
	// server again, which is how changes made by hand are found (nothing on the server
	// announces them).
	DefaultSQLResyncInterval = time.Minute
	// sqlWaitInterval is how soon a user or database waiting for a primary looks again.
	sqlWaitInterval = 5 * time.Second
)

// Field indexes of MySQLUser and MySQLDatabase.
const (
	// sqlClusterIndex indexes users and databases by spec.cluster.
	sqlClusterIndex = "spec.cluster"
	// sqlIdentityIndex indexes them by what they manage on the server (cluster and user@host,
	// or cluster and database name), to find two resources managing one thing.
	sqlIdentityIndex = "dolphin.sqlIdentity"
	// userSecretIndex indexes users by the Secret their password is read from.
	userSecretIndex = "dolphin.passwordSecret"
)

// sqlState is the outcome of one user or database reconcile, for its Ready condition.
type sqlState struct {
	ready   bool
	reason  string
	message string
	// requeue is when to look again (the resync interval once Ready).
	requeue time.Duration
	// clusterGone: the cluster does not exist or is being deleted, so there is nothing to
	// clean up on it.
	clusterGone bool
}

// primaryFor finds the cluster named by a user or database and its primary. A nil server with
// a state means waiting: the state says for what.
func primaryFor(ctx context.Context, c client.Reader, sql PrimarySQL, ns, cluster string) (*sqlobjects.Server, *sqlState, error) {
	var mc dolphinv1.MySQLCluster
	err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: cluster}, &mc)
	if apierrors.IsNotFound(err) {
		// No requeue: creating the cluster is a watch event.
		return nil, &sqlState{reason: dolphinv1.ReasonClusterNotFound, clusterGone: true, message: fmt.Sprintf(
			"MySQLCluster %q does not exist in namespace %s: create it, or set spec.cluster to an existing cluster", cluster, ns)}, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading MySQLCluster %s/%s: %w", ns, cluster, err)
	}
	if mc.Spec.Paused {
		return nil, &sqlState{reason: dolphinv1.ReasonClusterNotReady, message: fmt.Sprintf(
			"MySQLCluster %q is paused (spec.paused): changes are applied once it is resumed", cluster)}, nil
	}
	if !mc.DeletionTimestamp.IsZero() {
		return nil, &sqlState{reason: dolphinv1.ReasonClusterNotReady, clusterGone: true, message: fmt.Sprintf("MySQLCluster %q is being deleted", cluster)}, nil
	}
	srv, err := sql.PrimarySQL(types.NamespacedName{Namespace: ns, Name: cluster})
	if errors.Is(err, topology.ErrNoPrimary) {
		return nil, &sqlState{reason: dolphinv1.ReasonClusterNotReady, requeue: sqlWaitInterval,
			message: fmt.Sprintf("waiting for a primary on MySQLCluster %q: %v", cluster, err)}, nil
	}
	if err != nil {
		return nil, nil, err
	}
	return srv, nil, nil
}

// serverState turns an error from the server into a state: read-only and unreachable
// servers are waits (the cluster is failing over or starting), anything else the server
// refused is for the user to fix (the message has the server's words).
func serverState(err error, what string) *sqlState {
	if errors.Is(err, sqlobjects.ErrReadOnly) {
		return &sqlState{reason: dolphinv1.ReasonNoWritablePrimary, requeue: sqlWaitInterval / 2, message: fmt.Sprintf(
			"the primary Dolphin reached is read-only (fenced, or a failover is starting); retrying: %v", err)}
	}
	if sqlobjects.IsRefused(err) {
		return &sqlState{reason: dolphinv1.ReasonApplyFailed, requeue: DefaultSQLResyncInterval, message: fmt.Sprintf(
			"the server refused %s: %v", what, err)}
	}
	return &sqlState{reason: dolphinv1.ReasonClusterNotReady, requeue: sqlWaitInterval, message: fmt.Sprintf(
		"cannot reach the primary to apply %s; retrying: %v", what, err)}
}

// conditionFor makes the Ready condition of a state.
func conditionFor(st sqlState, generation int64) metav1.Condition {
	status := metav1.ConditionFalse
	if st.ready {
		status = metav1.ConditionTrue
	}
	return metav1.Condition{Type: dolphinv1.ConditionReady, Status: status, Reason: st.reason, Message: st.message, ObservedGeneration: generation}
}

// ensureSQLFinalizer adds SQLObjectFinalizer to obj (a patch of that field only).
func ensureSQLFinalizer(ctx context.Context, c client.Client, obj client.Object) error {
	if controllerutil.ContainsFinalizer(obj, dolphinv1.SQLObjectFinalizer) {
		return nil
	}
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	controllerutil.AddFinalizer(obj, dolphinv1.SQLObjectFinalizer)
	if err := c.Patch(ctx, obj, patch); err != nil {
		return fmt.Errorf("adding finalizer %s: %w", dolphinv1.SQLObjectFinalizer, err)
	}
	return nil
}

// releaseSQLFinalizer removes SQLObjectFinalizer from obj.
func releaseSQLFinalizer(ctx context.Context, c client.Client, obj client.Object) error {
	if !controllerutil.ContainsFinalizer(obj, dolphinv1.SQLObjectFinalizer) {
		return nil
	}
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	controllerutil.RemoveFinalizer(obj, dolphinv1.SQLObjectFinalizer)
	if err := client.IgnoreNotFound(c.Patch(ctx, obj, patch)); err != nil {
		return fmt.Errorf("removing finalizer %s: %w", dolphinv1.SQLObjectFinalizer, err)
	}
	return nil
}

// otherClaimants looks at the resources claiming the same server object as self (self may be
// among them): the name of a live one older than self, which manages it instead of self (""
// when self does), and whether any other live one exists.
func otherClaimants(self metav1.Object, all []metav1.Object) (older string, others bool) {
	for _, o := range all {
		if o.GetUID() == self.GetUID() || o.GetDeletionTimestamp() != nil {
			continue
		}
		others = true
		if older == "" && olderWins(o, self) {
			older = o.GetName()
		}
	}
	return older, others
}

// olderWins orders two resources claiming the same server object: the older one manages it
// (ties broken by name), so the choice is stable and the same from either side.
func olderWins(a, b metav1.Object) bool {
	ta, tb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
	if !ta.Equal(&tb) {
		return ta.Before(&tb)
	}
	return a.GetName() < b.GetName()
}

// clusterChanged passes the cluster events that can unblock its users and databases:
// creation, deletion, and a change of primary or phase (status writes of the engine that
// change neither are filtered out).
func clusterChanged() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, okO := e.ObjectOld.(*dolphinv1.MySQLCluster)
		n, okN := e.ObjectNew.(*dolphinv1.MySQLCluster)
		if !okO || !okN {
			return true
		}
		return o.Status.CurrentPrimary != n.Status.CurrentPrimary || o.Status.Phase != n.Status.Phase ||
			o.Spec.Paused != n.Spec.Paused || !o.DeletionTimestamp.Equal(n.DeletionTimestamp)
	}}
}

// setReady sets the Ready condition in conds and reports whether anything changed.
func setReady(conds *[]metav1.Condition, st sqlState, generation int64) bool {
	before := append([]metav1.Condition(nil), *conds...)
	meta.SetStatusCondition(conds, conditionFor(st, generation))
	return !equality.Semantic.DeepEqual(before, *conds)
}
