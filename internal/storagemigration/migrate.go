// Package storagemigration rewrites stored custom resources in their CRD's storage version and
// then records, in the CRD's status.storedVersions, that no object is stored in another one:
// what the API server needs before a version can stop being served (docs/design/0033).
//
// The rewrite is a no-op update of every object, as kube-storage-version-migrator does: the API
// server decodes the stored object (converting it if it was stored in an older version) and
// encodes it again in the storage version; an object already stored in it is left untouched
// (the API server skips a write whose bytes did not change). A conflict or a NotFound means
// someone else wrote or deleted the object since it was listed, which rewrote it too.
package storagemigration

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,resourceNames=mysqlclusters.mysql.dolphin.dev;mysqlbackups.mysql.dolphin.dev;mysqlusers.mysql.dolphin.dev;mysqldatabases.mysql.dolphin.dev,verbs=get
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions/status,resourceNames=mysqlclusters.mysql.dolphin.dev;mysqlbackups.mysql.dolphin.dev;mysqlusers.mysql.dolphin.dev;mysqldatabases.mysql.dolphin.dev,verbs=patch
// +kubebuilder:rbac:groups=mysql.dolphin.dev,resources=mysqlclusters;mysqlbackups;mysqlusers;mysqldatabases,verbs=list;update

// pageSize bounds each list (the API server pages large lists anyway).
const pageSize = 250

// Migrator migrates the objects of CRDs to their storage version.
type Migrator struct {
	// Client updates objects and the CRDs' status.
	Client client.Client
	// Reader lists objects and reads CRDs live (not from a cache).
	Reader client.Reader
	// CRDs are the names of the CustomResourceDefinitions to migrate.
	CRDs []string
	// Namespace limits the migration to one namespace ("" = all). Only a migration of every
	// namespace trims status.storedVersions: objects elsewhere may still be stored in an older
	// version.
	Namespace string
	// Settle is how long to wait after a first rewrite of every object before a second one and
	// the trim: API servers of a highly available control plane learn of a CRD's new storage
	// version one by one, and one that had not yet could have written an object in the old
	// version after the first pass. Zero skips the second pass (a single API server).
	Settle time.Duration
	// RetryInterval is the first wait after a failed round when run as a Runnable (5 s when
	// zero); it doubles up to 5 minutes.
	RetryInterval time.Duration
	Log           logr.Logger
}

// Result says what one Migrate did, per CRD.
type Result struct {
	CRD string
	// StorageVersion is the version objects are now stored in.
	StorageVersion string
	// Rewritten is how many objects were updated (the API server wrote those stored in
	// another version; the others were left as they were).
	Rewritten int
	// StoredVersions is status.storedVersions after the migration.
	StoredVersions []string
	// Skipped is true when status.storedVersions named only the storage version already.
	Skipped bool
}

// NeedLeaderElection is true: one replica migrates.
func (m *Migrator) NeedLeaderElection() bool { return true }

// Start migrates once, retrying failed rounds with back-off (a conversion webhook that is not
// ready yet fails the lists of objects stored in another version), and returns when done or
// when ctx ends. The operator runs it at start.
func (m *Migrator) Start(ctx context.Context) error {
	wait := m.RetryInterval
	if wait <= 0 {
		wait = 5 * time.Second
	}
	for {
		results, err := m.Migrate(ctx)
		for _, r := range results {
			if !r.Skipped {
				m.Log.Info("migrated stored objects", "crd", r.CRD, "storageVersion", r.StorageVersion,
					"rewritten", r.Rewritten, "storedVersions", r.StoredVersions, "namespace", m.Namespace)
			}
		}
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		m.Log.Error(err, "storage migration failed; retrying", "in", wait.String())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Minute)
	}
}

// Migrate rewrites the objects of every CRD whose status.storedVersions names a version other
// than the storage version (twice, Settle apart), then (in a migration of every namespace)
// trims storedVersions to the storage version. It stops at the first error; a later call
// resumes (rewriting an object twice is harmless).
func (m *Migrator) Migrate(ctx context.Context) ([]Result, error) {
	// First pass: every CRD that needs it. One settle for all of them, then the second pass
	// and the trims.
	var results []Result
	var pending []pendingCRD
	for _, name := range m.CRDs {
		r, p, err := m.firstPass(ctx, name)
		if r != nil {
			results = append(results, *r)
		}
		if err != nil {
			return results, err
		}
		if p != nil {
			p.result = len(results) - 1
			pending = append(pending, *p)
		}
	}
	if len(pending) > 0 && m.Settle > 0 {
		select {
		case <-ctx.Done():
			return results, ctx.Err()
		case <-time.After(m.Settle):
		}
	}
	for _, p := range pending {
		r := &results[p.result]
		if m.Settle > 0 {
			if _, err := m.rewriteAll(ctx, p.listKind); err != nil {
				return results, fmt.Errorf("rewriting %s in %s a second time: %w", p.plural, r.StorageVersion, err)
			}
		}
		if m.Namespace != "" {
			continue
		}
		// Read again: the CRD may have changed during the settle (its conversion webhook's CA
		// injected); the lock then guards only the trim itself.
		var crd apiextensionsv1.CustomResourceDefinition
		if err := m.Reader.Get(ctx, client.ObjectKey{Name: r.CRD}, &crd); err != nil {
			return results, fmt.Errorf("reading CustomResourceDefinition %s: %w", r.CRD, err)
		}
		if StorageVersion(&crd) != r.StorageVersion {
			return results, fmt.Errorf("the storage version of %s changed during the migration (%s, now %s): migrating again", r.CRD, r.StorageVersion, StorageVersion(&crd))
		}
		patch := client.MergeFromWithOptions(crd.DeepCopy(), client.MergeFromWithOptimisticLock{})
		crd.Status.StoredVersions = []string{r.StorageVersion}
		if err := m.Client.Status().Patch(ctx, &crd, patch); err != nil {
			return results, fmt.Errorf("setting status.storedVersions of %s to [%s]: %w", r.CRD, r.StorageVersion, err)
		}
		r.StoredVersions = crd.Status.StoredVersions
	}
	return results, nil
}

// pendingCRD is a CRD whose objects were rewritten once and whose storedVersions are still to
// be trimmed.
type pendingCRD struct {
	plural   string
	listKind schema.GroupVersionKind
	result   int // index in Migrate's results
}

// firstPass reads a CRD and, if objects may be stored in another version, rewrites them once.
func (m *Migrator) firstPass(ctx context.Context, name string) (*Result, *pendingCRD, error) {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := m.Reader.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
		return nil, nil, fmt.Errorf("reading CustomResourceDefinition %s: %w", name, err)
	}
	storage := StorageVersion(&crd)
	if storage == "" {
		return nil, nil, fmt.Errorf("CustomResourceDefinition %s has no storage version", name)
	}
	r := &Result{CRD: name, StorageVersion: storage, StoredVersions: crd.Status.StoredVersions}
	if !NeedsMigration(&crd) {
		r.Skipped = true
		return r, nil, nil
	}
	listKind := schema.GroupVersionKind{Group: crd.Spec.Group, Version: storage, Kind: crd.Spec.Names.ListKind}
	n, err := m.rewriteAll(ctx, listKind)
	r.Rewritten = n
	if err != nil {
		return r, nil, fmt.Errorf("rewriting %s in %s: %w", crd.Spec.Names.Plural, storage, err)
	}
	return r, &pendingCRD{plural: crd.Spec.Names.Plural, listKind: listKind}, nil
}

// rewriteAll updates every object of the list kind (in m.Namespace, or everywhere) unchanged
// and returns how many it updated.
func (m *Migrator) rewriteAll(ctx context.Context, listKind schema.GroupVersionKind) (int, error) {
	n := 0
	opts := []client.ListOption{client.Limit(pageSize)}
	if m.Namespace != "" {
		opts = append(opts, client.InNamespace(m.Namespace))
	}
	cont := ""
	for {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(listKind)
		if err := m.Reader.List(ctx, list, append(opts, client.Continue(cont))...); err != nil {
			return n, fmt.Errorf("listing: %w", err)
		}
		for i := range list.Items {
			obj := &list.Items[i]
			err := m.Client.Update(ctx, obj)
			switch {
			case err == nil:
				n++
			case apierrors.IsConflict(err), apierrors.IsNotFound(err):
				// Written or deleted since the list: rewritten either way.
			default:
				return n, fmt.Errorf("updating %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
			}
		}
		if cont = list.GetContinue(); cont == "" {
			return n, nil
		}
	}
}

// StorageVersion is the name of crd's storage version ("" when none is marked).
func StorageVersion(crd *apiextensionsv1.CustomResourceDefinition) string {
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			return v.Name
		}
	}
	return ""
}

// NeedsMigration reports whether objects of crd may be stored in a version other than its
// storage version (status.storedVersions names another one).
func NeedsMigration(crd *apiextensionsv1.CustomResourceDefinition) bool {
	storage := StorageVersion(crd)
	return slices.ContainsFunc(crd.Status.StoredVersions, func(v string) bool { return v != storage })
}
