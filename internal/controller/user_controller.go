package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/passwords"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/sqlobjects"
)

// MySQLUserReconciler keeps the application accounts MySQLUser resources declare on their
// clusters' primaries, with their passwords from Secrets and their grants.
type MySQLUserReconciler struct {
	// Client reads from the manager's cache (only labelled Secrets are in it).
	Client client.Client
	// APIReader reads a user-supplied password Secret Dolphin has not labelled yet. Nil uses
	// Client.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// SQL reaches each cluster's primary.
	SQL PrimarySQL
	// ResyncInterval is how often a converged account is checked again
	// (DefaultSQLResyncInterval when zero).
	ResyncInterval time.Duration
	// NewPassword generates passwords (resources.NewPassword when nil).
	NewPassword func() string
}

// +kubebuilder:rbac:groups=mysql.dolphin.dev,resources=mysqlusers,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=mysql.dolphin.dev,resources=mysqlusers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=mysql.dolphin.dev,resources=mysqlusers/finalizers,verbs=update

// Reconcile creates or repairs the account, or carries out its cleanup policy on deletion,
// then writes the status once (sqlObjectReconciler).
func (r *MySQLUserReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return r.loop().reconcile(ctx, req.NamespacedName, &dolphinv1.MySQLUser{}, userTarget, r.apply)
}

// loop is the reconcile loop this reconciler shares with MySQLDatabaseReconciler.
func (r *MySQLUserReconciler) loop() sqlObjectReconciler[*dolphinv1.MySQLUser] {
	return sqlObjectReconciler[*dolphinv1.MySQLUser]{
		client: r.Client, sql: r.SQL, recorder: r.Recorder, kind: "MySQLUser",
		newList: func() client.ObjectList { return &dolphinv1.MySQLUserList{} },
		status:  func(u *dolphinv1.MySQLUser) any { return u.Status },
	}
}

// userTarget sets the status fields that follow from u's spec and says which account u is.
func userTarget(u *dolphinv1.MySQLUser) sqlTarget {
	name, host := resources.UserName(u), resources.UserHost(u)
	u.Status.Account = name + "@" + host
	u.Status.PasswordSecret = resources.UserPasswordSecretName(u)
	return sqlTarget{
		cluster: u.Spec.Cluster, identity: userIdentity(u.Spec.Cluster, name, host),
		what: "account " + name + "@" + host, managed: name + "@" + host,
		drop: sqlobjects.PlanDropUser(name, host), dropText: "DROP USER " + name + "@" + host,
		dropped: "UserDropped", dropOnDelete: u.Spec.CleanupPolicy != dolphinv1.CleanupRetain,
	}
}

// apply makes the account on the primary what u declares.
func (r *MySQLUserReconciler) apply(ctx context.Context, u *dolphinv1.MySQLUser, _ sqlTarget) (sqlState, error) {
	name, host := resources.UserName(u), resources.UserHost(u)
	secret, password, wait, err := r.password(ctx, u)
	if err != nil || wait != nil {
		return derefState(wait), err
	}
	srv, wait, err := primaryFor(ctx, r.Client, r.SQL, u.Namespace, u.Spec.Cluster)
	if err != nil || wait != nil {
		return derefState(wait), err
	}
	want := desiredUser(u, name, host, password)
	have, err := srv.ObserveUser(ctx, name, host)
	if err != nil {
		return *serverState(err, "reading account "+want.Account()), nil
	}
	current, known := sqlobjects.PasswordIsCurrent(have, password)
	setPassword := have.Exists && ((known && !current) || (!known && u.Status.PasswordSecretVersion != secret.ResourceVersion))
	plan := sqlobjects.PlanUser(srv.Flavor(), want, have, setPassword)
	if len(plan) > 0 {
		if err := srv.CheckWritable(ctx); err != nil {
			return *serverState(err, "account "+want.Account()), nil
		}
		if err := srv.Apply(ctx, plan); err != nil {
			return *serverState(err, "account "+want.Account()), nil
		}
		r.recordApplied(u, have.Exists, setPassword, plan)
	}
	u.Status.PasswordSecretVersion = secret.ResourceVersion
	u.Status.ObservedGeneration = u.Generation
	return sqlState{ready: true, reason: dolphinv1.ReasonApplied, requeue: sqlResync(r.ResyncInterval),
		message: fmt.Sprintf("account %s exists on cluster %s with %d grant(s) as declared", want.Account(), u.Spec.Cluster, len(u.Spec.Grants))}, nil
}

// recordApplied records what was changed, never with the password.
func (r *MySQLUserReconciler) recordApplied(u *dolphinv1.MySQLUser, existed, setPassword bool, plan []sqlobjects.Statement) {
	texts := make([]string, 0, len(plan))
	for _, s := range plan {
		texts = append(texts, s.String())
	}
	reason := "UserCreated"
	switch {
	case !existed:
	case u.Generation != u.Status.ObservedGeneration:
		reason = "UserUpdated"
	case setPassword && len(plan) == 1:
		reason = "PasswordChanged"
	default:
		// The spec did not change: the server did (a change by hand), or the password.
		reason = "DriftRepaired"
	}
	r.loop().event(u, corev1.EventTypeNormal, reason, "Apply", "%s", truncate(strings.Join(texts, "; "), 900))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + " …"
}

// desiredUser is the account u declares, with its password.
func desiredUser(u *dolphinv1.MySQLUser, name, host, password string) sqlobjects.User {
	want := sqlobjects.User{Name: name, Host: host, Password: password, MaxUserConnections: int(u.Spec.MaxUserConnections)}
	if u.Spec.Require != "" && u.Spec.Require != dolphinv1.RequireNone {
		want.Require = string(u.Spec.Require)
	}
	for _, g := range u.Spec.Grants {
		privs := make([]string, len(g.Privileges))
		for i, p := range g.Privileges {
			privs[i] = string(p)
		}
		want.Grants = append(want.Grants, sqlobjects.Grant{Privileges: privs, Database: g.Database, Table: g.Table, GrantOption: g.GrantOption})
	}
	return want
}

// password returns the account's password Secret and password: the user's own Secret
// (labelled so that the cache and watch hold it), or the generated one (created now when it
// does not exist). A state means waiting for the user.
func (r *MySQLUserReconciler) password(ctx context.Context, u *dolphinv1.MySQLUser) (*corev1.Secret, string, *sqlState, error) {
	key := types.NamespacedName{Namespace: u.Namespace, Name: resources.UserPasswordSecretName(u)}
	pwKey := resources.UserPasswordKey(u)
	s, err := readSecretCachedOrLive(ctx, r.Client, r.apiReader(), key)
	generated := u.Spec.PasswordSecretKeyRef == nil
	switch {
	case apierrors.IsNotFound(err) && generated:
		s = resources.GeneratedUserSecret(u, r.newPassword())
		if err := r.Client.Create(ctx, s); err != nil {
			return nil, "", nil, fmt.Errorf("creating password Secret %s: %w", key, err)
		}
		r.loop().event(u, corev1.EventTypeNormal, "PasswordGenerated", "Create", "generated a password into Secret %s (key %s)", key.Name, pwKey)
	case apierrors.IsNotFound(err):
		return nil, "", &sqlState{reason: dolphinv1.ReasonPasswordSecretNotFound, requeue: userSecretPollInterval, message: fmt.Sprintf(
			"Secret %q named in spec.passwordSecretKeyRef does not exist: create it with the password under the key %q", key.Name, pwKey)}, nil
	case err != nil:
		return nil, "", nil, fmt.Errorf("reading password Secret %s: %w", key, err)
	}
	if generated && !metav1.IsControlledBy(s, u) {
		return nil, "", &sqlState{reason: dolphinv1.ReasonConflict, message: fmt.Sprintf(
			"Secret %q exists and is not this MySQLUser's: delete it to let Dolphin generate one, or name it in spec.passwordSecretKeyRef to use its password", key.Name)}, nil
	}
	if !generated {
		labelled, err := labelCredentialsSecret(ctx, r.Client, s)
		if err != nil {
			return nil, "", nil, err
		}
		if labelled {
			r.loop().event(u, corev1.EventTypeNormal, "PasswordSecretLabeled", "Label",
				"labelled Secret %s with %s=true so that Dolphin watches it for password changes (nothing else in it was changed)", key.Name, resources.CredentialsLabel)
		}
	}
	pw := string(s.Data[pwKey])
	if pw == "" {
		return nil, "", &sqlState{reason: dolphinv1.ReasonPasswordSecretNotFound, message: fmt.Sprintf(
			"Secret %q has no key %q (or it is empty): add the password there, or set spec.passwordSecretKeyRef.key", key.Name, pwKey)}, nil
	}
	// The admission webhook rejects weak passwords; this catches one written while it did
	// not run, or into a Secret before Dolphin labelled it.
	if !generated {
		if err := passwords.Check(pw, resources.UserName(u)); err != nil {
			return nil, "", &sqlState{reason: dolphinv1.ReasonPasswordTooWeak, message: fmt.Sprintf(
				"key %q of Secret %q: %v; change it there (the account keeps its current password meanwhile)", pwKey, key.Name, err)}, nil
		}
	}
	return s, pw, nil, nil
}

func userIdentity(cluster, name, host string) string { return cluster + "/" + name + "@" + host }

func (r *MySQLUserReconciler) newPassword() string {
	if r.NewPassword != nil {
		return r.NewPassword()
	}
	return resources.NewPassword()
}

func (r *MySQLUserReconciler) apiReader() client.Reader { return liveReader(r.APIReader, r.Client) }

// SetupWithManager registers the reconciler: it runs on MySQLUser changes, on changes of its
// password Secret (generated, or the user's once labelled), of its cluster's primary or
// phase, on the deletion of a user resource it conflicted with, and every resync interval.
func (r *MySQLUserReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	ix := mgr.GetFieldIndexer()
	for _, idx := range []struct {
		field string
		value func(*dolphinv1.MySQLUser) string
	}{
		{sqlClusterIndex, func(u *dolphinv1.MySQLUser) string { return u.Spec.Cluster }},
		{sqlIdentityIndex, func(u *dolphinv1.MySQLUser) string {
			return userIdentity(u.Spec.Cluster, resources.UserName(u), resources.UserHost(u))
		}},
		{userSecretIndex, resources.UserPasswordSecretName},
	} {
		if err := ix.IndexField(context.Background(), &dolphinv1.MySQLUser{}, idx.field, func(o client.Object) []string {
			return []string{idx.value(o.(*dolphinv1.MySQLUser))}
		}); err != nil {
			return fmt.Errorf("indexing MySQLUsers by %s: %w", idx.field, err)
		}
	}
	usersWith := func(field string, value func(client.Object) string) handler.MapFunc {
		return func(ctx context.Context, o client.Object) []reconcile.Request {
			var list dolphinv1.MySQLUserList
			if err := mgr.GetClient().List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{field: value(o)}); err != nil {
				return nil
			}
			return requestsFor(list.Items)
		}
	}
	name := func(o client.Object) string { return o.GetName() }
	sameAccount := func(o client.Object) string {
		u := o.(*dolphinv1.MySQLUser)
		return userIdentity(u.Spec.Cluster, resources.UserName(u), resources.UserHost(u))
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&dolphinv1.MySQLUser{}).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(usersWith(userSecretIndex, name))).
		Watches(&dolphinv1.MySQLCluster{}, handler.EnqueueRequestsFromMapFunc(usersWith(sqlClusterIndex, name)), builder.WithPredicates(clusterChanged())).
		Watches(&dolphinv1.MySQLUser{}, handler.EnqueueRequestsFromMapFunc(usersWith(sqlIdentityIndex, sameAccount))).
		WithOptions(opts).
		Named("mysqluser").
		Complete(r)
}
