package storagemigration_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	dolphinv1alpha1 "github.com/dolphin-operator/dolphin/api/v1alpha1"
	"github.com/dolphin-operator/dolphin/internal/operator"
	"github.com/dolphin-operator/dolphin/internal/storagemigration"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestEnvtestMigratorAlone runs the Migrator by itself (no operator, no controller that could
// write the objects and so re-encode them) on the three kinds whose versions need no
// conversion webhook: objects stored in v1alpha1 by the last release's CRDs are stored in
// v1beta1 afterwards (read from etcd) and storedVersions is trimmed; a migration of one other
// namespace rewrites nothing here and trims nothing; a second migration has nothing to do.
func TestEnvtestMigratorAlone(t *testing.T) {
	tenv := testenv.StartForTestWithCRDs(t, testenv.BaselineCRDDir())
	scheme, err := operator.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(tenv.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	objects := map[string]client.Object{
		"/registry/mysql.dolphin.dev/mysqlbackups/default/b": &dolphinv1alpha1.MySQLBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "b"},
			Spec: dolphinv1alpha1.MySQLBackupSpec{Cluster: "shop"}},
		"/registry/mysql.dolphin.dev/mysqlusers/default/u": &dolphinv1alpha1.MySQLUser{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "u"},
			Spec: dolphinv1alpha1.MySQLUserSpec{Cluster: "shop", Name: "app"}},
		"/registry/mysql.dolphin.dev/mysqldatabases/default/d": &dolphinv1alpha1.MySQLDatabase{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "d"},
			Spec: dolphinv1alpha1.MySQLDatabaseSpec{Cluster: "shop", Name: "app"}},
	}
	for _, o := range objects {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	storedAs := func(key string) string {
		t.Helper()
		v, err := tenv.StoredAPIVersion(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	crds := []string{"mysqlbackups.mysql.dolphin.dev", "mysqlusers.mysql.dolphin.dev", "mysqldatabases.mysql.dolphin.dev"}
	storedVersions := func(name string) []string {
		t.Helper()
		var crd apiextensionsv1.CustomResourceDefinition
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
			t.Fatal(err)
		}
		return crd.Status.StoredVersions
	}

	// This build's CRDs over the last release's.
	if _, err := envtest.InstallCRDs(tenv.Config, envtest.CRDInstallOptions{Paths: []string{testenv.CRDDir()}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range crds {
		if got := storedVersions(name); !slices.Equal(got, []string{"v1alpha1", "v1beta1"}) {
			t.Fatalf("%s storedVersions after the CRD upgrade: %v", name, got)
		}
	}

	// A namespaced migration elsewhere: nothing here rewritten, nothing trimmed.
	elsewhere := &storagemigration.Migrator{Client: c, Reader: c, CRDs: crds, Namespace: "kube-system", Log: testr.New(t)}
	if _, err := elsewhere.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for key := range objects {
		if v := storedAs(key); v != "v1alpha1" {
			t.Fatalf("a migration of kube-system rewrote %s (stored as %s)", key, v)
		}
	}
	for _, name := range crds {
		if got := storedVersions(name); len(got) != 2 {
			t.Fatalf("a namespaced migration trimmed %s storedVersions to %v", name, got)
		}
	}

	m := &storagemigration.Migrator{Client: c, Reader: c, CRDs: crds, Settle: 100 * time.Millisecond, Log: testr.New(t)}
	results, err := m.Migrate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Skipped || r.Rewritten != 1 || !slices.Equal(r.StoredVersions, []string{"v1beta1"}) {
			t.Errorf("%s: %+v, want 1 object rewritten and storedVersions [v1beta1]", r.CRD, r)
		}
	}
	for key := range objects {
		if v := storedAs(key); v != "v1beta1" {
			t.Errorf("after the migration %s is stored as %s, want v1beta1", key, v)
		}
	}
	for _, name := range crds {
		if got := storedVersions(name); !slices.Equal(got, []string{"v1beta1"}) {
			t.Errorf("%s storedVersions after the migration: %v", name, got)
		}
	}
	again, err := m.Migrate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range again {
		if !r.Skipped {
			t.Errorf("a second migration of %s did something: %+v", r.CRD, r)
		}
	}
}
