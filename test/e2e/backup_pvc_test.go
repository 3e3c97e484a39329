package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestLocalPVCBackupStore: backups to a PersistentVolumeClaim, described by a MySQLBackupStore
// the cluster names (spec.backup.storeRef), through the store server Dolphin runs for the
// claim — taken under a writer, written to the claim's volume with the manifest last, restored
// into a new cluster from the store and the path (bootstrap.from.storeRef, row by row),
// checked by a verification pod, and deleted with their objects; the store cannot be deleted
// while the cluster names it.
func TestLocalPVCBackupStore(t *testing.T) {
	s := upStack(t)
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "backups"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if err := s.c.Create(s.ctx, pvc); err != nil {
		t.Fatal(err)
	}
	_, srcKey := s.healthyAppCluster("psrc")
	var c dolphinv1.MySQLCluster
	if err := s.c.Get(s.ctx, srcKey, &c); err != nil {
		t.Fatal(err)
	}
	// The cluster names a MySQLBackupStore before it exists; creating it starts the store server.
	patch := client.MergeFrom(c.DeepCopy())
	c.Spec.Backup = &dolphinv1.BackupSpec{StoreRef: &dolphinv1.BackupStoreReference{Name: "claim"}}
	if err := s.c.Patch(s.ctx, &c, patch); err != nil {
		t.Fatal(err)
	}
	store := &dolphinv1.MySQLBackupStore{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "claim"},
		Spec: dolphinv1.BackupStore{PVC: &dolphinv1.PVCStore{ClaimName: "backups"}}}
	if err := s.c.Create(s.ctx, store); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 120*time.Second, "the store server of the claim ready", func() error {
		var d appsv1.Deployment
		if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: "dolphin-store-backups"}, &d); err != nil {
			return err
		}
		if d.Status.ReadyReplicas < 1 {
			return fmt.Errorf("ready replicas %d", d.Status.ReadyReplicas)
		}
		if len(d.OwnerReferences) == 0 || d.OwnerReferences[0].Name != "psrc" {
			return fmt.Errorf("owners %+v, want the cluster", d.OwnerReferences)
		}
		return nil
	})

	w := s.startSteadyAppWriter("psrc")
	time.Sleep(2 * time.Second)
	ackedBefore, _ := w.ackedIDs()
	b := s.backupAndWait("pb1", "psrc", dolphinv1.BackupSucceeded)
	w.finish()
	t.Logf("pb1: source %s, GTID %s, %s in %s at %s", b.Status.SourceInstance, b.Status.GTIDPosition,
		b.Status.StoredSize, b.Status.Duration, b.Status.Manifest)
	if !strings.HasPrefix(b.Status.Manifest, "pvc://backups/") || b.Status.SourceRole != dolphinv1.RoleReplica {
		t.Fatalf("backup status %+v: want a replica's backup with its manifest on pvc://backups/", b.Status)
	}
	if err := s.c.Get(s.ctx, client.ObjectKeyFromObject(pvc), pvc); err != nil {
		t.Fatal(err)
	}
	volume := s.claimDir(pvc.Name)
	manifest := filepath.Join(volume, b.Status.Path, "manifest.json")
	if _, err := os.Stat(manifest); err != nil {
		t.Fatalf("the manifest is not on the claim's volume: %v", err)
	}

	// The store a cluster names cannot be deleted (the webhook the local stack registers from
	// config/webhook, as a real install does).
	if err := s.c.Delete(s.ctx, store); err == nil || !strings.Contains(err.Error(), "still named by MySQLCluster psrc (spec.backup.storeRef)") {
		t.Fatalf("deleting the MySQLBackupStore psrc names: %v, want it refused", err)
	}

	// Restore into a new cluster through the same store server, from the store and the path.
	dst := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "pdst"},
		Spec: dolphinv1.MySQLClusterSpec{Instances: 1, Storage: dolphinv1.StorageSpec{DeletePolicy: dolphinv1.VolumeDelete},
			MySQLConfig: c.Spec.MySQLConfig,
			Bootstrap: &dolphinv1.BootstrapSpec{From: &dolphinv1.BackupLocation{
				StoreRef: &dolphinv1.BackupStoreReference{Name: "claim"}, Path: b.Status.Path}}}}
	if err := s.c.Create(s.ctx, dst); err != nil {
		t.Fatal(err)
	}
	dstKey := client.ObjectKeyFromObject(dst)
	s.waitHealthyN(dstKey, 1)
	s.wantClusterCondition(dstKey, dolphinv1.ConditionRestored, metav1.ConditionTrue, b.Status.Path)
	srcIDs := s.ids(s.sqlDB(s.serviceAddr("psrc-primary")))
	dstPass := s.secretValue("pdst-credentials", "operator-password")
	got := s.ids(s.sqlDBAs("dolphin", dstPass, s.clusterPods("pdst")[0].Status.PodIP+":3306"))
	if len(got) == 0 {
		t.Fatal("the restored instance holds no rows")
	}
	last := got[len(got)-1]
	var want []int64
	for _, id := range srcIDs {
		if id <= last {
			want = append(want, id)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%d rows up to id %d, the source holds %d up to it: not a consistent point of its history", len(got), last, len(want))
	}
	for id := range ackedBefore {
		if id > last {
			t.Fatalf("write %d, acknowledged before the backup, is missing (restored up to %d)", id, last)
		}
	}
	t.Logf("pdst: %d rows restored up to id %d (source %d rows)", len(got), last, len(srcIDs))

	// A restore check through the store server.
	b = s.verifyAndWait("pb1", "1", dolphinv1.VerificationVerified)
	t.Logf("pb1 verified: %s", b.Status.Verification.Message)

	// Deleting the backup, its deletionPolicy changed to Delete (Retain by default keeps the
	// data), deletes its objects from the claim.
	patch = client.MergeFrom(b.DeepCopy())
	b.Spec.DeletionPolicy = dolphinv1.BackupDelete
	if err := s.c.Patch(s.ctx, b, patch); err != nil {
		t.Fatal(err)
	}
	if err := s.c.Delete(s.ctx, b); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "pb1's objects deleted from the claim", func() error {
		if _, err := os.Stat(manifest); err == nil {
			return fmt.Errorf("%s still exists", manifest)
		}
		var left dolphinv1.MySQLBackup
		if err := s.c.Get(s.ctx, client.ObjectKeyFromObject(b), &left); err == nil {
			return fmt.Errorf("MySQLBackup pb1 still exists")
		}
		return nil
	})
}
