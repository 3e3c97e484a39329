package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/sqlobjects"
)

// MySQLDatabaseReconciler keeps the databases MySQLDatabase resources declare on their
// clusters' primaries.
type MySQLDatabaseReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	// SQL reaches each cluster's primary.
	SQL PrimarySQL
	// ResyncInterval is how often a converged database is checked again
	// (DefaultSQLResyncInterval when zero).
	ResyncInterval time.Duration
}

// +kubebuilder:rbac:groups=mysql.dolphin.dev,resources=mysqldatabases,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=mysql.dolphin.dev,resources=mysqldatabases/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=mysql.dolphin.dev,resources=mysqldatabases/finalizers,verbs=update

// Reconcile creates or repairs the database, or carries out its cleanup policy on deletion,
// then writes the status once.
func (r *MySQLDatabaseReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var d dolphinv1.MySQLDatabase
	if err := r.Client.Get(ctx, req.NamespacedName, &d); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	orig := d.DeepCopy()
	name := resources.DatabaseName(&d)
	d.Status.Database = name

	if !d.DeletionTimestamp.IsZero() {
		st, err := r.cleanup(ctx, &d, name)
		if err != nil || st == nil {
			return ctrl.Result{}, err
		}
		return r.finish(ctx, orig, &d, *st)
	}
	if err := ensureSQLFinalizer(ctx, r.Client, &d); err != nil {
		return ctrl.Result{}, err
	}
	st, err := r.apply(ctx, &d, name)
	if err != nil {
		return ctrl.Result{}, err
	}
	return r.finish(ctx, orig, &d, st)
}

// apply makes the database on the primary what d declares.
func (r *MySQLDatabaseReconciler) apply(ctx context.Context, d *dolphinv1.MySQLDatabase, name string) (sqlState, error) {
	if other, err := r.manager(ctx, d, name); err != nil || other != "" {
		return sqlState{reason: dolphinv1.ReasonConflict, message: fmt.Sprintf(
			"MySQLDatabase %q already manages database %s on cluster %s: delete one of them", other, name, d.Spec.Cluster)}, err
	}
	srv, wait, err := primaryFor(ctx, r.Client, r.SQL, d.Namespace, d.Spec.Cluster)
	if err != nil || wait != nil {
		return derefState(wait), err
	}
	want := sqlobjects.Database{Name: name, CharacterSet: d.Spec.CharacterSet, Collation: d.Spec.Collation}
	have, err := srv.ObserveDatabase(ctx, name)
	if err != nil {
		return *serverState(err, "reading database "+name), nil
	}
	plan, err := sqlobjects.PlanDatabase(want, have)
	if err != nil {
		return sqlState{reason: dolphinv1.ReasonApplyFailed, message: err.Error()}, nil
	}
	if len(plan) > 0 {
		if err := srv.CheckWritable(ctx); err != nil {
			return *serverState(err, "database "+name), nil
		}
		if err := srv.Apply(ctx, plan); err != nil {
			return *serverState(err, "database "+name), nil
		}
		reason := "DatabaseCreated"
		if have.Exists {
			reason = "DatabaseUpdated"
		}
		r.event(d, corev1.EventTypeNormal, reason, "Apply", "%s", plan[0])
		if have, err = srv.ObserveDatabase(ctx, name); err != nil {
			return *serverState(err, "reading database "+name), nil
		}
	}
	d.Status.CharacterSet, d.Status.Collation = have.CharacterSet, have.Collation
	d.Status.ObservedGeneration = d.Generation
	return sqlState{ready: true, reason: dolphinv1.ReasonApplied, requeue: r.resync(),
		message: fmt.Sprintf("database %s exists on cluster %s (%s, %s)", name, d.Spec.Cluster, have.CharacterSet, have.Collation)}, nil
}

// cleanup carries out the cleanup policy of a deleted MySQLDatabase; a nil state means done.
func (r *MySQLDatabaseReconciler) cleanup(ctx context.Context, d *dolphinv1.MySQLDatabase, name string) (*sqlState, error) {
	// Drop only a database this resource applied, and only when no other resource claims
	// it: after a conflict, the other one manages it now, whichever was older.
	drop := d.Spec.CleanupPolicy == dolphinv1.CleanupDelete && d.Status.ObservedGeneration > 0
	if drop {
		_, others, err := r.claimants(ctx, d, name)
		if err != nil {
			return nil, err
		}
		drop = !others
	}
	if drop {
		srv, wait, err := primaryFor(ctx, r.Client, r.SQL, d.Namespace, d.Spec.Cluster)
		switch {
		case err != nil:
			return nil, err
		case wait != nil && wait.clusterGone:
			// Nothing left to drop it from.
		case wait != nil:
			return deleting(*wait, "dropping database "+name), nil
		default:
			if err := srv.Apply(ctx, []sqlobjects.Statement{sqlobjects.PlanDropDatabase(name)}); err != nil {
				return deleting(*serverState(err, "DROP DATABASE "+name), "dropping database "+name), nil
			}
			r.event(d, corev1.EventTypeNormal, "DatabaseDropped", "Delete", "dropped database %s (cleanupPolicy Delete)", name)
		}
	}
	return nil, releaseSQLFinalizer(ctx, r.Client, d)
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

// manager returns the name of another MySQLDatabase that manages the same database (the
// older one wins), or "".
func (r *MySQLDatabaseReconciler) manager(ctx context.Context, d *dolphinv1.MySQLDatabase, name string) (string, error) {
	older, _, err := r.claimants(ctx, d, name)
	return older, err
}

// claimants looks for other live MySQLDatabases naming the same database: the older one that
// manages it instead of d ("" when d does), and whether there is any other at all.
func (r *MySQLDatabaseReconciler) claimants(ctx context.Context, d *dolphinv1.MySQLDatabase, name string) (string, bool, error) {
	var list dolphinv1.MySQLDatabaseList
	if err := r.Client.List(ctx, &list, client.InNamespace(d.Namespace), client.MatchingFields{sqlIdentityIndex: databaseIdentity(d.Spec.Cluster, name)}); err != nil {
		return "", false, fmt.Errorf("listing MySQLDatabases: %w", err)
	}
	objs := make([]metav1.Object, len(list.Items))
	for i := range list.Items {
		objs[i] = &list.Items[i]
	}
	older, others := otherClaimants(d, objs)
	return older, others, nil
}

func databaseIdentity(cluster, name string) string { return cluster + "/" + name }

// finish writes the status (when it changed) and says when to look again.
func (r *MySQLDatabaseReconciler) finish(ctx context.Context, orig, d *dolphinv1.MySQLDatabase, st sqlState) (ctrl.Result, error) {
	setReady(&d.Status.Conditions, st, d.Generation)
	if !equality.Semantic.DeepEqual(orig.Status, d.Status) {
		if err := r.Client.Status().Patch(ctx, d, client.MergeFrom(orig)); err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("writing MySQLDatabase status: %w", err)
		}
	}
	if !st.ready {
		log.FromContext(ctx).V(1).Info("database not ready", "reason", st.reason, "message", st.message)
	}
	return ctrl.Result{RequeueAfter: st.requeue}, nil
}

func (r *MySQLDatabaseReconciler) resync() time.Duration {
	if r.ResyncInterval > 0 {
		return r.ResyncInterval
	}
	return DefaultSQLResyncInterval
}

func (r *MySQLDatabaseReconciler) event(d *dolphinv1.MySQLDatabase, typ, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(d, nil, typ, reason, action, note, args...)
	}
}

// derefState returns *st, or the zero state (not ready, no reason) for nil.
func derefState(st *sqlState) sqlState {
	if st == nil {
		return sqlState{}
	}
	return *st
}

// SetupWithManager registers the reconciler: it runs on MySQLDatabase changes, on changes of
// its cluster's primary or phase, on the deletion of a database resource it conflicted with,
// and every resync interval.
func (r *MySQLDatabaseReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	ix := mgr.GetFieldIndexer()
	if err := ix.IndexField(context.Background(), &dolphinv1.MySQLDatabase{}, sqlClusterIndex, func(o client.Object) []string {
		return []string{o.(*dolphinv1.MySQLDatabase).Spec.Cluster}
	}); err != nil {
		return fmt.Errorf("indexing MySQLDatabases by cluster: %w", err)
	}
	if err := ix.IndexField(context.Background(), &dolphinv1.MySQLDatabase{}, sqlIdentityIndex, func(o client.Object) []string {
		d := o.(*dolphinv1.MySQLDatabase)
		return []string{databaseIdentity(d.Spec.Cluster, resources.DatabaseName(d))}
	}); err != nil {
		return fmt.Errorf("indexing MySQLDatabases by database: %w", err)
	}
	byCluster := func(ctx context.Context, o client.Object) []reconcile.Request {
		var list dolphinv1.MySQLDatabaseList
		if err := mgr.GetClient().List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{sqlClusterIndex: o.GetName()}); err != nil {
			return nil
		}
		return requestsFor(list.Items)
	}
	sameDatabase := func(ctx context.Context, o client.Object) []reconcile.Request {
		d := o.(*dolphinv1.MySQLDatabase)
		var list dolphinv1.MySQLDatabaseList
		if err := mgr.GetClient().List(ctx, &list, client.InNamespace(d.Namespace),
			client.MatchingFields{sqlIdentityIndex: databaseIdentity(d.Spec.Cluster, resources.DatabaseName(d))}); err != nil {
			return nil
		}
		return requestsFor(list.Items)
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&dolphinv1.MySQLDatabase{}).
		Watches(&dolphinv1.MySQLCluster{}, handler.EnqueueRequestsFromMapFunc(byCluster), builder.WithPredicates(clusterChanged())).
		Watches(&dolphinv1.MySQLDatabase{}, handler.EnqueueRequestsFromMapFunc(sameDatabase)).
		WithOptions(opts).
		Named("mysqldatabase").
		Complete(r)
}

// requestsFor makes a reconcile request for each object.
func requestsFor[T any, PT interface {
	*T
	client.Object
}](items []T) []reconcile.Request {
	out := make([]reconcile.Request, 0, len(items))
	for i := range items {
		o := PT(&items[i])
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)})
	}
	return out
}
