package e2e

import (
	"fmt"
	"testing"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/controller"
	"github.com/dolphin-operator/dolphin/internal/objectstore/s3test"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestFailingStorageGrowthKeepsScheduledBackups (issue 32: a user error never stops
// protection): a cluster on a StorageClass that cannot expand is asked for bigger volumes.
// The storage step fails with a condition that says what to change and the cluster is
// Degraded, not Failed — and its schedule keeps taking backups, which succeed, while the
// error stands.
func TestFailingStorageGrowthKeepsScheduledBackups(t *testing.T) {
	s := upStack(t)
	srv := s3test.StartOn(t, s.gateway())
	s.createS3Secret("s3", srv.AccessKey, srv.SecretKey)

	// A class like the node's default one, without volume expansion.
	var classes storagev1.StorageClassList
	if err := s.c.List(s.ctx, &classes); err != nil {
		t.Fatal(err)
	}
	var base *storagev1.StorageClass
	for i := range classes.Items {
		if classes.Items[i].Annotations["storageclass.kubernetes.io/is-default-class"] == "true" {
			base = &classes.Items[i]
		}
	}
	if base == nil {
		t.Fatalf("no default StorageClass among %d", len(classes.Items))
	}
	fixed := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "fixed-" + s.ns}, Provisioner: base.Provisioner,
		Parameters: base.Parameters, ReclaimPolicy: base.ReclaimPolicy, VolumeBindingMode: base.VolumeBindingMode, AllowVolumeExpansion: ptr.To(false)}
	if err := s.c.Create(s.ctx, fixed); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.c.Delete(s.ctx, fixed) })

	cluster := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "grow"},
		Spec: dolphinv1.MySQLClusterSpec{Instances: 2,
			Storage:     dolphinv1.StorageSpec{StorageClassName: &fixed.Name, DeletePolicy: dolphinv1.VolumeDelete},
			MySQLConfig: map[string]dolphinv1.MySQLConfigValue{"innodb_buffer_pool_size": "32M"},
			Backup: &dolphinv1.BackupSpec{Store: &dolphinv1.BackupStore{S3: &dolphinv1.S3Store{
				Endpoint: srv.Endpoint, Bucket: srv.Bucket, Prefix: "e2e/", ForcePathStyle: true, CredentialsSecret: "s3"}},
				Schedule:  &dolphinv1.BackupSchedule{Cron: "@every 1m"},
				Retention: &dolphinv1.BackupRetention{Keep: ptr.To(int32(5))}}}}
	if err := s.c.Create(s.ctx, cluster); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(cluster)
	s.waitHealthyN(key, 2)

	grown := time.Now()
	s.patchCluster(key, func(c *dolphinv1.MySQLCluster) { c.Spec.Storage.Size = ptr.To(resource.MustParse("2Gi")) })
	testenv.Eventually(t, 60*time.Second, "the storage step's error reported", func() error {
		var c dolphinv1.MySQLCluster
		if err := s.c.Get(s.ctx, key, &c); err != nil {
			return err
		}
		d := meta.FindStatusCondition(c.Status.Conditions, dolphinv1.ConditionDegraded)
		if d == nil || d.Reason != "StorageNotExpandable" || c.Status.Phase != dolphinv1.PhaseDegraded {
			return fmt.Errorf("phase %s, Degraded %+v", c.Status.Phase, d)
		}
		return nil
	})
	t.Logf("storage growth refused: Degraded/StorageNotExpandable, phase Degraded (not Failed)")

	// A scheduled backup created after the refusal succeeds.
	var taken *dolphinv1.MySQLBackup
	testenv.Eventually(t, 180*time.Second, "a scheduled backup after the refusal succeeded", func() error {
		var list dolphinv1.MySQLBackupList
		if err := s.c.List(s.ctx, &list, client.InNamespace(s.ns), client.MatchingLabels{controller.BackupScheduledLabel: "true"}); err != nil {
			return err
		}
		for i := range list.Items {
			b := &list.Items[i]
			if b.CreationTimestamp.Time.After(grown) && b.Status.Phase == dolphinv1.BackupSucceeded {
				taken = b
				return nil
			}
		}
		return fmt.Errorf("%d scheduled backups, none succeeded since the refusal", len(list.Items))
	})
	// The cluster's status follows the backup's at its next reconcile (the backup's change
	// triggers it): the success is reported, and the refusal still is.
	testenv.Eventually(t, 30*time.Second, "the backup's success in the cluster's status, the refusal still reported", func() error {
		var c dolphinv1.MySQLCluster
		if err := s.c.Get(s.ctx, key, &c); err != nil {
			return err
		}
		if d := meta.FindStatusCondition(c.Status.Conditions, dolphinv1.ConditionDegraded); d == nil || d.Reason != "StorageNotExpandable" {
			return fmt.Errorf("the storage error is no longer reported: %+v", d)
		}
		if lb := meta.FindStatusCondition(c.Status.Conditions, dolphinv1.ConditionLastBackupSucceeded); lb == nil || lb.Status != metav1.ConditionTrue {
			return fmt.Errorf("LastBackupSucceeded %+v", lb)
		}
		return nil
	})
	t.Logf("scheduled backup %s succeeded %.0fs after the refusal, the refusal still reported", taken.Name, taken.Status.CompletionTime.Sub(grown).Seconds())
}

// TestPausedClusterStillFailsOver (issue 32: paused says what it stops, and failover stays
// on unless turned off): a paused cluster under an application writer loses its primary (hung,
// then killed). Dolphin fails over all the same and the writes resume; it repairs nothing else
// while paused (the old primary is not made to replicate again) and says so in the Paused
// condition; unpaused, the old primary rejoins and every acknowledged write is on every
// instance.
func TestPausedClusterStillFailsOver(t *testing.T) {
	s := upStack(t)
	const name = "pause"
	_, key := s.healthyAppCluster(name)
	w := s.startSteadyAppWriter(name)
	s.patchCluster(key, func(c *dolphinv1.MySQLCluster) { c.Spec.Paused = true })
	s.wantClusterCondition(key, controller.ConditionPaused, metav1.ConditionTrue, "still fails over a lost primary")

	old := s.currentPrimary(key)
	at := time.Now()
	s.failOverByCrash(key, "the primary lost while paused")
	testenv.Eventually(t, 60*time.Second, "writes resume", func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if !w.lastSent.After(at) {
			return fmt.Errorf("no write acknowledged since the fault: %v", w.lastErr)
		}
		return nil
	})
	t.Logf("paused: %s failed over to %s; writes resumed", old, s.currentPrimary(key))

	// Nothing else is repaired while paused: the old primary, back, does not replicate.
	time.Sleep(10 * time.Second)
	var c dolphinv1.MySQLCluster
	if err := s.c.Get(s.ctx, key, &c); err != nil {
		t.Fatal(err)
	}
	for _, in := range c.Status.Topology.Instances {
		if in.Name == old && in.Replicating {
			t.Fatalf("the old primary %s was made to replicate while the cluster was paused (topology %s: %s)", old, c.Status.Topology.State, c.Status.Topology.Message)
		}
	}
	t.Logf("paused: %s left alone (topology %s: %s)", old, c.Status.Topology.State, c.Status.Topology.Message)

	s.patchCluster(key, func(c *dolphinv1.MySQLCluster) { c.Spec.Paused = false })
	s.waitHealthy(key)
	w.finish()
	acked, failed := s.wantEveryAckedWrite(key, name, w)
	t.Logf("pause: %d writes acknowledged, %d failed, 0 lost on every instance", len(acked), failed)
}
