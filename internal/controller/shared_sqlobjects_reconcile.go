package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/sqlobjects"
)

// sqlObjectReconciler is the reconcile loop the MySQLUser and MySQLDatabase reconcilers share
// (user_controller.go and database_controller.go are its adapters): read the object, carry
// out its cleanup policy when it is deleted or keep the finalizer and apply it, refuse it
// while an older object of its kind manages the same server object, and write the status
// once, when it changed.
type sqlObjectReconciler[T sqlObject] struct {
	client   client.Client
	sql      PrimarySQL
	recorder events.EventRecorder
	// kind names the kind in errors and logs ("MySQLUser").
	kind string
	// newList returns an empty list of the kind.
	newList func() client.ObjectList
	// status returns the object's status, compared before and after to decide whether to
	// write it.
	status func(T) any
}

// sqlObject is a MySQLUser or a MySQLDatabase: an object with status conditions and the
// generation its status last applied (0: never).
type sqlObject interface {
	client.Object
	StatusConditions() *[]metav1.Condition
	StatusObservedGeneration() int64
}

// sqlTarget is what an object of either kind stands for on the server.
type sqlTarget struct {
	// cluster is the object's MySQLCluster; identity its value of sqlIdentityIndex, which two
	// objects of a kind naming the same server object share.
	cluster, identity string
	// what names the server object in messages ("account app@%", "database shop"), and
	// managed in the message of a conflict ("app@%", "database shop").
	what, managed string
	// drop is the statement that removes it, dropText how messages show it ("DROP USER
	// app@%"), dropped the event reason once it ran, and dropOnDelete whether the object's
	// cleanup policy asks for it.
	drop         sqlobjects.Statement
	dropText     string
	dropped      string
	dropOnDelete bool
}

// reconcile runs the loop for obj (read into it by key). target says what obj stands for,
// after setting the status fields that follow from the spec alone; apply makes the server
// object what obj declares.
func (s sqlObjectReconciler[T]) reconcile(ctx context.Context, key client.ObjectKey, obj T,
	target func(T) sqlTarget, apply func(context.Context, T, sqlTarget) (sqlState, error)) (ctrl.Result, error) {
	if err := s.client.Get(ctx, key, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if obj.GetDeletionTimestamp().IsZero() {
		if err := ensureSQLFinalizer(ctx, s.client, obj); err != nil {
			return ctrl.Result{}, err
		}
	}
	// The status is compared with the object as stored after the finalizer's patch, whose
	// answer replaces obj: the fields target sets must be set after it, or the first status
	// write would leave them out.
	orig := obj.DeepCopyObject().(T)
	t := target(obj)
	if !obj.GetDeletionTimestamp().IsZero() {
		st, err := s.cleanup(ctx, obj, t)
		if err != nil || st == nil {
			return ctrl.Result{}, err
		}
		return s.finish(ctx, orig, obj, *st)
	}
	var st sqlState
	older, _, err := s.claimants(ctx, obj, t)
	switch {
	case err != nil:
		return ctrl.Result{}, err
	case older != "":
		st = sqlState{reason: dolphinv1.ReasonConflict, message: fmt.Sprintf(
			"%s %q already manages %s on cluster %s: delete one of them", s.kind, older, t.managed, t.cluster)}
	default:
		if st, err = apply(ctx, obj, t); err != nil {
			return ctrl.Result{}, err
		}
	}
	return s.finish(ctx, orig, obj, st)
}

// cleanup carries out the cleanup policy of a deleted object; a nil state means done. It drops
// only a server object this resource applied (not one it never got to, which may be
// someone's own), and only when no other resource claims it: after a conflict, the other one
// manages it now, whichever was older.
func (s sqlObjectReconciler[T]) cleanup(ctx context.Context, obj T, t sqlTarget) (*sqlState, error) {
	drop := t.dropOnDelete && obj.StatusObservedGeneration() > 0
	if drop {
		_, others, err := s.claimants(ctx, obj, t)
		if err != nil {
			return nil, err
		}
		drop = !others
	}
	if drop {
		srv, wait, err := primaryFor(ctx, s.client, s.sql, obj.GetNamespace(), t.cluster)
		switch {
		case err != nil:
			return nil, err
		case wait != nil && wait.clusterGone:
			// Nothing left to drop it from.
		case wait != nil:
			return deleting(*wait, "dropping "+t.what), nil
		default:
			if err := srv.Apply(ctx, []sqlobjects.Statement{t.drop}); err != nil {
				return deleting(*serverState(err, t.dropText), "dropping "+t.what), nil
			}
			s.event(obj, corev1.EventTypeNormal, t.dropped, "Delete", "dropped %s (cleanupPolicy Delete)", t.what)
		}
	}
	return nil, releaseSQLFinalizer(ctx, s.client, obj)
}

// claimants looks for other live objects of the kind naming the same server object: the older
// one that manages it instead of obj ("" when obj does), and whether there is any other at all.
func (s sqlObjectReconciler[T]) claimants(ctx context.Context, obj T, t sqlTarget) (string, bool, error) {
	list := s.newList()
	if err := s.client.List(ctx, list, client.InNamespace(obj.GetNamespace()), client.MatchingFields{sqlIdentityIndex: t.identity}); err != nil {
		return "", false, fmt.Errorf("listing %ss: %w", s.kind, err)
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return "", false, fmt.Errorf("reading the list of %ss: %w", s.kind, err)
	}
	objs := make([]metav1.Object, 0, len(items))
	for _, o := range items {
		if m, ok := o.(metav1.Object); ok {
			objs = append(objs, m)
		}
	}
	older, others := otherClaimants(obj, objs)
	return older, others, nil
}

// finish writes the status (when it changed) and says when to look again.
func (s sqlObjectReconciler[T]) finish(ctx context.Context, orig, obj T, st sqlState) (ctrl.Result, error) {
	setReady(obj.StatusConditions(), st, obj.GetGeneration())
	if !equality.Semantic.DeepEqual(s.status(orig), s.status(obj)) {
		if err := s.client.Status().Patch(ctx, obj, client.MergeFrom(orig)); err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("writing %s status: %w", s.kind, err)
		}
	}
	if !st.ready {
		log.FromContext(ctx).V(1).Info(strings.ToLower(strings.TrimPrefix(s.kind, "MySQL"))+" not ready", "reason", st.reason, "message", st.message)
	}
	return ctrl.Result{RequeueAfter: st.requeue}, nil
}

// event records an event about obj, when there is a recorder.
func (s sqlObjectReconciler[T]) event(obj T, typ, reason, action, note string, args ...any) {
	if s.recorder != nil {
		s.recorder.Eventf(obj, nil, typ, reason, action, note, args...)
	}
}

// deleting reports a cleanup that waits.
func deleting(st sqlState, what string) *sqlState {
	st.ready = false
	st.message = what + " (cleanupPolicy Delete): " + st.message + "; set spec.cleanupPolicy to Retain to delete the resource without it"
	st.reason = dolphinv1.ReasonDeleting
	if st.requeue == 0 {
		st.requeue = sqlWaitInterval
	}
	return &st
}

// derefState returns *st, or the zero state (not ready, no reason) for nil.
func derefState(st *sqlState) sqlState {
	if st == nil {
		return sqlState{}
	}
	return *st
}

// sqlResync is how often a converged object is checked again: interval, or
// DefaultSQLResyncInterval when zero.
func sqlResync(interval time.Duration) time.Duration {
	if interval > 0 {
		return interval
	}
	return DefaultSQLResyncInterval
}
