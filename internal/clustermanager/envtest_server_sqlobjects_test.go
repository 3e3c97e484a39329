package clustermanager

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// loginTo opens a connection to a server as user, checked with a ping (so that a refused
// password is the error).
func loginTo(ctx context.Context, in *dbtest.Instance, user, password, database string) (*sql.DB, error) {
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr, cfg.User, cfg.Passwd, cfg.DBName = "tcp", in.Addr(), user, password, database
	cfg.Timeout, cfg.ReadTimeout = 3*time.Second, 10*time.Second
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(conn)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// asOperator logs in to instance i as Dolphin's operator account (an administrator making
// changes by hand).
func (o *operatorEnv) asOperator(t *testing.T, i int) *sql.DB {
	t.Helper()
	var s corev1.Secret
	if err := o.c.Get(o.ctx, client.ObjectKey{Namespace: o.ns, Name: "shop-credentials"}, &s); err != nil {
		t.Fatal(err)
	}
	db, err := loginTo(o.ctx, o.db.Instances[i], resources.OperatorUser, string(s.Data[resources.OperatorPasswordKey]), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// readyCondition reads the Ready condition of a MySQLUser or MySQLDatabase.
func (o *operatorEnv) readyCondition(obj client.Object) (*metav1.Condition, error) {
	if err := o.c.Get(o.ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return nil, err
	}
	var conds []metav1.Condition
	switch x := obj.(type) {
	case *dolphinv1.MySQLUser:
		conds = x.Status.Conditions
	case *dolphinv1.MySQLDatabase:
		conds = x.Status.Conditions
	}
	c := meta.FindStatusCondition(conds, dolphinv1.ConditionReady)
	if c == nil {
		return nil, fmt.Errorf("no Ready condition yet")
	}
	return c, nil
}

// waitCondition waits until obj's Ready condition has the status and reason.
func (o *operatorEnv) waitCondition(t *testing.T, obj client.Object, status metav1.ConditionStatus, reason string) *metav1.Condition {
	t.Helper()
	var got *metav1.Condition
	testenv.Eventually(t, 60*time.Second, fmt.Sprintf("%s Ready=%s %s", obj.GetName(), status, reason), func() error {
		c, err := o.readyCondition(obj)
		if err != nil {
			return err
		}
		if c.Status != status || c.Reason != reason {
			return fmt.Errorf("Ready=%s %s: %s", c.Status, c.Reason, c.Message)
		}
		got = c
		return nil
	})
	return got
}

// eventsAbout lists the reasons and notes of the events regarding one object.
func (o *operatorEnv) eventsAbout(t *testing.T, name string) map[string]string {
	t.Helper()
	var evs eventsv1.EventList
	if err := o.c.List(o.ctx, &evs, client.InNamespace(o.ns)); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range evs.Items {
		if e.Regarding.Name == name {
			out[e.Reason] += e.Note + "\n"
		}
	}
	return out
}

// canRun reports whether a new session of the account can run q (privileges are read at
// login, database privileges at USE).
func canRun(ctx context.Context, in *dbtest.Instance, user, password, database, q string) error {
	db, err := loginTo(ctx, in, user, password, database)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, q)
	return err
}

// TestEnvtestServerUsersAndDatabases drives MySQLUser and MySQLDatabase through a real API
// server and the topology engine onto real servers: a user waiting for a missing cluster, a
// database and an account with a generated password, replication of both to a replica, a
// grant removed by hand that comes back, a privilege removed from the spec that is revoked,
// a password rotated in the user's own Secret under a connected client, a conflict between
// two resources, and both cleanup policies.
func TestEnvtestServerUsersAndDatabases(t *testing.T) {
	o := startOperator(t, "sqlobjects", dolphinv1.FailoverSpec{
		Detection: dolphinv1.DetectionSpec{Interval: &metav1.Duration{Duration: 500 * time.Millisecond}, Attempts: 3}}, nil)
	ctx, c, ns := o.ctx, o.c, o.ns
	primary, replica := o.db.Instances[0], o.db.Instances[1]

	// A user of a cluster that does not exist waits, saying so; deleting it needs nothing.
	orphan := &dolphinv1.MySQLUser{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orphan"},
		Spec: dolphinv1.MySQLUserSpec{Cluster: "nope", Grants: []dolphinv1.Grant{{Privileges: []dolphinv1.Privilege{"SELECT"}, Database: "x"}}}}
	if err := c.Create(ctx, orphan); err != nil {
		t.Fatal(err)
	}
	cond := o.waitCondition(t, orphan, metav1.ConditionFalse, dolphinv1.ReasonClusterNotFound)
	if !strings.Contains(cond.Message, `MySQLCluster "nope" does not exist`) || !strings.Contains(cond.Message, "spec.cluster") {
		t.Errorf("ClusterNotFound message does not say what to change: %s", cond.Message)
	}

	o.waitReady(t)

	// A database with declared defaults.
	shopDB := &dolphinv1.MySQLDatabase{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shop-data"},
		Spec: dolphinv1.MySQLDatabaseSpec{Cluster: "shop", Name: "shop_data", CharacterSet: "utf8mb4", Collation: "utf8mb4_bin"}}
	if err := c.Create(ctx, shopDB); err != nil {
		t.Fatal(err)
	}
	o.waitCondition(t, shopDB, metav1.ConditionTrue, dolphinv1.ReasonApplied)
	if shopDB.Status.Collation != "utf8mb4_bin" || shopDB.Status.Database != "shop_data" || shopDB.Status.ObservedGeneration != shopDB.Generation {
		t.Errorf("database status %+v", shopDB.Status)
	}

	// An application account with a generated password.
	app := &dolphinv1.MySQLUser{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: dolphinv1.MySQLUserSpec{Cluster: "shop", MaxUserConnections: 20, Grants: []dolphinv1.Grant{
			{Privileges: []dolphinv1.Privilege{"SELECT", "INSERT", "UPDATE", "DELETE", "CREATE"}, Database: "shop_data"},
		}}}
	if err := c.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	o.waitCondition(t, app, metav1.ConditionTrue, dolphinv1.ReasonApplied)
	var gen corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "mysqluser-app"}, &gen); err != nil {
		t.Fatalf("generated Secret: %v", err)
	}
	password := string(gen.Data["password"])
	if len(password) < 20 || string(gen.Data["username"]) != "app" || string(gen.Data["host"]) != "shop-primary.sqlobjects.svc" || string(gen.Data["port"]) != "3306" {
		t.Errorf("generated Secret data: username=%q host=%q port=%q password of %d characters",
			gen.Data["username"], gen.Data["host"], gen.Data["port"], len(password))
	}
	if !metav1.IsControlledBy(&gen, app) {
		t.Error("the generated Secret is not owned by its MySQLUser")
	}
	if app.Status.Account != "app@%" || app.Status.PasswordSecret != "mysqluser-app" {
		t.Errorf("user status %+v", app.Status)
	}
	if err := canRun(ctx, primary, "app", password, "shop_data", "CREATE TABLE t (id INT PRIMARY KEY)"); err != nil {
		t.Fatalf("the account cannot create a table in its database: %v", err)
	}
	if err := canRun(ctx, primary, "app", password, "shop_data", "INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if err := canRun(ctx, primary, "app", password, "shop_data", "DROP TABLE t"); err == nil {
		t.Error("the account dropped a table without DROP")
	}
	// It replicated: the replica has the account and the row.
	testenv.Eventually(t, 30*time.Second, "account and row on the replica", func() error {
		db, err := loginTo(ctx, replica, "app", password, "shop_data")
		if err != nil {
			return err
		}
		defer db.Close()
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM t").Scan(&n); err != nil || n != 1 {
			return fmt.Errorf("rows %d: %v", n, err)
		}
		return nil
	})
	// An application account is stopped by read_only: it cannot write on the replica.
	if err := canRun(ctx, replica, "app", password, "shop_data", "INSERT INTO t VALUES (2)"); err == nil {
		t.Error("the application account wrote on a read-only replica")
	}

	// Changed by hand: a grant revoked, a global privilege added, the limit changed. The
	// resync puts it back.
	op := o.asOperator(t, 0)
	for _, q := range []string{"REVOKE INSERT ON `shop\\_data`.* FROM 'app'@'%'", "GRANT PROCESS ON *.* TO 'app'@'%'",
		"ALTER USER 'app'@'%' WITH MAX_USER_CONNECTIONS 1"} {
		if _, err := op.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	testenv.Eventually(t, 30*time.Second, "the change by hand repaired", func() error {
		var procs, limit int
		if err := op.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.USER_PRIVILEGES WHERE GRANTEE = \"'app'@'%'\" AND PRIVILEGE_TYPE = 'PROCESS'").Scan(&procs); err != nil {
			return err
		}
		if err := op.QueryRowContext(ctx, "SELECT max_user_connections FROM mysql.user WHERE User = 'app'").Scan(&limit); err != nil {
			return err
		}
		if procs != 0 || limit != 20 {
			return fmt.Errorf("PROCESS held: %d, max_user_connections %d", procs, limit)
		}
		return canRun(ctx, primary, "app", password, "shop_data", "INSERT INTO t VALUES (3)")
	})
	if evs := o.eventsAbout(t, "app"); !strings.Contains(evs["DriftRepaired"], "GRANT INSERT ON `shop\\_data`.* TO 'app'@'%'") {
		t.Errorf("no DriftRepaired event naming the repair: %v", evs)
	}

	// A privilege removed from the spec is revoked.
	patch := client.MergeFrom(app.DeepCopy())
	app.Spec.Grants[0].Privileges = []dolphinv1.Privilege{"SELECT", "INSERT", "UPDATE", "CREATE"}
	if err := c.Patch(ctx, app, patch); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "DELETE revoked", func() error {
		if err := canRun(ctx, primary, "app", password, "shop_data", "DELETE FROM t"); err == nil {
			return fmt.Errorf("DELETE still allowed")
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(app), app); err != nil {
			return err
		}
		if app.Status.ObservedGeneration != app.Generation {
			return fmt.Errorf("observedGeneration %d, generation %d", app.Status.ObservedGeneration, app.Generation)
		}
		return nil
	})

	// A user whose own Secret does not exist yet waits, then takes it when it appears; a
	// password change there is applied under a connected client.
	rotor := &dolphinv1.MySQLUser{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rotor"},
		Spec: dolphinv1.MySQLUserSpec{Cluster: "shop", PasswordSecretKeyRef: &dolphinv1.SecretKeyReference{Name: "rotor-pw", Key: "pw"},
			Grants: []dolphinv1.Grant{{Privileges: []dolphinv1.Privilege{"SELECT", "INSERT"}, Database: "shop_data"}}}}
	if err := c.Create(ctx, rotor); err != nil {
		t.Fatal(err)
	}
	cond = o.waitCondition(t, rotor, metav1.ConditionFalse, dolphinv1.ReasonPasswordSecretNotFound)
	if !strings.Contains(cond.Message, `"rotor-pw"`) || !strings.Contains(cond.Message, `"pw"`) {
		t.Errorf("PasswordSecretNotFound message does not name the Secret and key: %s", cond.Message)
	}
	userSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rotor-pw"}, StringData: map[string]string{"pw": "first-Sw1tch-9x"}}
	if err := c.Create(ctx, userSecret); err != nil {
		t.Fatal(err)
	}
	o.waitCondition(t, rotor, metav1.ConditionTrue, dolphinv1.ReasonApplied)
	session, err := loginTo(ctx, primary, "rotor", "first-Sw1tch-9x", "shop_data")
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	session.SetMaxOpenConns(1) // one session, kept open across the rotation
	if _, err := session.ExecContext(ctx, "INSERT INTO t VALUES (10)"); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(userSecret), userSecret); err != nil {
		t.Fatal(err)
	}
	if userSecret.Labels[resources.CredentialsLabel] != "true" {
		t.Errorf("the user's Secret was not labelled for the watch: %v", userSecret.Labels)
	}
	userSecret.Data["pw"] = []byte("second-Sw1tch-9x")
	if err := c.Update(ctx, userSecret); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "new password accepted", func() error {
		db, err := loginTo(ctx, primary, "rotor", "second-Sw1tch-9x", "shop_data")
		if err != nil {
			return err
		}
		return db.Close()
	})
	if _, err := session.ExecContext(ctx, "INSERT INTO t VALUES (11)"); err != nil {
		t.Errorf("the session opened before the rotation broke: %v", err)
	}
	if db, err := loginTo(ctx, primary, "rotor", "first-Sw1tch-9x", "shop_data"); err == nil {
		db.Close()
		t.Error("the old password still logs in")
	}
	// A weak password written into the Secret (no admission webhook runs here) is not
	// applied: the condition says why, the account keeps the password it has.
	if err := c.Get(ctx, client.ObjectKeyFromObject(userSecret), userSecret); err != nil {
		t.Fatal(err)
	}
	userSecret.Data["pw"] = []byte("rotor2024")
	if err := c.Update(ctx, userSecret); err != nil {
		t.Fatal(err)
	}
	cond = o.waitCondition(t, rotor, metav1.ConditionFalse, dolphinv1.ReasonPasswordTooWeak)
	if !strings.Contains(cond.Message, `key "pw" of Secret "rotor-pw"`) || !strings.Contains(cond.Message, "contains the user name") {
		t.Errorf("PasswordTooWeak message: %s", cond.Message)
	}
	if db, err := loginTo(ctx, primary, "rotor", "second-Sw1tch-9x", "shop_data"); err != nil {
		t.Errorf("the account lost its password to a weak one that was refused: %v", err)
	} else {
		db.Close()
	}

	// No password, generated or the user's, is in any event.
	var evs eventsv1.EventList
	if err := c.List(ctx, &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		for _, pw := range []string{password, "first-Sw1tch-9x", "second-Sw1tch-9x"} {
			if strings.Contains(e.Note, pw) {
				t.Errorf("event %s/%s shows a password: %s", e.Regarding.Name, e.Reason, e.Note)
			}
		}
	}

	// A second resource for the same account is refused, and deleting it drops nothing.
	dup := &dolphinv1.MySQLUser{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-again"},
		Spec: dolphinv1.MySQLUserSpec{Cluster: "shop", Name: "app"}}
	if err := c.Create(ctx, dup); err != nil {
		t.Fatal(err)
	}
	cond = o.waitCondition(t, dup, metav1.ConditionFalse, dolphinv1.ReasonConflict)
	if !strings.Contains(cond.Message, `"app" already manages app@%`) {
		t.Errorf("Conflict message: %s", cond.Message)
	}
	if err := c.Delete(ctx, dup); err != nil {
		t.Fatal(err)
	}
	waitGone(t, o, dup)

	// Cleanup policies: the account (Delete, the default) is dropped once no resource names
	// it, the database (Retain, the default) stays; a database with Delete is dropped. The
	// orphan, never applied, goes without SQL.
	scratch := &dolphinv1.MySQLDatabase{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "scratch"},
		Spec: dolphinv1.MySQLDatabaseSpec{Cluster: "shop", CleanupPolicy: dolphinv1.CleanupDelete}}
	if err := c.Create(ctx, scratch); err != nil {
		t.Fatal(err)
	}
	o.waitCondition(t, scratch, metav1.ConditionTrue, dolphinv1.ReasonApplied)
	exists := func(q string, args ...any) bool {
		t.Helper()
		var n int
		if err := op.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	// The winner of a conflict deleted (as the Conflict message suggests) while the other
	// still names the account: the account stays, and the other takes it over.
	heir := &dolphinv1.MySQLUser{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-heir"},
		Spec: dolphinv1.MySQLUserSpec{Cluster: "shop", Name: "app", Grants: app.Spec.Grants}}
	if err := c.Create(ctx, heir); err != nil {
		t.Fatal(err)
	}
	o.waitCondition(t, heir, metav1.ConditionFalse, dolphinv1.ReasonConflict)
	if err := c.Delete(ctx, app); err != nil {
		t.Fatal(err)
	}
	waitGone(t, o, app)
	if !exists("SELECT COUNT(*) FROM mysql.user WHERE User = 'app'") {
		t.Fatal("deleting the winner of a conflict dropped the account the other resource names")
	}
	o.waitCondition(t, heir, metav1.ConditionTrue, dolphinv1.ReasonApplied)
	for _, obj := range []client.Object{heir, shopDB, scratch, orphan} {
		if err := c.Delete(ctx, obj); err != nil {
			t.Fatal(err)
		}
		waitGone(t, o, obj)
	}
	if exists("SELECT COUNT(*) FROM mysql.user WHERE User = 'app'") {
		t.Error("account app still exists after its MySQLUser (cleanupPolicy Delete) was deleted")
	}
	if !exists("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = 'shop_data'") {
		t.Error("database shop_data was dropped although its cleanupPolicy is Retain")
	}
	if exists("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = 'scratch'") {
		t.Error("database scratch still exists after its MySQLDatabase (cleanupPolicy Delete) was deleted")
	}
	if !exists("SELECT COUNT(*) FROM mysql.user WHERE User = 'rotor'") {
		t.Error("account rotor, still declared, is gone")
	}
}

// waitGone waits until obj no longer exists (its finalizer released).
func waitGone(t *testing.T, o *operatorEnv, obj client.Object) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, obj.GetName()+" deleted", func() error {
		err := o.c.Get(o.ctx, client.ObjectKeyFromObject(obj), obj)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (finalizers %v): %v", obj.GetFinalizers(), err)
	})
}

// The application account of the writers in these tests, declared as a MySQLUser.
const appUser, appPassword = "app", "Wr1ter-Secret-9"

// declareAppAccount declares database app and the application account app (SELECT, INSERT
// on it, and CREATE for its table) as MySQLDatabase and MySQLUser resources, waits until both
// are applied, and creates table app.rows as that account on the primary.
func (o *operatorEnv) declareAppAccount(t *testing.T) {
	t.Helper()
	pw := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: o.ns, Name: "app-password"}, StringData: map[string]string{"password": appPassword}}
	db := &dolphinv1.MySQLDatabase{ObjectMeta: metav1.ObjectMeta{Namespace: o.ns, Name: "app"}, Spec: dolphinv1.MySQLDatabaseSpec{Cluster: "shop"}}
	user := &dolphinv1.MySQLUser{ObjectMeta: metav1.ObjectMeta{Namespace: o.ns, Name: appUser},
		Spec: dolphinv1.MySQLUserSpec{Cluster: "shop", PasswordSecretKeyRef: &dolphinv1.SecretKeyReference{Name: pw.Name},
			Grants: []dolphinv1.Grant{{Privileges: []dolphinv1.Privilege{"SELECT", "INSERT", "CREATE"}, Database: "app"}}}}
	for _, obj := range []client.Object{pw, db, user} {
		if err := o.c.Create(o.ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	o.waitCondition(t, db, metav1.ConditionTrue, dolphinv1.ReasonApplied)
	o.waitCondition(t, user, metav1.ConditionTrue, dolphinv1.ReasonApplied)
	var c dolphinv1.MySQLCluster
	if err := o.c.Get(o.ctx, o.key, &c); err != nil {
		t.Fatal(err)
	}
	var primary int
	if _, err := fmt.Sscanf(c.Status.CurrentPrimary, "shop-%d", &primary); err != nil {
		t.Fatalf("current primary %q: %v", c.Status.CurrentPrimary, err)
	}
	if err := canRun(o.ctx, o.db.Instances[primary], appUser, appPassword, "app", "CREATE TABLE app.rows (id BIGINT PRIMARY KEY)"); err != nil {
		t.Fatalf("creating app.rows as the application account: %v", err)
	}
}
