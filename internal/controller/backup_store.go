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

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// Keys of the Secrets a backup store refers to.
const (
	S3AccessKeyIDKey     = "access-key-id"
	S3SecretAccessKeyKey = "secret-access-key"
	S3CAKey              = "ca.crt"
)

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
	cfg := &objectstore.S3Config{
		Endpoint:        in.Endpoint,
		Bucket:          in.Bucket,
		Prefix:          in.Prefix,
		Region:          in.Region,
		PathStyle:       in.ForcePathStyle,
		AccessKeyID:     strings.TrimSpace(string(creds.Data[S3AccessKeyIDKey])),
		SecretAccessKey: strings.TrimSpace(string(creds.Data[S3SecretAccessKeyKey])),
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
