package webhook

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// A Secret change is checked for the keys it changes only: a cluster admitted before the
// rule with a weak operator password can still rotate its other passwords.
func TestSecretValidatorChecksChangedKeys(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = dolphinv1.AddToScheme(scheme)
	cluster := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "shop"},
		Spec: dolphinv1.MySQLClusterSpec{Credentials: dolphinv1.CredentialsSpec{SecretName: "creds"}}}
	v := SecretValidator{Client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(cluster).Build()}
	old := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "creds"}, Data: map[string][]byte{
		resources.OperatorPasswordKey: []byte("weak"), resources.MonitorPasswordKey: []byte("M0nitor-Secret-Long")}}
	rotated := old.DeepCopy()
	rotated.Data[resources.MonitorPasswordKey] = []byte("M0nitor-Secret-Longer-2")
	if _, err := v.ValidateUpdate(context.Background(), old, rotated); err != nil {
		t.Errorf("rotating the monitor password: %v (the weak operator password did not change)", err)
	}
	weakened := old.DeepCopy()
	weakened.Data[resources.MonitorPasswordKey] = []byte("monitor")
	_, err := v.ValidateUpdate(context.Background(), old, weakened)
	if err == nil || !strings.Contains(err.Error(), `MySQLCluster shop spec.credentials.secretName: key "monitor-password" of Secret "creds"`) {
		t.Errorf("a weak monitor password: %v, want rejected naming the key", err)
	}
	if err != nil && strings.Contains(err.Error(), "operator-password") {
		t.Errorf("the unchanged operator password was checked: %v", err)
	}
	// Another namespace than the one the operator manages is not checked.
	elsewhere := weakened.DeepCopy()
	elsewhere.Namespace = "other"
	if _, err := (SecretValidator{Client: v.Client, Namespace: "ns"}).ValidateUpdate(context.Background(), old, elsewhere); err != nil {
		t.Errorf("a Secret outside the watched namespace: %v", err)
	}
	labelled := old.DeepCopy()
	labelled.Labels = map[string]string{resources.CredentialsLabel: "true"}
	if _, err := v.ValidateUpdate(context.Background(), old, labelled); err != nil {
		t.Errorf("a label-only change: %v", err)
	}
}

// A retention window that would keep more than 1000 scheduled backups is refused when it is
// set or the schedule changes, not on an unrelated update of a cluster admitted before the
// rule; a schedule without retention is admitted with a warning.
func TestClusterValidatorRetentionBound(t *testing.T) {
	v := ClusterValidator{}
	ctx := context.Background()
	cluster := func(cron string, window time.Duration) *dolphinv1.MySQLCluster {
		return &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "shop"},
			Spec: dolphinv1.MySQLClusterSpec{Backup: &dolphinv1.BackupSpec{Schedule: &dolphinv1.BackupSchedule{Cron: cron},
				Retention: &dolphinv1.BackupRetention{Window: &metav1.Duration{Duration: window}}}}}
	}
	tooMany := cluster("@every 1m", 720*time.Hour)
	if _, err := v.ValidateCreate(ctx, tooMany); err == nil || !strings.Contains(err.Error(), "spec.backup.retention.window 720h0m0s") {
		t.Errorf("a window of 43 200 minutely backups: %v, want refused naming the window", err)
	}
	if _, err := v.ValidateCreate(ctx, cluster("@daily", 168*time.Hour)); err != nil {
		t.Errorf("a week of daily backups: %v", err)
	}
	relabelled := tooMany.DeepCopy()
	relabelled.Labels = map[string]string{"team": "shop"}
	if _, err := v.ValidateUpdate(ctx, tooMany, relabelled); err != nil {
		t.Errorf("an unrelated update of a cluster admitted before the rule: %v", err)
	}
	longer := cluster("@daily", 168*time.Hour)
	longer.Spec.Backup.Schedule.Cron = "@every 5m"
	if _, err := v.ValidateUpdate(ctx, cluster("@daily", 168*time.Hour), longer); err == nil {
		t.Error("a schedule changed to every 5 minutes under a week's window was admitted")
	}
	unbounded := cluster("@daily", time.Hour)
	unbounded.Spec.Backup.Retention = nil
	warnings, err := v.ValidateCreate(ctx, unbounded)
	if err != nil || len(warnings) != 1 || !strings.Contains(warnings[0], "every scheduled backup is kept") {
		t.Errorf("a schedule without retention: warnings %q, %v; want admitted with a warning", warnings, err)
	}
}

// Preferred durability on a single instance is admitted with a warning that it chooses
// nothing; Required (the default) and Preferred with replicas get none.
func TestDurabilityWarnings(t *testing.T) {
	for _, tc := range []struct {
		durability dolphinv1.Durability
		instances  int32
		warn       bool
	}{
		{dolphinv1.DurabilityPreferred, 1, true},
		{dolphinv1.DurabilityRequired, 1, false},
		{dolphinv1.DurabilityPreferred, 3, false},
	} {
		c := &dolphinv1.MySQLCluster{Spec: dolphinv1.MySQLClusterSpec{Durability: tc.durability, Instances: tc.instances}}
		w := durabilityWarnings(c)
		if got := len(w) == 1 && strings.Contains(w[0], "no effect with one instance"); got != tc.warn {
			t.Errorf("%s with %d instance(s): warnings %q", tc.durability, tc.instances, w)
		}
	}
}

// spec.mysqlConfig keys are checked at admission against the reconciler's table: an unknown
// key is refused with what to do, a loose_ one passes, an unrelated update of a cluster
// admitted before the rule passes, and a change of a restart-only setting is admitted with a
// warning that the instances restart.
func TestClusterValidatorMySQLConfigKeys(t *testing.T) {
	v := ClusterValidator{}
	ctx := context.Background()
	cluster := func(cfg map[string]dolphinv1.MySQLConfigValue) *dolphinv1.MySQLCluster {
		return &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "shop"},
			Spec: dolphinv1.MySQLClusterSpec{MySQLConfig: cfg}}
	}
	typo := cluster(map[string]dolphinv1.MySQLConfigValue{"innodb_bufer_pool_size": "1G"})
	if _, err := v.ValidateCreate(ctx, typo); err == nil || !strings.Contains(err.Error(), "innodb_bufer_pool_size not known for mariadb 10.11") ||
		!strings.Contains(err.Error(), "loose_innodb_bufer_pool_size") {
		t.Errorf("a misspelt key: %v, want refused naming it and the loose_ way out", err)
	}
	if _, err := v.ValidateCreate(ctx, cluster(map[string]dolphinv1.MySQLConfigValue{"loose_innodb_bufer_pool_size": "1G", "max_connections": "200"})); err != nil {
		t.Errorf("a loose_ key and a known one: %v", err)
	}
	wrong := cluster(map[string]dolphinv1.MySQLConfigValue{"max_connections": "many", "performance_schema": "yes", "long_query_time": "0.5"})
	if _, err := v.ValidateCreate(ctx, wrong); err == nil || !strings.Contains(err.Error(), `max_connections must be a whole number (a size may end in K, M, G, T, P or E), not "many"`) ||
		!strings.Contains(err.Error(), "performance_schema must be ON or OFF") || strings.Contains(err.Error(), "long_query_time") {
		t.Errorf("values of the wrong type: %v, want each refused with the form it must take", err)
	}
	relabelled := typo.DeepCopy()
	relabelled.Labels = map[string]string{"team": "shop"}
	if _, err := v.ValidateUpdate(ctx, typo, relabelled); err != nil {
		t.Errorf("an unrelated update of a cluster admitted before the rule: %v", err)
	}
	before := cluster(map[string]dolphinv1.MySQLConfigValue{"max_connections": "200"})
	after := cluster(map[string]dolphinv1.MySQLConfigValue{"max_connections": "300", "performance_schema": "ON"})
	warnings, err := v.ValidateUpdate(ctx, before, after)
	if err != nil || len(warnings) != 1 || !strings.Contains(warnings[0], "performance_schema take effect only at a restart") ||
		strings.Contains(warnings[0], "max_connections") {
		t.Errorf("a restart-only setting added: warnings %q, %v; want one warning naming it (not the run-time one)", warnings, err)
	}
}

// A release series with the official image is admitted with a warning that its tag moves; a
// full version, or an image of one's own, is not warned about.
func TestVersionWarnings(t *testing.T) {
	for _, tc := range []struct {
		engine dolphinv1.EngineSpec
		warned bool
	}{
		{dolphinv1.EngineSpec{Flavor: "mariadb", Version: "10.11"}, true},
		{dolphinv1.EngineSpec{Flavor: "mariadb", Version: "10.11.19"}, false},
		{dolphinv1.EngineSpec{Flavor: "mariadb", Version: "10.11", Image: "registry.example/mariadb@sha256:abc"}, false},
	} {
		c := &dolphinv1.MySQLCluster{Spec: dolphinv1.MySQLClusterSpec{Engine: tc.engine}}
		w := versionWarnings(c)
		if (len(w) > 0) != tc.warned || (tc.warned && !strings.Contains(w[0], "10.11.19")) {
			t.Errorf("%+v: warnings %v, want warned %v", tc.engine, w, tc.warned)
		}
	}
}
