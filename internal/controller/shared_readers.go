package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// What several reconcilers read the same way: objects outside the cache, a cluster's
// credentials, backup stores.

// liveReader is apiReader, the uncached reader of objects outside the cache (the user's
// Secrets), or c when it is nil (a direct client in tests).
func liveReader(apiReader client.Reader, c client.Reader) client.Reader {
	if apiReader != nil {
		return apiReader
	}
	return c
}

// readSecretCachedOrLive reads the Secret at key from cached, or from live when the cache has
// not seen it (not labelled yet, or not yet synced).
func readSecretCachedOrLive(ctx context.Context, cached client.Reader, live client.Reader, key types.NamespacedName) (*corev1.Secret, error) {
	var s corev1.Secret
	if err := cached.Get(ctx, key, &s); !apierrors.IsNotFound(err) {
		return &s, err
	}
	err := live.Get(ctx, key, &s)
	return &s, err
}

// clusterCredential is the value of key (resources.CredentialKeys) in c's credentials Secret:
// from cached (the credentials step labels the Secret into the cache), live when the cache
// has not seen it yet. An empty value is an error.
func clusterCredential(ctx context.Context, cached, live client.Reader, c *dolphinv1.MySQLCluster, key string) ([]byte, error) {
	name := types.NamespacedName{Namespace: c.Namespace, Name: resources.CredentialsSecretName(c)}
	s, err := readSecretCachedOrLive(ctx, cached, live, name)
	if err != nil {
		return nil, fmt.Errorf("reading Secret %s: %w", name, err)
	}
	if len(s.Data[key]) == 0 {
		return nil, fmt.Errorf("secret %s has no %s", name, key)
	}
	return s.Data[key], nil
}

// openBackupStore opens the store of cfg with open (objectstore.New when nil), after checking
// that it names its own credentials unless allowDefaultS3 (operatorStoreIdentity).
func openBackupStore(ctx context.Context, cfg objectstore.Config, allowDefaultS3 bool,
	open func(context.Context, objectstore.Config) (objectstore.Store, error)) (objectstore.Store, error) {
	if err := operatorStoreIdentity(cfg, allowDefaultS3); err != nil {
		return nil, err
	}
	if open == nil {
		open = objectstore.New
	}
	return open(ctx, cfg)
}
