package plugin

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// The plugin names the cluster's objects as the builders do.
func TestNamesAreTheBuilders(t *testing.T) {
	for _, c := range []*dolphinv1.MySQLCluster{
		{ObjectMeta: metav1.ObjectMeta{Name: "db"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "db"}, Spec: dolphinv1.MySQLClusterSpec{Credentials: dolphinv1.CredentialsSpec{SecretName: "mine"}}},
	} {
		if got, want := primaryService(c), resources.NamesFor(c).PrimaryService; got != want {
			t.Errorf("primary Service %s, the builders' %s", got, want)
		}
		if got, want := credentialsSecret(c), resources.CredentialsSecretName(c); got != want {
			t.Errorf("credentials Secret %s, the builders' %s", got, want)
		}
	}
	if got, want := caSecret(&dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Name: "db"}}), resources.TLSCASecretName(&dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Name: "db"}}); got != want {
		t.Errorf("CA Secret %s, the builders' %s", got, want)
	}
	for _, u := range []*dolphinv1.MySQLUser{
		{ObjectMeta: metav1.ObjectMeta{Name: "db-app"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "db-app"}, Spec: dolphinv1.MySQLUserSpec{PasswordSecretKeyRef: &dolphinv1.SecretKeyReference{Name: "pw"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "db-app"}, Spec: dolphinv1.MySQLUserSpec{PasswordSecretKeyRef: &dolphinv1.SecretKeyReference{Name: "pw", Key: "k"}}},
	} {
		s, k := userPasswordSecret(u)
		if s != resources.UserPasswordSecretName(u) || k != resources.UserPasswordKey(u) {
			t.Errorf("password of %+v in %s/%s, the builders' %s/%s", u.Spec, s, k, resources.UserPasswordSecretName(u), resources.UserPasswordKey(u))
		}
	}
	if rootPasswordKey != resources.RootPasswordKey || mysqlPort != resources.MySQLPort {
		t.Error("root password key or port differ from the builders'")
	}
	c := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Name: "db"}}
	common, sel := resources.CommonLabels(c), resources.SelectorLabels(c)
	if common[labelInstance] != "db" || common[labelManagedBy] != managedBy || sel[labelInstance] != "db" || sel[labelName] != volumeAppName {
		t.Errorf("the labels the report selects by are not the builders' (common %v, selector %v)", common, sel)
	}
}

func TestRestoreManifest(t *testing.T) {
	src := healthyCluster()
	src.Spec.MySQLConfig = map[string]dolphinv1.MySQLConfigValue{"max_connections": "300"}
	src.Spec.PrimaryService.Type = "LoadBalancer"
	src.Spec.TLS.CertificateSecret = "theirs"
	tm := time.Date(2026, 12, 6, 7, 0, 0, 0, time.FixedZone("CET", 3600))

	got, err := restoreManifest(src, "db-restored", restoreTarget{Time: &tm})
	if err != nil {
		t.Fatal(err)
	}
	pit := got.Spec.Bootstrap.PointInTime
	if got.Name != "db-restored" || got.Namespace != "shop" || got.Spec.Bootstrap.Backup != nil || pit == nil || pit.Cluster != "db" ||
		!pit.Time.Time.Equal(tm) || pit.Time.Location() != time.UTC {
		t.Errorf("to a time: %+v, bootstrap %+v", got.ObjectMeta, got.Spec.Bootstrap)
	}
	if got.Spec.Instances != 3 || got.Spec.MySQLConfig["max_connections"] != "300" || !got.Spec.TLS.Enabled {
		t.Errorf("the source's shape is not copied: %+v", got.Spec)
	}
	if got.Spec.Backup != nil || got.Spec.PrimaryService.Type != "" || got.Spec.TLS.CertificateSecret != "" || got.Status.Topology != nil {
		t.Errorf("copied what a new cluster must not share: backup %+v, primary Service %q, certificate %q", got.Spec.Backup, got.Spec.PrimaryService.Type, got.Spec.TLS.CertificateSecret)
	}

	got, err = restoreManifest(src, "db2", restoreTarget{Backup: "db-20261206-0300", GTID: "0-100-4700"})
	if err != nil || got.Spec.Bootstrap.Backup.Name != "db-20261206-0300" || got.Spec.Bootstrap.PointInTime.GTID != "0-100-4700" || got.Spec.Bootstrap.PointInTime.Cluster != "" {
		t.Errorf("a backup and a GTID: %v %+v", err, got)
	}
	got, err = restoreManifest(src, "db3", restoreTarget{Backup: "db-20261206-0300"})
	if err != nil || got.Spec.Bootstrap.PointInTime != nil || got.Spec.Bootstrap.Backup.Name != "db-20261206-0300" {
		t.Errorf("a backup as it is: %v %+v", err, got)
	}

	for what, bad := range map[string]struct {
		name string
		t    restoreTarget
	}{
		"no target":          {"db4", restoreTarget{}},
		"two points in time": {"db4", restoreTarget{GTID: "0-1-1", Latest: true}},
		"the source's name":  {"db", restoreTarget{Latest: true}},
		"no name":            {"", restoreTarget{Latest: true}},
	} {
		if _, err := restoreManifest(src, bad.name, bad.t); err == nil {
			t.Errorf("%s: no error", what)
		}
	}
}

func TestVersionSkew(t *testing.T) {
	for _, c := range []struct {
		plugin, operator string
		warn             string // a part of the warning; "" for none
	}{
		{"v0.3.1", "v0.3.1", ""},
		{"v0.3.1", "v0.3.4", ""},
		{"v0.3.1", "v0.4.0", "differ"},
		{"dev", "v0.4.0", "development build"},
		{"v0.4.0", "", "unknown"},
	} {
		got := skew(c.plugin, c.operator)
		if (c.warn == "") != (got == "") || !strings.Contains(got, c.warn) {
			t.Errorf("skew(%s, %s) = %q, want %q", c.plugin, c.operator, got, c.warn)
		}
	}
	for image, tag := range map[string]string{
		"ghcr.io/dolphin-operator/dolphin:v0.3.1": "v0.3.1", "localhost:5000/dolphin": "", "r/dolphin:dev@sha256:abc": "dev", "dolphin": "",
	} {
		if got := imageTag(image); got != tag {
			t.Errorf("imageTag(%s) = %q, want %q", image, got, tag)
		}
	}
}
