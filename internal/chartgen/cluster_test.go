package chartgen

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// ClusterChart is the folder of the chart of one MySQLCluster, relative to the repository.
const ClusterChart = "charts/dolphin-cluster"

// The cluster chart lints with its defaults and test values, and its schema refuses values
// that would make objects other than the user meant.
func TestClusterChartLints(t *testing.T) {
	dir := filepath.Join(root, ClusterChart)
	for name, vals := range valuesFiles(t, ClusterChart) {
		if l := lint.RunAll(dir, vals, "db-ops"); l.HighestSeverity >= support.WarningSev {
			for _, m := range l.Messages {
				t.Errorf("%s: helm lint: %s", name, m)
			}
		}
	}
	store := map[string]any{"s3": map[string]any{"bucket": "b"}}
	for _, bad := range []struct {
		what string
		vals map[string]any
	}{
		{"a misspelt key", map[string]any{"user": []any{}}},
		{"a user of another cluster", map[string]any{"users": []any{map[string]any{"name": "app", "cluster": "other"}}}},
		{"a user without name", map[string]any{"users": []any{map[string]any{"host": "%"}}}},
		{"a database name the server refuses", map[string]any{"databases": []any{map[string]any{"name": "app db"}}}},
		{"two stores", map[string]any{"backupStore": store, "backup": map[string]any{"storeRef": map[string]any{"name": "x"}}}},
		{"a store of two kinds", map[string]any{"backupStore": map[string]any{"s3": map[string]any{}, "pvc": map[string]any{}}}},
		{"an upper-case cluster name", map[string]any{"name": "Shop"}},
	} {
		if l := lint.RunAll(dir, bad.vals, "db-ops"); l.HighestSeverity < support.ErrorSev {
			t.Errorf("helm lint took %s (%v): the schema must refuse it", bad.what, bad.vals)
		}
	}
}

// The full test values render a MySQLCluster whose backups go to the chart's store, and the
// databases and accounts of that cluster, all kept on uninstall; the minimal values one
// instance, nothing kept.
func TestClusterChartRenders(t *testing.T) {
	dir := filepath.Join(root, ClusterChart)
	files := valuesFiles(t, ClusterChart)
	rel, list := renderChart(t, dir, "shop-release", "db-ops", files["full-values.yaml"])
	checkReleaseSize(t, rel)
	objs := objectsByKind(list)
	c := as[dolphinv1.MySQLCluster](t, objs, "MySQLCluster/shop")
	if c.Spec.Instances != 3 || c.Spec.Backup == nil || c.Spec.Backup.StoreRef == nil || c.Spec.Backup.StoreRef.Name != "shop-backups" ||
		c.Spec.Backup.Schedule == nil || c.Spec.Backup.Schedule.Cron != "0 3 * * *" || c.Spec.MySQLConfig["max_connections"] != "300" {
		t.Errorf("MySQLCluster spec %+v, backup %+v: not what the values say", c.Spec, c.Spec.Backup)
	}
	store := as[dolphinv1.MySQLBackupStore](t, objs, "MySQLBackupStore/shop-backups")
	if store.Spec.S3 == nil || store.Spec.S3.Bucket != "db-backups" {
		t.Errorf("backup store %+v", store.Spec)
	}
	for key, server := range map[string]string{"MySQLDatabase/shop-app": "app", "MySQLDatabase/shop-app-reports": "app_reports"} {
		if d := as[dolphinv1.MySQLDatabase](t, objs, key); d.Spec.Cluster != "shop" || d.Spec.Name != server {
			t.Errorf("%s: cluster %s, name %s", key, d.Spec.Cluster, d.Spec.Name)
		}
	}
	for key, server := range map[string]string{"MySQLUser/shop-app": "app", "MySQLUser/shop-report-reader": "report_reader"} {
		if u := as[dolphinv1.MySQLUser](t, objs, key); u.Spec.Cluster != "shop" || u.Spec.Name != server || len(u.Spec.Grants) != 1 {
			t.Errorf("%s: cluster %s, name %s, grants %v", key, u.Spec.Cluster, u.Spec.Name, u.Spec.Grants)
		}
	}
	if len(list) != 7 {
		t.Errorf("%d objects rendered, want 7", len(list))
	}
	checkInstancePodMonitor(t, objs, c)
	for _, o := range list {
		if o.GetKind() == "PodMonitor" {
			continue // nothing a database needs: it goes with the release
		}
		if o.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
			t.Errorf("%s %s is not kept on uninstall", o.GetKind(), o.GetName())
		}
	}

	_, list = renderChart(t, dir, "scratch", "db-ops", files["minimal-values.yaml"])
	objs = objectsByKind(list)
	c = as[dolphinv1.MySQLCluster](t, objs, "MySQLCluster/scratch")
	if len(list) != 1 || c.Spec.Instances != 1 || c.Spec.Backup != nil || c.Annotations["helm.sh/resource-policy"] != "" || c.Spec.Engine.Version != "10.11" {
		t.Errorf("minimal: %d objects, cluster %+v", len(list), c)
	}
}

// checkInstancePodMonitor: the PodMonitor of the full values scrapes the pods, port, Secret
// keys and server name the operator really makes for the cluster c (so chart and code
// cannot drift apart), with the operator metrics' labels.
func checkInstancePodMonitor(t *testing.T, objs map[string]*unstructured.Unstructured, c *dolphinv1.MySQLCluster) {
	t.Helper()
	pm, ok := objs["PodMonitor/shop-instances"]
	if !ok {
		t.Fatal("no PodMonitor/shop-instances rendered with metrics.podMonitor.enabled")
	}
	c.Namespace = pm.GetNamespace()
	sel, _, _ := unstructured.NestedStringMap(pm.Object, "spec", "selector", "matchLabels")
	if !reflect.DeepEqual(sel, resources.SelectorLabels(c)) {
		t.Errorf("PodMonitor selects %v, the cluster's pods carry %v", sel, resources.SelectorLabels(c))
	}
	if pm.GetLabels()["release"] != "prometheus" {
		t.Errorf("PodMonitor labels %v lack the values' release label", pm.GetLabels())
	}
	eps, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
	if len(eps) != 1 {
		t.Fatalf("PodMonitor endpoints %v, want one", eps)
	}
	ep := eps[0].(map[string]any)
	str := func(path ...string) string { v, _, _ := unstructured.NestedString(ep, path...); return v }
	secret := resources.MetricsSecretName(c)
	for path, want := range map[string]string{
		"port":                           "agent",
		"scheme":                         "https",
		"path":                           "/metrics",
		"interval":                       "15s",
		"authorization.type":             "Bearer",
		"authorization.credentials.name": secret,
		"authorization.credentials.key":  resources.MetricsTokenKey,
		"tlsConfig.ca.secret.name":       secret,
		"tlsConfig.ca.secret.key":        resources.MetricsCAKey,
		"tlsConfig.serverName":           agent.AgentServerName(c.Name, c.Namespace),
	} {
		if got := str(strings.Split(path, ".")...); got != want {
			t.Errorf("PodMonitor endpoint %s = %q, want %q", path, got, want)
		}
	}
	relabel, _, _ := unstructured.NestedSlice(ep, "relabelings")
	targets := map[string]bool{}
	for _, r := range relabel {
		targets[r.(map[string]any)["targetLabel"].(string)] = true
	}
	if !targets["name"] || !targets["instance"] {
		t.Errorf("PodMonitor relabelings %v: want the operator metrics' name and instance labels", relabel)
	}
}
