package operator_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	dolphinv1alpha1 "github.com/dolphin-operator/dolphin/api/v1alpha1"
	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/config/crd"
	"github.com/dolphin-operator/dolphin/internal/localcluster"
	"github.com/dolphin-operator/dolphin/internal/operator"
	"github.com/dolphin-operator/dolphin/internal/testenv"
	"github.com/dolphin-operator/dolphin/internal/webhook"
)

// installLocalCRDs applies this build's CRDs the way `dolphin local up` does (server-side
// apply, conversion webhook pointed at https://127.0.0.1:port), over whatever CRDs the API
// server has.
func installLocalCRDs(t *testing.T, env *envtest.Environment, port int) {
	t.Helper()
	path := testenv.AdminKubeconfig(t, env)
	if _, err := localcluster.InstallCRDs(context.Background(), path, crd.Bases(), port); err != nil {
		t.Fatalf("installing this build's CRDs: %v", err)
	}
}

// runOperatorWithWebhooks runs the operator as `dolphin local` does (webhooks on 127.0.0.1:port,
// the shipped validating configuration registered) until the test ends, and waits until it is
// ready: its certificate served and its CA in every webhook it serves, conversion included.
// tweaks change the operator's options, and the webhook configuration before it is created.
func runOperatorWithWebhooks(t *testing.T, cfg *rest.Config, c client.Client, port int, tweaks ...func(*operator.Options, *admissionregistrationv1.ValidatingWebhookConfiguration)) {
	t.Helper()
	opts := operator.DefaultOptions()
	hooks := webhookManifest(t, port)
	for _, tweak := range tweaks {
		tweak(&opts, hooks)
	}
	if err := c.Create(context.Background(), hooks); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	probe := freePort(t)
	logs := &syncBuffer{}
	opts.RESTConfig = cfg
	opts.LeaderElectionNamespace = "default"
	opts.MetricsBindAddress = "0"
	opts.HealthProbeBindAddress = "127.0.0.1:" + strconv.Itoa(probe)
	opts.WebhookPort, opts.WebhookHost, opts.WebhookIPs = port, "127.0.0.1", []string{"127.0.0.1"}
	opts.Zap.Development, opts.Zap.DestWriter = true, logs
	opts.SkipControllerNameValidation = true
	done := make(chan error, 1)
	go func() { done <- operator.Run(ctx, opts) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	eventually(t, 60*time.Second, "the operator ready (webhook certificate served and injected)", func() (bool, error) {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(probe) + "/readyz")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// TestEnvtestConversionWebhook: with this build's CRDs (v1beta1 stored, v1alpha1 served and
// converted by the operator's webhook, as on `dolphin local`), an object written as v1alpha1
// reads back as v1beta1 with the moved fields in their new place, and the reverse; a v1alpha1
// update lands in v1beta1; and the validating webhook sees v1alpha1 writes converted.
func TestEnvtestConversionWebhook(t *testing.T) {
	env, c := startEnvtest(t)
	ctx := context.Background()
	port := freePort(t)
	installLocalCRDs(t, env, port)
	runOperatorWithWebhooks(t, env.Config, c, port)

	var mc apiextensionsv1.CustomResourceDefinition
	if err := c.Get(ctx, client.ObjectKey{Name: "mysqlclusters.mysql.dolphin.dev"}, &mc); err != nil {
		t.Fatal(err)
	}
	if cc := mc.Spec.Conversion.Webhook.ClientConfig; cc.URL == nil || len(cc.CABundle) == 0 {
		t.Fatalf("conversion webhook of the MySQLCluster CRD: url %v, %d bytes of caBundle; want a URL and the operator's CA", cc.URL, len(cc.CABundle))
	}

	// v1alpha1 → v1beta1.
	interval := metav1.Duration{Duration: 2 * time.Second}
	old := &dolphinv1alpha1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "written-as-alpha"},
		Spec: dolphinv1alpha1.MySQLClusterSpec{Replicas: 5, Paused: true,
			Failover: dolphinv1alpha1.FailoverSpec{DetectionInterval: &interval, DetectionAttempts: 7}}}
	if err := c.Create(ctx, old); err != nil {
		t.Fatalf("creating a v1alpha1 MySQLCluster: %v", err)
	}
	var asBeta dolphinv1.MySQLCluster
	if err := c.Get(ctx, client.ObjectKeyFromObject(old), &asBeta); err != nil {
		t.Fatalf("reading it as v1beta1: %v", err)
	}
	d := asBeta.Spec.Failover.Detection
	if asBeta.Spec.Instances != 5 || d.Attempts != 7 || d.Interval == nil || d.Interval.Duration != 2*time.Second {
		t.Fatalf("read as v1beta1: instances=%d detection=%+v; want 5, attempts 7, interval 2s", asBeta.Spec.Instances, d)
	}

	// An update through v1alpha1 reaches the v1beta1 object.
	// The operator writes the object too (finalizer, status), so the update
	// is read-modify-write with a retry on conflict, as any client's would be.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(old), old); err != nil {
			return err
		}
		old.Spec.Replicas = 1
		return c.Update(ctx, old)
	}); err != nil {
		t.Fatalf("updating as v1alpha1: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(old), &asBeta); err != nil {
		t.Fatal(err)
	}
	if asBeta.Spec.Instances != 1 {
		t.Fatalf("after replicas: 1 through v1alpha1, v1beta1 instances=%d", asBeta.Spec.Instances)
	}

	// v1beta1 → v1alpha1, defaults included.
	beta := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "written-as-beta"},
		Spec: dolphinv1.MySQLClusterSpec{Instances: 3, Paused: true}}
	if err := c.Create(ctx, beta); err != nil {
		t.Fatalf("creating a v1beta1 MySQLCluster: %v", err)
	}
	var asAlpha dolphinv1alpha1.MySQLCluster
	if err := c.Get(ctx, client.ObjectKeyFromObject(beta), &asAlpha); err != nil {
		t.Fatalf("reading it as v1alpha1: %v", err)
	}
	if asAlpha.Spec.Replicas != 3 || asAlpha.Spec.Failover.DetectionAttempts != 3 || asAlpha.Spec.Failover.DetectionInterval == nil ||
		asAlpha.Spec.Failover.DetectionInterval.Duration != time.Second {
		t.Fatalf("read as v1alpha1: replicas=%d failover=%+v; want 3 and the v1beta1 defaults (attempts 3, interval 1s)", asAlpha.Spec.Replicas, asAlpha.Spec.Failover)
	}
	var list dolphinv1alpha1.MySQLClusterList
	if err := c.List(ctx, &list, client.InNamespace("default")); err != nil || len(list.Items) != 2 {
		t.Fatalf("listing as v1alpha1: %d items, %v; want 2", len(list.Items), err)
	}

	// The validating webhook is registered for v1beta1 only (matchPolicy Equivalent): a
	// v1alpha1 write reaches it converted, and is refused with the v1beta1 field's name.
	bad := &dolphinv1alpha1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bad-schedule"},
		Spec: dolphinv1alpha1.MySQLClusterSpec{Replicas: 1, Backup: &dolphinv1alpha1.BackupSpec{
			Store:    &dolphinv1alpha1.BackupStore{PVC: &dolphinv1alpha1.PVCStore{ClaimName: "backups"}},
			Schedule: &dolphinv1alpha1.BackupSchedule{Cron: "0 25 * * *"}}}}
	err := c.Create(ctx, bad)
	if err == nil || !strings.Contains(err.Error(), "denied the request") || !strings.Contains(err.Error(), "spec.backup.schedule") {
		t.Fatalf("a v1alpha1 MySQLCluster with an hour of 25: %v, want denied by the webhook naming spec.backup.schedule", err)
	}
}

// TestEnvtestStorageMigration: an API server as the last release left it (v1alpha1 the only
// version, objects stored in it) gets this build's CRDs and operator. The operator rewrites every
// stored object in v1beta1 (etcd holds v1beta1 JSON afterwards, read directly) and trims every
// CRD's status.storedVersions to [v1beta1], so that a later release can stop serving v1alpha1;
// the objects read back unchanged.
func TestEnvtestStorageMigration(t *testing.T) {
	tenv := testenv.StartForTestWithCRDs(t, testenv.BaselineCRDDir())
	env := tenv.Environment
	scheme, err := operator.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// Objects of the last release, stored as v1alpha1.
	objects := []client.Object{
		&dolphinv1alpha1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "shop"},
			Spec: dolphinv1alpha1.MySQLClusterSpec{Replicas: 2, Paused: true}},
		&dolphinv1alpha1.MySQLBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "shop-1"},
			Spec: dolphinv1alpha1.MySQLBackupSpec{Cluster: "shop"}},
		&dolphinv1alpha1.MySQLUser{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "shop-app"},
			Spec: dolphinv1alpha1.MySQLUserSpec{Cluster: "shop", Name: "app"}},
		&dolphinv1alpha1.MySQLDatabase{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "shop-app"},
			Spec: dolphinv1alpha1.MySQLDatabaseSpec{Cluster: "shop", Name: "app"}},
	}
	keys := []string{
		"/registry/mysql.dolphin.dev/mysqlclusters/default/shop",
		"/registry/mysql.dolphin.dev/mysqlbackups/default/shop-1",
		"/registry/mysql.dolphin.dev/mysqlusers/default/shop-app",
		"/registry/mysql.dolphin.dev/mysqldatabases/default/shop-app",
	}
	for _, o := range objects {
		if err := c.Create(ctx, o); err != nil {
			t.Fatalf("creating %T under the baseline CRDs: %v", o, err)
		}
	}
	// storedAs is the apiVersion of the object etcd holds at key (the top-level one: its
	// managedFields name the versions it was written in, which stay).
	storedAs := func(key string) string {
		t.Helper()
		v, err := tenv.StoredAPIVersion(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, k := range keys {
		if v := storedAs(k); v != "v1alpha1" {
			t.Fatalf("before the upgrade, %s is stored as %s, want v1alpha1", k, v)
		}
	}

	// The upgrade: this build's CRDs, then its operator.
	port := freePort(t)
	installLocalCRDs(t, env, port)
	for _, name := range webhook.CRDs {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(crd.Status.StoredVersions, []string{"v1alpha1", "v1beta1"}) {
			t.Fatalf("%s storedVersions after the CRD upgrade: %v, want [v1alpha1 v1beta1]", name, crd.Status.StoredVersions)
		}
	}
	runOperatorWithWebhooks(t, env.Config, c, port)
	for _, name := range webhook.CRDs {
		eventually(t, 60*time.Second, name+" storedVersions trimmed to [v1beta1]", func() (bool, error) {
			var crd apiextensionsv1.CustomResourceDefinition
			if err := c.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
				return false, err
			}
			return slices.Equal(crd.Status.StoredVersions, []string{"v1beta1"}), nil
		})
	}
	for _, k := range keys {
		if v := storedAs(k); v != "v1beta1" {
			t.Errorf("after the migration, %s is stored as %s, want v1beta1", k, v)
		}
	}
	var shop dolphinv1.MySQLCluster
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "shop"}, &shop); err != nil {
		t.Fatal(err)
	}
	if shop.Spec.Instances != 2 || !shop.Spec.Paused {
		t.Errorf("migrated cluster: instances=%d paused=%v, want 2 and true (replicas: 2 of v1alpha1)", shop.Spec.Instances, shop.Spec.Paused)
	}
	var user dolphinv1.MySQLUser
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "shop-app"}, &user); err != nil || user.Spec.Name != "app" {
		t.Errorf("migrated user: %+v, %v", user.Spec, err)
	}
}
