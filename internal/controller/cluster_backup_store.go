package controller

import (
	"context"
	"fmt"
	"path"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// Keys of the Secrets a backup store refers to.
const (
	S3AccessKeyIDKey     = "access-key-id"
	S3SecretAccessKeyKey = "secret-access-key"
	S3CAKey              = "ca.crt"
)

// +kubebuilder:rbac:groups=mysql.dolphin.dev,resources=mysqlbackupstores,verbs=get;list;watch

// clusterStore is where cluster c's backups go: spec.backup.store, or the MySQLBackupStore
// that spec.backup.storeRef names, read now. It is nil (and no error) when the cluster has no
// spec.backup.
func clusterStore(ctx context.Context, r client.Reader, c *dolphinv1.MySQLCluster) (*dolphinv1.BackupStore, error) {
	if c.Spec.Backup == nil {
		return nil, nil
	}
	return storeOrRef(ctx, r, c.Namespace, "spec.backup", c.Spec.Backup.Store, c.Spec.Backup.StoreRef)
}

// storeRefs are the names of the MySQLBackupStores cluster c names.
func storeRefs(c *dolphinv1.MySQLCluster) []string {
	var names []string
	if b := c.Spec.Backup; b != nil && b.StoreRef != nil {
		names = append(names, b.StoreRef.Name)
	}
	if b := c.Spec.Bootstrap; b != nil && b.From != nil && b.From.StoreRef != nil {
		names = append(names, b.From.StoreRef.Name)
	}
	if pc := physicalExternalCopy(c); pc != nil && pc.StoreRef != nil {
		names = append(names, pc.StoreRef.Name)
	}
	return names
}

// storeToClusters maps a MySQLBackupStore to the clusters that name it, so that creating or
// fixing a store reaches the clusters (store server, archive, bootstrap) at once.
func (r *MySQLClusterReconciler) storeToClusters(ctx context.Context, o client.Object) []reconcile.Request {
	var list dolphinv1.MySQLClusterList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{storeRefIndex: o.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "listing clusters using MySQLBackupStore", "store", o.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, c := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&c)})
	}
	return reqs
}

// storeOrRef is the store described inline, or the spec of the MySQLBackupStore ref names in
// namespace ns; field names where the reference is, for the message. A MySQLBackupStore that
// does not exist is a userError saying what to create.
func storeOrRef(ctx context.Context, r client.Reader, ns, field string, inline *dolphinv1.BackupStore, ref *dolphinv1.BackupStoreReference) (*dolphinv1.BackupStore, error) {
	if ref == nil {
		return inline, nil
	}
	var s dolphinv1.MySQLBackupStore
	err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, &s)
	if apierrors.IsNotFound(err) {
		return nil, &userError{Reason: "BackupStoreNotFound", Message: fmt.Sprintf(
			"%s.storeRef names MySQLBackupStore %s, which does not exist in namespace %s: create it, or name an existing one", field, ref.Name, ns)}
	}
	if err != nil {
		return nil, fmt.Errorf("reading MySQLBackupStore %s/%s: %w", ns, ref.Name, err)
	}
	return &s.Spec, nil
}

// resolveStore turns a backup store of the API into the configuration the agent and the
// object store client use, reading the credentials (and CA) Secrets live: they are the user's
// and not in the operator's cache. A missing Secret or key is a userError saying what to add.
//
// A PVC store is reached through its store server, which resolveStore starts when needed
// (ensureStoreServer) with sc.Owner as one of its owners.
func resolveStore(ctx context.Context, sc storeClients, namespace string, s *dolphinv1.BackupStore) (objectstore.Config, error) {
	if s != nil && s.PVC != nil {
		return ensureStoreServer(ctx, sc, namespace, s.PVC.ClaimName)
	}
	if s == nil || s.S3 == nil {
		return objectstore.Config{}, &userError{Reason: "NoBackupStore", Message: "the cluster has no spec.backup.store: set the S3 bucket or the PersistentVolumeClaim backups go to"}
	}
	r := sc.Reader
	in := s.S3
	get := func(name string) (*corev1.Secret, error) {
		var sec corev1.Secret
		err := r.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &sec)
		if apierrors.IsNotFound(err) {
			return nil, &userError{Reason: "BackupStoreSecretMissing", Message: fmt.Sprintf(
				"Secret %s/%s named by the backup store does not exist: create it", namespace, name)}
		}
		if err != nil {
			return nil, fmt.Errorf("reading Secret %s/%s: %w", namespace, name, err)
		}
		return &sec, nil
	}
	cfg := &objectstore.S3Config{
		Endpoint:  in.Endpoint,
		Bucket:    in.Bucket,
		Prefix:    in.Prefix,
		Region:    in.Region,
		PathStyle: in.ForcePathStyle,
		// No Secret named: the AWS SDK's default chain, in the pod that talks to the store
		// (IAM roles for service accounts, workload identity, the node's role).
		DefaultCredentials: in.CredentialsSecret == "",
	}
	if in.CredentialsSecret != "" {
		creds, err := get(in.CredentialsSecret)
		if err != nil {
			return objectstore.Config{}, err
		}
		for _, k := range []string{S3AccessKeyIDKey, S3SecretAccessKeyKey} {
			if len(creds.Data[k]) == 0 {
				return objectstore.Config{}, &userError{Reason: "BackupStoreSecretIncomplete", Message: fmt.Sprintf(
					"Secret %s/%s has no key %s: add the bucket's %s", namespace, in.CredentialsSecret, k, strings.ReplaceAll(k, "-", " "))}
			}
		}
		cfg.AccessKeyID = strings.TrimSpace(string(creds.Data[S3AccessKeyIDKey]))
		cfg.SecretAccessKey = strings.TrimSpace(string(creds.Data[S3SecretAccessKeyKey]))
	}
	if in.PartSize != nil {
		cfg.PartSize = in.PartSize.Value()
	}
	if in.CASecret != "" {
		ca, err := get(in.CASecret)
		if err != nil {
			return objectstore.Config{}, err
		}
		if len(ca.Data[S3CAKey]) == 0 {
			return objectstore.Config{}, &userError{Reason: "BackupStoreSecretIncomplete", Message: fmt.Sprintf(
				"Secret %s/%s has no key %s: add the PEM certificate authorities of the endpoint", namespace, in.CASecret, S3CAKey)}
		}
		cfg.CACertPEM = ca.Data[S3CAKey]
	}
	return objectstore.Config{S3: cfg}, nil
}

// backupPath is where a backup's objects go inside the store's prefix:
// <namespace>/<cluster>/<backup>-<UTC start>/, unique even when a MySQLBackup of the same
// name is created again after the first was deleted.
func backupPath(b *dolphinv1.MySQLBackup, start time.Time) string {
	return path.Join(b.Namespace, b.Spec.Cluster, b.Name+"-"+start.UTC().Format("20060102T150405Z")) + "/"
}

// operatorStoreIdentity refuses a store the operator process would open with its own AWS
// identity (an S3 store without credentialsSecret) unless the operator allows it
// (--s3-default-credentials): a namespace must not act with the operator's role.
func operatorStoreIdentity(cfg objectstore.Config, allow bool) error {
	if cfg.S3 == nil || !cfg.S3.DefaultCredentials || allow {
		return nil
	}
	return &userError{Reason: "BackupStoreNeedsCredentials", Message: "the backup store names no credentialsSecret: the database pods " +
		"reach it with their own identity, but the operator lends its own AWS identity to no namespace unless started with " +
		"--s3-default-credentials, and this needs the operator to reach the store (deleting data, expiring the archive, checking a restore): " +
		"name a credentialsSecret, or ask the operator's administrator"}
}
