package controller

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// A cluster whose spec.backup names a MySQLBackupStore: its backups wait, saying so, until the
// store exists; then they go where the store says, and each backup keeps the store it was
// written to even when the MySQLBackupStore changes later.
func TestEnvtestBackupThroughAStoreRef(t *testing.T) {
	needEnvtest(t)
	ctx := context.Background()
	f := newBackupFixtureWith(t, &dolphinv1.BackupSpec{StoreRef: &dolphinv1.BackupStoreReference{Name: "shared"}}, true)
	c, ns := f.c, f.ns
	f.observeTopology()

	bk := f.newBackup("first")
	f.reconcile(bk)
	wantBackupCondition(t, f.get(bk), dolphinv1.BackupPending, "BackupStoreNotFound",
		"spec.backup.storeRef names MySQLBackupStore shared, which does not exist in namespace "+ns)
	if len(f.agent.requests) != 0 {
		t.Fatalf("the agent was asked %d times before the store existed", len(f.agent.requests))
	}

	store := &dolphinv1.MySQLBackupStore{ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: ns},
		Spec: dolphinv1.BackupStore{S3: &dolphinv1.S3Store{Endpoint: "http://127.0.0.1:1", Bucket: "team-backups", Prefix: "shared/", CredentialsSecret: "s3"}}}
	mustCreate(t, c, store)
	f.agent.set(agent.BackupStatus{Phase: agent.BackupRunning}, nil)
	f.reconcile(bk)
	b := f.get(bk)
	wantBackupCondition(t, b, dolphinv1.BackupRunning, "Running", "db-1 (replica)")
	if len(f.agent.requests) != 1 {
		t.Fatalf("%d backup requests, want 1", len(f.agent.requests))
	}
	var sc objectstore.Config
	if err := json.Unmarshal(f.agent.requests[0].Store, &sc); err != nil || sc.S3 == nil || sc.S3.Bucket != "team-backups" ||
		sc.S3.Prefix != "shared/" || sc.S3.AccessKeyID != "AKID" {
		t.Fatalf("the agent was sent store %s (%v), want the MySQLBackupStore's bucket and credentials", f.agent.requests[0].Store, err)
	}
	if b.Status.Store == nil || !equality.Semantic.DeepEqual(*b.Status.Store, store.Spec) {
		t.Fatalf("status.store %+v, want the MySQLBackupStore's spec %+v", b.Status.Store, store.Spec)
	}

	// The store moves to another bucket: the running backup keeps the one it writes to.
	store.Spec.S3.Bucket = "elsewhere"
	if err := c.Update(ctx, store); err != nil {
		t.Fatal(err)
	}
	f.reconcile(bk)
	if got := f.get(bk).Status.Store; got == nil || got.S3 == nil || got.S3.Bucket != "team-backups" {
		t.Fatalf("status.store %+v after the MySQLBackupStore changed, want the bucket the backup was written to", got)
	}
}

// A cluster bootstrapped from a MySQLBackupStore and a path: failed (nothing created) while
// the store does not exist, then restored from it, the store recorded in status.restoredFrom.
func TestEnvtestBootstrapFromAStoreRef(t *testing.T) {
	needEnvtest(t)
	c := directClient(t, nil)
	ns := newNamespace(t)
	dir, err := objectstore.NewDirectory(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: ns},
		Data: map[string][]byte{S3AccessKeyIDKey: []byte("AKID"), S3SecretAccessKeyKey: []byte("sekrit")}})
	path := ns + "/source/nightly-20261201T023000Z/"
	putBackup(t, dir, path, "0-1-42")

	key := createCluster(t, c, ns, "copy", dolphinv1.MySQLClusterSpec{Bootstrap: &dolphinv1.BootstrapSpec{
		From: &dolphinv1.BackupLocation{StoreRef: &dolphinv1.BackupStoreReference{Name: "archive"}, Path: path}}})
	bootstrapReconcile(t, c, dir, key)
	wantFailed(t, getCluster(t, c, key), "BackupStoreNotFound", "spec.bootstrap.from.storeRef names MySQLBackupStore archive")
	wantNoStatefulSet(t, c, ns)

	store := &dolphinv1.MySQLBackupStore{ObjectMeta: metav1.ObjectMeta{Name: "archive", Namespace: ns},
		Spec: dolphinv1.BackupStore{S3: &dolphinv1.S3Store{Endpoint: "http://127.0.0.1:1", Bucket: "backups", CredentialsSecret: "s3", Region: "us-east-1"}}}
	mustCreate(t, c, store)
	bootstrapReconcile(t, c, dir, key)
	cl := getCluster(t, c, key)
	if cl.Status.RestoredFrom == nil || cl.Status.RestoredFrom.Path != path || cl.Status.RestoredFrom.GTIDPosition != "0-1-42" ||
		!equality.Semantic.DeepEqual(cl.Status.RestoredFrom.Store, store.Spec) {
		t.Fatalf("restoredFrom %+v, want the MySQLBackupStore's store and the path", cl.Status.RestoredFrom)
	}
	if cl.Status.Phase == dolphinv1.PhaseFailed {
		t.Fatalf("phase %s once the store exists", cl.Status.Phase)
	}
}

// putBackup writes a complete one-object backup with its manifest under path.
func putBackup(t *testing.T, s objectstore.Store, path, gtid string) {
	t.Helper()
	data := []byte("0123456789")
	m := backup.Manifest{Format: backup.ManifestFormat, Name: "nightly", Flavor: "mariadb", Compression: "zstd", GTIDPosition: gtid,
		Objects: []backup.Object{{Key: "data.mbstream.zst", Size: int64(len(data)), SHA256: strings.Repeat("a", 64), RawSize: 20}}}
	mb, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	putObject(t, s, path+"data.mbstream.zst", data)
	putObject(t, s, path+backup.ManifestKey, mb)
}
