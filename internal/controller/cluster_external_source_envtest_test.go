package controller

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// TestEnvtestServerExternalSourceCheckedBeforeAnything: a cluster bootstrapped from an external
// server (a real mariadbd) creates nothing until the server passes the checks. A missing
// account Secret, then a server whose binary log is not ROW and whose account lacks a
// privilege, each fail the cluster with a message that says what to change, and the
// ExternalSourceReady condition says the same; fixed on the server, the checks pass, the
// condition is True with the server's GTID position, and the StatefulSet is created.
func TestEnvtestServerExternalSourceCheckedBeforeAnything(t *testing.T) {
	needEnvtest(t)
	src := dbtest.Start(t, dbtest.Options{Instances: 1}).Instances[0]
	db, err := sql.Open("mysql", "root@unix("+src.SocketPath()+")/")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exec := func(qs ...string) {
		t.Helper()
		for _, q := range qs {
			if _, err := db.Exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	exec("SET GLOBAL read_only = OFF", "SET GLOBAL binlog_format = 'MIXED'", "CREATE DATABASE app", "CREATE TABLE app.t (id INT PRIMARY KEY)",
		"CREATE USER 'migrate'@'%' IDENTIFIED BY 'mig-pw'",
		"GRANT SELECT, SHOW VIEW, TRIGGER, EVENT, REPLICATION SLAVE ON *.* TO 'migrate'@'%'")

	ctx := context.Background()
	c := directClient(t, nil)
	ns := newNamespace(t)
	r := &MySQLClusterReconciler{Client: c, Scheme: envScheme}
	reconcile := func(key types.NamespacedName) {
		t.Helper()
		if _, err := r.Reconcile(ctrl.LoggerInto(ctx, ctrl.Log), ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatal(err)
		}
	}
	sourceCond := func(key types.NamespacedName) *metav1.Condition {
		return meta.FindStatusCondition(getCluster(t, c, key).Status.Conditions, dolphinv1.ConditionExternalSourceReady)
	}
	key := createCluster(t, c, ns, "moved", dolphinv1.MySQLClusterSpec{Bootstrap: &dolphinv1.BootstrapSpec{
		External: &dolphinv1.ExternalSource{Host: src.Host, Port: int32(src.Port), AccountSecretName: "old-db"}}})

	reconcile(key)
	wantFailed(t, getCluster(t, c, key), "ExternalSourceSecretMissing", "Secret old-db, which does not exist")
	wantNoStatefulSet(t, c, ns)

	mustCreate(t, c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "old-db", Namespace: ns},
		Data: map[string][]byte{"username": []byte("migrate"), "password": []byte("mig-pw")}})
	reconcile(key)
	cl := getCluster(t, c, key)
	wantFailed(t, cl, "ExternalSourceNotReady", "binlog_format")
	for _, want := range []string{"binlog_format", "BINLOG MONITOR"} {
		if cond := sourceCond(key); cond == nil || cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, want) {
			t.Fatalf("ExternalSourceReady %+v, want False naming %s", cond, want)
		}
	}
	wantNoStatefulSet(t, c, ns)

	// Fixed on the server (no spec change): the next check passes.
	exec("SET GLOBAL binlog_format = 'ROW'", "GRANT BINLOG MONITOR ON *.* TO 'migrate'@'%'")
	reconcile(key)
	cond := sourceCond(key)
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != "Checked" || !strings.Contains(cond.Message, "GTID position") {
		t.Fatalf("ExternalSourceReady %+v, want True with the server's position", cond)
	}
	var sts appsv1.StatefulSet
	if err := c.Get(ctx, key, &sts); err != nil {
		t.Fatalf("no StatefulSet after the checks passed: %v", err)
	}
	if cl := getCluster(t, c, key); meta.FindStatusCondition(cl.Status.Conditions, dolphinv1.ConditionRestored) != nil {
		t.Errorf("a cluster copied from an external server has a Restored condition (for backups)")
	}
	// Passed once, not run again: a server that changes later does not stop the cluster.
	exec("SET GLOBAL binlog_format = 'MIXED'")
	reconcile(key)
	if cond := sourceCond(key); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Errorf("ExternalSourceReady after a later reconcile: %+v", cond)
	}
}

// TestEnvtestExternalSourceSpecs: the API server refuses bootstrap.external with another
// bootstrap choice, with pointInTime, and on a MySQL cluster, each with the fix; a CA Secret
// that does not exist is reported like the account's.
func TestEnvtestExternalSourceSpecs(t *testing.T) {
	needEnvtest(t)
	c := directClient(t, nil)
	ns := newNamespace(t)
	ext := &dolphinv1.ExternalSource{Host: "old.example", AccountSecretName: "old-db", CASecretName: "old-ca"}
	for name, tc := range map[string]struct {
		spec dolphinv1.MySQLClusterSpec
		want string
	}{
		"with a backup":    {dolphinv1.MySQLClusterSpec{Bootstrap: &dolphinv1.BootstrapSpec{External: ext, Backup: &dolphinv1.BackupReference{Name: "b"}}}, "set exactly one of"},
		"with pointInTime": {dolphinv1.MySQLClusterSpec{Bootstrap: &dolphinv1.BootstrapSpec{External: ext, PointInTime: &dolphinv1.PointInTimeTarget{Latest: true}}}, "does not go with bootstrap.external"},
		"mysql": {dolphinv1.MySQLClusterSpec{Engine: dolphinv1.EngineSpec{Flavor: dolphinv1.FlavorMySQL, Version: "8.4"},
			Bootstrap: &dolphinv1.BootstrapSpec{External: ext}}, "set engine.flavor to mariadb"},
		"fallback without replicate": {dolphinv1.MySQLClusterSpec{Bootstrap: &dolphinv1.BootstrapSpec{External: &dolphinv1.ExternalSource{
			Host: "old.example", AccountSecretName: "old-db", Fallback: &dolphinv1.ExternalFallback{PrimaryHost: "10.0.0.9"}}}}, "fallback needs replicate: true"},
	} {
		err := c.Create(context.Background(), &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x"}, Spec: tc.spec})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want refused with %q", name, err, tc.want)
		}
	}
	mustCreate(t, c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "old-db", Namespace: ns},
		Data: map[string][]byte{"username": []byte("migrate"), "password": []byte("pw")}})
	key := createCluster(t, c, ns, "tls", dolphinv1.MySQLClusterSpec{Bootstrap: &dolphinv1.BootstrapSpec{External: ext}})
	r := &MySQLClusterReconciler{Client: c, Scheme: envScheme}
	if _, err := r.Reconcile(ctrl.LoggerInto(context.Background(), ctrl.Log), ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	wantFailed(t, getCluster(t, c, key), "ExternalSourceSecretMissing", "Secret old-ca, which does not exist")
	wantNoStatefulSet(t, c, ns)
}

// TestEnvtestServerPhysicalCopyOfExternalSource: a cluster whose external server is copied
// physically (spec.bootstrap.external.physicalCopy, a backup taken on the server's host) is
// checked without the privileges only a logical copy needs, and the backup must be the
// server's: one at a position the server never reached is refused with nothing created; the
// server's own is recorded as status.restoredFrom and every instance restores it.
func TestEnvtestServerPhysicalCopyOfExternalSource(t *testing.T) {
	needEnvtest(t)
	src := dbtest.Start(t, dbtest.Options{Instances: 1}).Instances[0]
	db, err := sql.Open("mysql", "root@unix("+src.SocketPath()+")/")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{"SET GLOBAL read_only = OFF", "CREATE DATABASE app", "CREATE TABLE app.t (id INT PRIMARY KEY)",
		"INSERT INTO app.t VALUES (1), (2)", "CREATE USER 'migrate'@'%' IDENTIFIED BY 'mig-pw'",
		// Replication only: no SELECT, SHOW VIEW, TRIGGER or EVENT (a logical copy's).
		"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'migrate'@'%'"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var pos string
	if err := db.QueryRow("SELECT @@gtid_binlog_pos").Scan(&pos); err != nil {
		t.Fatal(err)
	}
	dir, err := objectstore.NewDirectory(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	putBackup := func(path, gtid string) {
		m := backup.Manifest{Format: backup.ManifestFormat, Name: "old-db", Flavor: "mariadb", Compression: "zstd", GTIDPosition: gtid,
			Objects: []backup.Object{{Key: "data.mbstream.zst", Size: 10, SHA256: strings.Repeat("a", 64), RawSize: 20}}}
		mb, _ := json.Marshal(m)
		putObject(t, dir, path+"data.mbstream.zst", []byte("0123456789"))
		putObject(t, dir, path+backup.ManifestKey, mb)
	}
	putBackup("other/", "0-1-999999")
	putBackup("old-db/", pos)

	c := directClient(t, nil)
	ns := newNamespace(t)
	mustCreate(t, c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "old-db", Namespace: ns},
		Data: map[string][]byte{"username": []byte("migrate"), "password": []byte("mig-pw")}})
	mustCreate(t, c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: ns},
		Data: map[string][]byte{S3AccessKeyIDKey: []byte("AKID"), S3SecretAccessKeyKey: []byte("sekrit")}})
	store := &dolphinv1.BackupStore{S3: &dolphinv1.S3Store{Endpoint: "http://127.0.0.1:1", Bucket: "backups", CredentialsSecret: "s3", Region: "us-east-1"}}
	spec := func(path string) dolphinv1.MySQLClusterSpec {
		return dolphinv1.MySQLClusterSpec{Bootstrap: &dolphinv1.BootstrapSpec{External: &dolphinv1.ExternalSource{
			Host: src.Host, Port: int32(src.Port), AccountSecretName: "old-db", Replicate: true,
			PhysicalCopy: &dolphinv1.BackupLocation{Store: store, Path: path}}}}
	}

	key := createCluster(t, c, ns, "other", spec("other/"))
	bootstrapReconcile(t, c, dir, key)
	cl := getCluster(t, c, key)
	wantFailed(t, cl, "ExternalBackupNotOfSource", "never reached")
	if cond := meta.FindStatusCondition(cl.Status.Conditions, dolphinv1.ConditionExternalSourceReady); cond == nil || cond.Status != metav1.ConditionFalse {
		t.Errorf("ExternalSourceReady %+v, want False", cond)
	}
	if cl.Status.RestoredFrom != nil {
		t.Errorf("restoredFrom %+v recorded for another server's backup", cl.Status.RestoredFrom)
	}
	wantNoStatefulSet(t, c, ns)
	if err := c.Delete(context.Background(), cl); err != nil {
		t.Fatal(err)
	}
	bootstrapReconcile(t, c, dir, key) // the finalizer

	key = createCluster(t, c, ns, "moved", spec("old-db/"))
	bootstrapReconcile(t, c, dir, key)
	cl = getCluster(t, c, key)
	if cond := meta.FindStatusCondition(cl.Status.Conditions, dolphinv1.ConditionExternalSourceReady); cond == nil || cond.Status != metav1.ConditionTrue ||
		!strings.Contains(cond.Message, "the backup old-db/ was taken from it") {
		t.Fatalf("ExternalSourceReady %+v, want True naming the backup", cond)
	}
	if from := cl.Status.RestoredFrom; from == nil || from.Path != "old-db/" || from.GTIDPosition != pos {
		t.Fatalf("restoredFrom %+v, want old-db/ at %s", from, pos)
	}
	if cond := meta.FindStatusCondition(cl.Status.Conditions, dolphinv1.ConditionRestored); cond == nil || cond.Reason != "Restoring" {
		t.Errorf("Restored condition %+v, want Restoring", cond)
	}
	var sts appsv1.StatefulSet
	if err := c.Get(context.Background(), key, &sts); err != nil {
		t.Fatalf("no StatefulSet after the checks passed: %v", err)
	}
	var seed *corev1.Container
	for i, ic := range sts.Spec.Template.Spec.InitContainers {
		if ic.Name == resources.ContainerSeed {
			seed = &sts.Spec.Template.Spec.InitContainers[i]
		}
	}
	if seed == nil || !strings.Contains(strings.Join(seed.Command, " "), "--path old-db/") {
		t.Errorf("the seed container does not restore the backup: %+v", seed)
	}
}
