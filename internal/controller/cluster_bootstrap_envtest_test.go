package controller

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

func putObject(t *testing.T, s objectstore.Store, key string, data []byte) {
	t.Helper()
	up, err := s.Create(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := up.Write(data); err != nil {
		t.Fatal(err)
	}
	if _, err := up.Commit(); err != nil {
		t.Fatal(err)
	}
}

// bootstrapReconcile runs one reconcile of the cluster reconciler with the store given.
func bootstrapReconcile(t *testing.T, c client.Client, store objectstore.Store, key types.NamespacedName) {
	t.Helper()
	r := &MySQLClusterReconciler{Client: c, Scheme: envScheme,
		OpenStore: func(context.Context, objectstore.Config) (objectstore.Store, error) { return store, nil }}
	if _, err := r.Reconcile(ctrl.LoggerInto(context.Background(), ctrl.Log), ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
}

func wantNoStatefulSet(t *testing.T, c client.Client, ns string) {
	t.Helper()
	var list appsv1.StatefulSetList
	if err := c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Fatalf("a StatefulSet was created for a backup that cannot be restored: %s", list.Items[0].Name)
	}
}

func wantFailed(t *testing.T, cl *dolphinv1.MySQLCluster, reason, msgPart string) {
	t.Helper()
	ready := meta.FindStatusCondition(cl.Status.Conditions, dolphinv1.ConditionReady)
	if cl.Status.Phase != dolphinv1.PhaseFailed || ready == nil || ready.Reason != reason || !strings.Contains(ready.Message, msgPart) {
		t.Fatalf("phase %s, Ready %+v; want Failed with reason %s and a message containing %q", cl.Status.Phase, ready, reason, msgPart)
	}
}

func TestEnvtestBootstrapChecksTheBackupBeforeAnything(t *testing.T) {
	needEnvtest(t)
	ctx := context.Background()
	c := directClient(t, nil)
	ns := newNamespace(t)
	dir, err := objectstore.NewDirectory(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: ns},
		Data: map[string][]byte{S3AccessKeyIDKey: []byte("AKID"), S3SecretAccessKeyKey: []byte("sekrit")}})
	store := dolphinv1.BackupStore{S3: &dolphinv1.S3Store{Endpoint: "http://127.0.0.1:1", Bucket: "backups", CredentialsSecret: "s3", Region: "us-east-1"}}

	// A MySQLBackup that does not exist: Failed, nothing created.
	key := createCluster(t, c, ns, "copy", dolphinv1.MySQLClusterSpec{Bootstrap: &dolphinv1.BootstrapSpec{Backup: &dolphinv1.BackupReference{Name: "nightly"}}})
	bootstrapReconcile(t, c, dir, key)
	wantFailed(t, getCluster(t, c, key), "BootstrapBackupNotFound", "MySQLBackup nightly, which does not exist")
	wantNoStatefulSet(t, c, ns)

	// It exists and succeeded, but an object is shorter than its manifest says.
	bk := &dolphinv1.MySQLBackup{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: ns}, Spec: dolphinv1.MySQLBackupSpec{Cluster: "source"}}
	mustCreate(t, c, bk)
	path := ns + "/source/nightly-20261201T023000Z/"
	bk.Status = dolphinv1.MySQLBackupStatus{Phase: dolphinv1.BackupSucceeded, Store: &store, Path: path}
	if err := c.Status().Update(ctx, bk); err != nil {
		t.Fatal(err)
	}
	m := backup.Manifest{Format: backup.ManifestFormat, Name: "nightly", Flavor: "mariadb", Compression: "zstd", GTIDPosition: "0-1-42",
		Objects: []backup.Object{{Key: "data.mbstream.zst", Size: 10, SHA256: strings.Repeat("a", 64), RawSize: 20}}}
	mb, _ := json.Marshal(m)
	putObject(t, dir, path+"data.mbstream.zst", []byte("short"))
	putObject(t, dir, path+backup.ManifestKey, mb)
	bootstrapReconcile(t, c, dir, key)
	wantFailed(t, getCluster(t, c, key), "BootstrapBackupInvalid", "object data.mbstream.zst")
	wantNoStatefulSet(t, c, ns)

	// The object is complete: the location is recorded and the instances restore it.
	putObject(t, dir, path+"data.mbstream.zst", []byte("0123456789"))
	bootstrapReconcile(t, c, dir, key)
	cl := getCluster(t, c, key)
	if cl.Status.RestoredFrom == nil || cl.Status.RestoredFrom.Path != path || cl.Status.RestoredFrom.GTIDPosition != "0-1-42" || cl.Status.RestoredFrom.Backup != "nightly" {
		t.Fatalf("restoredFrom %+v", cl.Status.RestoredFrom)
	}
	if cond := meta.FindStatusCondition(cl.Status.Conditions, dolphinv1.ConditionRestored); cond == nil || cond.Reason != "Restoring" {
		t.Fatalf("Restored condition %+v", cond)
	}
	var sts appsv1.StatefulSet
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "copy"}, &sts); err != nil {
		t.Fatal(err)
	}
	var restore *corev1.Container
	for i, ic := range sts.Spec.Template.Spec.InitContainers {
		if ic.Name == resources.ContainerSeed {
			restore = &sts.Spec.Template.Spec.InitContainers[i]
		}
	}
	if restore == nil || !strings.Contains(strings.Join(restore.Command, " "), "--path "+path) {
		t.Fatalf("restore init container %+v", restore)
	}

	// Deleting the MySQLBackup later changes nothing: the location is in status.
	if err := c.Delete(ctx, bk); err != nil {
		t.Fatal(err)
	}
	bootstrapReconcile(t, c, dir, key)
	if cl := getCluster(t, c, key); cl.Status.Phase == dolphinv1.PhaseFailed {
		t.Fatalf("the cluster failed after its source MySQLBackup was deleted: %+v", meta.FindStatusCondition(cl.Status.Conditions, dolphinv1.ConditionReady))
	}

	// An instance whose restore fails (its log's last line is the reason) fails the cluster.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "copy-0", Namespace: ns, Labels: resources.CommonLabels(cl)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "mysqld", Image: "mariadb"}}}}
	mustCreate(t, c, pod)
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: resources.ContainerSeed,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error",
			Message: "extracting\ndolphin-restore: object data.mbstream.zst: sha256 mismatch: restore another backup"}}}}
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	bootstrapReconcile(t, c, dir, key)
	cl = getCluster(t, c, key)
	wantFailed(t, cl, "RestoreFailed", "copy-0 failed: dolphin-restore: object data.mbstream.zst: sha256 mismatch")
	if cond := meta.FindStatusCondition(cl.Status.Conditions, dolphinv1.ConditionRestored); cond == nil || cond.Reason != "RestoreFailed" {
		t.Fatalf("Restored condition %+v", cond)
	}
}

func TestEnvtestBackupSpecsAreValidated(t *testing.T) {
	needEnvtest(t)
	ctx := context.Background()
	c := directClient(t, nil)
	ns := newNamespace(t)
	s3 := func() *dolphinv1.S3Store {
		return &dolphinv1.S3Store{Endpoint: "https://s3.example", Bucket: "backups", CredentialsSecret: "s3"}
	}
	withBackup := func(mut func(b *dolphinv1.BackupSpec)) dolphinv1.MySQLClusterSpec {
		b := &dolphinv1.BackupSpec{Store: &dolphinv1.BackupStore{S3: s3()}}
		mut(b)
		return dolphinv1.MySQLClusterSpec{Backup: b}
	}
	cases := []struct {
		name    string
		spec    dolphinv1.MySQLClusterSpec
		message string
	}{
		{"no store kind", withBackup(func(b *dolphinv1.BackupSpec) { b.Store.S3 = nil }), "backup store: set exactly one of s3"},
		{"both store kinds", withBackup(func(b *dolphinv1.BackupSpec) { b.Store.PVC = &dolphinv1.PVCStore{ClaimName: "backups"} }), "backup store: set exactly one of s3"},
		{"claim name with capitals", withBackup(func(b *dolphinv1.BackupSpec) {
			b.Store.S3, b.Store.PVC = nil, &dolphinv1.PVCStore{ClaimName: "My_Claim"}
		}), "pvc.claimName must be a PersistentVolumeClaim name"},
		{"endpoint without scheme", withBackup(func(b *dolphinv1.BackupSpec) { b.Store.S3.Endpoint = "s3.example:9000" }), "s3.endpoint must be an http:// or https:// URL"},
		{"bucket with capitals", withBackup(func(b *dolphinv1.BackupSpec) { b.Store.S3.Bucket = "My_Bucket" }), "s3.bucket must be a bucket name"},
		{"absolute prefix", withBackup(func(b *dolphinv1.BackupSpec) { b.Store.S3.Prefix = "/prod" }), "s3.prefix must be a relative key prefix"},
		{"four-field cron", withBackup(func(b *dolphinv1.BackupSpec) { b.Schedule = &dolphinv1.BackupSchedule{Cron: "0 2 * *"} }), "schedule.cron must have five fields"},
		{"unknown descriptor", withBackup(func(b *dolphinv1.BackupSpec) { b.Schedule = &dolphinv1.BackupSchedule{Cron: "@sometimes"} }), "schedule.cron must have five fields"},
		{"time zone with spaces", withBackup(func(b *dolphinv1.BackupSpec) {
			b.Schedule = &dolphinv1.BackupSchedule{Cron: "@daily", TimeZone: "Central European"}
		}), "schedule.timeZone must be an IANA time zone name"},
		{"empty retention", withBackup(func(b *dolphinv1.BackupSpec) { b.Retention = &dolphinv1.BackupRetention{} }), "retention: set keep"},
		{"keep zero", withBackup(func(b *dolphinv1.BackupSpec) { b.Retention = &dolphinv1.BackupRetention{Keep: new(int32)} }), "keep"},
		{"window of minutes", withBackup(func(b *dolphinv1.BackupSpec) {
			b.Retention = &dolphinv1.BackupRetention{Window: &metav1.Duration{Duration: 60e9}}
		}), "retention.window must be at least 1h"},
		{"bootstrap from both", dolphinv1.MySQLClusterSpec{Bootstrap: &dolphinv1.BootstrapSpec{Backup: &dolphinv1.BackupReference{Name: "x"},
			From: &dolphinv1.BackupLocation{Store: &dolphinv1.BackupStore{S3: s3()}, Path: "a/"}}}, "bootstrap: set exactly one of backup"},
		{"store and storeRef", withBackup(func(b *dolphinv1.BackupSpec) { b.StoreRef = &dolphinv1.BackupStoreReference{Name: "shared"} }),
			"spec.backup: set exactly one of store"},
		{"neither store nor storeRef", withBackup(func(b *dolphinv1.BackupSpec) { b.Store = nil }), "spec.backup: set exactly one of store"},
		{"storeRef not a name", withBackup(func(b *dolphinv1.BackupSpec) {
			b.Store, b.StoreRef = nil, &dolphinv1.BackupStoreReference{Name: "My_Store"}
		}),
			"storeRef.name must be the name of a MySQLBackupStore"},
		{"bootstrap from store and storeRef", dolphinv1.MySQLClusterSpec{Bootstrap: &dolphinv1.BootstrapSpec{
			From: &dolphinv1.BackupLocation{Store: &dolphinv1.BackupStore{S3: s3()}, StoreRef: &dolphinv1.BackupStoreReference{Name: "shared"}, Path: "a/"}}},
			"bootstrap.from: set exactly one of store"},
		{"bootstrap from nothing", dolphinv1.MySQLClusterSpec{Bootstrap: &dolphinv1.BootstrapSpec{}}, "bootstrap: set exactly one of backup"},
		{"point in time with two targets", dolphinv1.MySQLClusterSpec{Bootstrap: &dolphinv1.BootstrapSpec{Backup: &dolphinv1.BackupReference{Name: "x"},
			PointInTime: &dolphinv1.PointInTimeTarget{GTID: "0-1-5", Latest: true}}}, "pointInTime: set exactly one of time"},
		{"point in time without a target", dolphinv1.MySQLClusterSpec{Bootstrap: &dolphinv1.BootstrapSpec{Backup: &dolphinv1.BackupReference{Name: "x"},
			PointInTime: &dolphinv1.PointInTimeTarget{}}}, "pointInTime: set exactly one of time"},
		{"point in time with a bad GTID", dolphinv1.MySQLClusterSpec{Bootstrap: &dolphinv1.BootstrapSpec{Backup: &dolphinv1.BackupReference{Name: "x"},
			PointInTime: &dolphinv1.PointInTimeTarget{GTID: "14:03"}}}, "pointInTime.gtid must be a MariaDB GTID position"},
		{"point in time from a store path", dolphinv1.MySQLClusterSpec{Bootstrap: &dolphinv1.BootstrapSpec{
			From:        &dolphinv1.BackupLocation{Store: &dolphinv1.BackupStore{S3: s3()}, Path: "a/"},
			PointInTime: &dolphinv1.PointInTimeTarget{Latest: true}}}, "bootstrap.pointInTime needs bootstrap.backup or pointInTime.cluster"},
		{"point in time naming both a backup and a cluster", dolphinv1.MySQLClusterSpec{Bootstrap: &dolphinv1.BootstrapSpec{Backup: &dolphinv1.BackupReference{Name: "x"},
			PointInTime: &dolphinv1.PointInTimeTarget{Latest: true, Cluster: "db"}}}, "bootstrap: set exactly one of backup"},
		{"bootstrap path escapes", dolphinv1.MySQLClusterSpec{Bootstrap: &dolphinv1.BootstrapSpec{
			From: &dolphinv1.BackupLocation{Store: &dolphinv1.BackupStore{S3: s3()}, Path: "../other/"}}}, "bootstrap.from.path must be relative"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cl := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Name: "bad-" + string(rune('a'+i)), Namespace: ns}, Spec: tc.spec}
			err := c.Create(ctx, cl)
			if err == nil || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("create = %v, want Invalid with %q", err, tc.message)
			}
		})
	}

	// A MySQLBackupStore is checked like an inline store.
	empty := &dolphinv1.MySQLBackupStore{ObjectMeta: metav1.ObjectMeta{Name: "empty", Namespace: ns}}
	if err := c.Create(ctx, empty); err == nil || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "backup store: set exactly one of s3") {
		t.Fatalf("creating a MySQLBackupStore without s3 or pvc = %v, want Invalid", err)
	}

	// Bootstrap cannot be added, removed or changed later; a MySQLBackup's spec cannot change.
	key := createCluster(t, c, ns, "plain", dolphinv1.MySQLClusterSpec{})
	cl := getCluster(t, c, key)
	cl.Spec.Bootstrap = &dolphinv1.BootstrapSpec{Backup: &dolphinv1.BackupReference{Name: "x"}}
	if err := c.Update(ctx, cl); err == nil || !strings.Contains(err.Error(), "spec.bootstrap can only be set when the cluster is created") {
		t.Fatalf("adding bootstrap = %v", err)
	}
	key = createCluster(t, c, ns, "restored", dolphinv1.MySQLClusterSpec{Bootstrap: &dolphinv1.BootstrapSpec{Backup: &dolphinv1.BackupReference{Name: "x"}}})
	cl = getCluster(t, c, key)
	cl.Spec.Bootstrap.Backup.Name = "y"
	if err := c.Update(ctx, cl); err == nil || !strings.Contains(err.Error(), "spec.bootstrap is immutable") {
		t.Fatalf("changing bootstrap = %v", err)
	}
	bk := &dolphinv1.MySQLBackup{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: ns}, Spec: dolphinv1.MySQLBackupSpec{Cluster: "plain"}}
	mustCreate(t, c, bk)
	bk.Spec.Cluster = "other"
	if err := c.Update(ctx, bk); err == nil || !strings.Contains(err.Error(), "a MySQLBackup's cluster and target are immutable") {
		t.Fatalf("changing a backup's cluster = %v", err)
	}
}
