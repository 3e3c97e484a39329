package webhook

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// MySQLBackupStorePath is where the MySQLBackupStore validator is served.
const MySQLBackupStorePath = "/validate-mysql-dolphin-dev-v1beta1-mysqlbackupstore"

// storeUse is one place a cluster names a MySQLBackupStore.
type storeUse struct {
	field, name string
}

// storeUses are the MySQLBackupStores cluster c names, with the field that names each. A
// bootstrap store counts only until the cluster recorded where its data came from
// (status.restoredFrom): after that it is never read again.
func storeUses(c *dolphinv1.MySQLCluster) []storeUse {
	var uses []storeUse
	if b := c.Spec.Backup; b != nil && b.StoreRef != nil {
		uses = append(uses, storeUse{"spec.backup.storeRef", b.StoreRef.Name})
	}
	if b := c.Spec.Bootstrap; b != nil && b.From != nil && b.From.StoreRef != nil && c.Status.RestoredFrom == nil {
		uses = append(uses, storeUse{"spec.bootstrap.from.storeRef", b.From.StoreRef.Name})
	}
	return uses
}

// storeWarnings warns about each MySQLBackupStore cluster c names that does not exist: it is
// not refused (a store may be applied after the cluster, in the same kubectl apply), but
// backups, archiving and a bootstrap wait, and say so, until it exists.
func storeWarnings(ctx context.Context, r client.Reader, c *dolphinv1.MySQLCluster) (admission.Warnings, error) {
	var w admission.Warnings
	for _, u := range storeUses(c) {
		var s dolphinv1.MySQLBackupStore
		err := r.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: u.name}, &s)
		if apierrors.IsNotFound(err) {
			w = append(w, fmt.Sprintf("MySQLBackupStore %q named in %s does not exist yet: backups wait for it", u.name, u.field))
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading MySQLBackupStore %q named in %s: %w", u.name, u.field, err)
		}
	}
	return w, nil
}

// BackupStoreValidator refuses to delete a MySQLBackupStore that a cluster still names: its
// next backups, its binlog archive (and a bootstrap not done yet) would stop. Backups already
// taken do not depend on it (each records its store in status.store).
type BackupStoreValidator struct {
	// Client lists MySQLClusters (from the cache).
	Client client.Reader
	// Namespace, when set, is the only namespace this operator manages.
	Namespace string
}

// ValidateCreate implements admission.Validator (the schema checks a store's fields).
func (BackupStoreValidator) ValidateCreate(context.Context, *dolphinv1.MySQLBackupStore) (admission.Warnings, error) {
	return nil, nil
}

// ValidateUpdate implements admission.Validator.
func (BackupStoreValidator) ValidateUpdate(context.Context, *dolphinv1.MySQLBackupStore, *dolphinv1.MySQLBackupStore) (admission.Warnings, error) {
	return nil, nil
}

// ValidateDelete implements admission.Validator: refused while a cluster names the store.
func (v BackupStoreValidator) ValidateDelete(ctx context.Context, s *dolphinv1.MySQLBackupStore) (admission.Warnings, error) {
	if v.Namespace != "" && s.Namespace != v.Namespace {
		return nil, nil
	}
	var clusters dolphinv1.MySQLClusterList
	if err := v.Client.List(ctx, &clusters, client.InNamespace(s.Namespace)); err != nil {
		return nil, fmt.Errorf("listing MySQLClusters: %w", err)
	}
	var users []string
	for i := range clusters.Items {
		c := &clusters.Items[i]
		if c.DeletionTimestamp != nil {
			continue
		}
		for _, u := range storeUses(c) {
			if u.name == s.Name {
				users = append(users, fmt.Sprintf("MySQLCluster %s (%s)", c.Name, u.field))
			}
		}
	}
	if len(users) == 0 {
		return nil, nil
	}
	return nil, fmt.Errorf("MySQLBackupStore %s is still named by %s: point them at another store (or remove their spec.backup) first; backups already taken keep their store in status.store and are not affected",
		s.Name, strings.Join(users, ", "))
}
