package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
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
// then writes the status once (sqlObjectReconciler).
func (r *MySQLDatabaseReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return r.loop().reconcile(ctx, req.NamespacedName, &dolphinv1.MySQLDatabase{}, databaseTarget, r.apply)
}

// loop is the reconcile loop this reconciler shares with MySQLUserReconciler.
func (r *MySQLDatabaseReconciler) loop() sqlObjectReconciler[*dolphinv1.MySQLDatabase] {
	return sqlObjectReconciler[*dolphinv1.MySQLDatabase]{
		client: r.Client, sql: r.SQL, recorder: r.Recorder, kind: "MySQLDatabase",
		newList: func() client.ObjectList { return &dolphinv1.MySQLDatabaseList{} },
		status:  func(d *dolphinv1.MySQLDatabase) any { return d.Status },
	}
}

// databaseTarget sets the status fields that follow from d's spec and says which database d is.
func databaseTarget(d *dolphinv1.MySQLDatabase) sqlTarget {
	name := resources.DatabaseName(d)
	d.Status.Database = name
	return sqlTarget{
		cluster: d.Spec.Cluster, identity: databaseIdentity(d.Spec.Cluster, name),
		what: "database " + name, managed: "database " + name,
		drop: sqlobjects.PlanDropDatabase(name), dropText: "DROP DATABASE " + name,
		dropped: "DatabaseDropped", dropOnDelete: d.Spec.CleanupPolicy == dolphinv1.CleanupDelete,
	}
}

// apply makes the database on the primary what d declares.
func (r *MySQLDatabaseReconciler) apply(ctx context.Context, d *dolphinv1.MySQLDatabase, _ sqlTarget) (sqlState, error) {
	name := resources.DatabaseName(d)
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
		r.loop().event(d, corev1.EventTypeNormal, reason, "Apply", "%s", plan[0])
		if have, err = srv.ObserveDatabase(ctx, name); err != nil {
			return *serverState(err, "reading database "+name), nil
		}
	}
	d.Status.CharacterSet, d.Status.Collation = have.CharacterSet, have.Collation
	d.Status.ObservedGeneration = d.Generation
	return sqlState{ready: true, reason: dolphinv1.ReasonApplied, requeue: sqlResync(r.ResyncInterval),
		message: fmt.Sprintf("database %s exists on cluster %s (%s, %s)", name, d.Spec.Cluster, have.CharacterSet, have.Collation)}, nil
}

func databaseIdentity(cluster, name string) string { return cluster + "/" + name }

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
