package controller

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// reconcileBootstrap resolves spec.bootstrap, once, into status.restoredFrom: the backup's
// store and path, checked before any instance exists — the manifest is read and every object
// it lists must be in the store with its size (the instances verify every sha256 while they
// extract). Until it is resolved the steps stop here, so no StatefulSet and no pod is created
// for a backup that cannot be restored. Once resolved, the location never changes, even if
// the MySQLBackup named is deleted later.
func (r *MySQLClusterReconciler) reconcileBootstrap(ctx context.Context, c *dolphinv1.MySQLCluster) error {
	if externalBootstrap(c) != nil {
		return r.reconcileExternalSource(ctx, c)
	}
	if c.Spec.Bootstrap == nil || c.Status.RestoredFrom != nil {
		return nil
	}
	from, err := r.bootstrapSource(ctx, c)
	if err != nil {
		return err
	}
	if err := r.checkRestoreSource(ctx, c, from, c.Spec.Bootstrap.PointInTime); err != nil {
		return err
	}
	return r.recordRestoredFrom(ctx, c, from)
}

// checkRestoreSource checks the backup at from (its manifest, and every object it lists
// stored with its size) and completes from with what the manifest says: the GTID position,
// the target of a point-in-time restore (pit, optional) and the store's URL for the pods.
func (r *MySQLClusterReconciler) checkRestoreSource(ctx context.Context, c *dolphinv1.MySQLCluster, from *dolphinv1.RestoreStatus, pit *dolphinv1.PointInTimeTarget) error {
	cfg, err := resolveStore(ctx, storeClients{Reader: r.apiReader(), Writer: r.Client, Build: r.Build, Owner: c}, c.Namespace, &from.Store)
	if err != nil {
		return err
	}
	store, err := r.openStore(ctx, cfg)
	if err != nil {
		return fmt.Errorf("opening the bootstrap backup's store: %w", err)
	}
	m, err := checkBackupObjects(ctx, store, from.Path)
	if err != nil {
		return err
	}
	from.GTIDPosition = m.GTIDPosition
	if pit != nil {
		if from.TargetGTID, err = resolvePointInTime(ctx, store, from.ArchivePrefix, m, pit); err != nil {
			return err
		}
	}
	if cfg.HTTP != nil {
		from.StoreURL = cfg.HTTP.URL
	}
	return nil
}

// recordRestoredFrom writes status.restoredFrom, once: every instance restores from there.
func (r *MySQLClusterReconciler) recordRestoredFrom(ctx context.Context, c *dolphinv1.MySQLCluster, from *dolphinv1.RestoreStatus) error {
	if err := r.recordOwnedStatus(ctx, c, dolphinv1.MySQLClusterStatus{RestoredFrom: from}, "status.restoredFrom"); err != nil {
		return err
	}
	c.Status.RestoredFrom = from
	return nil
}

// bootstrapSource is where spec.bootstrap points, before it is checked.
func (r *MySQLClusterReconciler) bootstrapSource(ctx context.Context, c *dolphinv1.MySQLCluster) (*dolphinv1.RestoreStatus, error) {
	b := c.Spec.Bootstrap
	if b.From != nil {
		return r.backupLocation(ctx, c, "spec.bootstrap.from", b.From)
	}
	if b.Backup == nil && b.PointInTime != nil && b.PointInTime.Cluster != "" {
		name, err := r.chooseBaseBackup(ctx, c.Namespace, b.PointInTime)
		if err != nil {
			return nil, err
		}
		b = b.DeepCopy()
		b.Backup = &dolphinv1.BackupReference{Name: name}
	}
	var bk dolphinv1.MySQLBackup
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: b.Backup.Name}, &bk)
	if apierrors.IsNotFound(err) {
		return nil, &userError{Reason: "BootstrapBackupNotFound", Message: fmt.Sprintf(
			"spec.bootstrap.backup names MySQLBackup %s, which does not exist in namespace %s: create the cluster again naming an existing backup, or use bootstrap.from with the backup's store and path", b.Backup.Name, c.Namespace)}
	}
	if err != nil {
		return nil, fmt.Errorf("reading MySQLBackup %s: %w", b.Backup.Name, err)
	}
	if bk.Status.Phase != dolphinv1.BackupSucceeded || bk.Status.Store == nil || bk.Status.Path == "" {
		return nil, &userError{Reason: "BootstrapBackupNotReady", Message: fmt.Sprintf(
			"MySQLBackup %s is %s, not Succeeded: nothing is restored until it succeeds; if it failed, create the cluster again naming a successful backup", bk.Name, phaseOrNone(dolphinv1.Phase(bk.Status.Phase)))}
	}
	from := &dolphinv1.RestoreStatus{Backup: bk.Name, Store: *bk.Status.Store, Path: bk.Status.Path}
	if b.PointInTime != nil {
		from.ArchivePrefix = resources.BinlogArchivePrefix(&dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: bk.Namespace, Name: bk.Spec.Cluster}})
	}
	return from, nil
}

// backupLocation resolves loc (the field named field) to a store and path.
func (r *MySQLClusterReconciler) backupLocation(ctx context.Context, c *dolphinv1.MySQLCluster, field string, loc *dolphinv1.BackupLocation) (*dolphinv1.RestoreStatus, error) {
	store, err := storeOrRef(ctx, r.Client, c.Namespace, field, loc.Store, loc.StoreRef)
	if err != nil {
		return nil, err
	}
	if store == nil {
		return nil, &userError{Reason: "NoBackupStore", Message: field + " names no store: create the cluster again with " + field + ".store or " + field + ".storeRef"}
	}
	return &dolphinv1.RestoreStatus{Store: *store, Path: loc.Path}, nil
}

// checkBackupObjects reads the manifest under path and checks that every object it lists is
// stored with its recorded size. A backup without a manifest, or with a missing or truncated
// object, is a userError naming it.
func checkBackupObjects(ctx context.Context, s objectstore.Store, path string) (*backup.Manifest, error) {
	m, err := backup.ReadManifest(ctx, s, path)
	if errors.Is(err, backup.ErrIncomplete) || errors.Is(err, backup.ErrCorrupt) {
		return nil, &userError{Reason: "BootstrapBackupInvalid", Message: fmt.Sprintf(
			"the backup at %s%s cannot be restored: %v; nothing was started: create the cluster again with another backup", s.Describe(), path, err)}
	}
	if err != nil {
		return nil, fmt.Errorf("reading the bootstrap backup's manifest: %w", err)
	}
	for _, o := range m.Objects {
		info, err := s.Stat(ctx, path+o.Key)
		if errors.Is(err, objectstore.ErrNotFound) {
			return nil, &userError{Reason: "BootstrapBackupInvalid", Message: fmt.Sprintf(
				"the backup at %s%s lacks object %s listed in its manifest; nothing was started: create the cluster again with another backup", s.Describe(), path, o.Key)}
		}
		if err != nil {
			return nil, fmt.Errorf("checking object %s of the bootstrap backup: %w", o.Key, err)
		}
		if info.Size != o.Size {
			return nil, &userError{Reason: "BootstrapBackupInvalid", Message: fmt.Sprintf(
				"object %s of the backup at %s%s holds %d bytes, its manifest says %d; nothing was started: create the cluster again with another backup", o.Key, s.Describe(), path, info.Size, o.Size)}
		}
	}
	return m, nil
}

// openStore opens a backup store (openBackupStore).
func (r *MySQLClusterReconciler) openStore(ctx context.Context, cfg objectstore.Config) (objectstore.Store, error) {
	return openBackupStore(ctx, cfg, r.AllowS3DefaultCredentials, r.OpenStore)
}
