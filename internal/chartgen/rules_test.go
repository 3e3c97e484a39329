package chartgen

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// promtool is the promtool of hack/promtool.sh (DOLPHIN_PROMTOOL, which `make test` sets).
func promtool(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs promtool; skipped under -short")
	}
	p := os.Getenv("DOLPHIN_PROMTOOL")
	if p == "" {
		// Provided (downloaded once) when the test runs outside make test.
		out, err := exec.Command(filepath.Join(root, "hack", "promtool.sh")).Output()
		if err != nil {
			t.Fatalf("hack/promtool.sh: %v", err)
		}
		p = string(out[:len(out)-1])
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("promtool: %v (run hack/promtool.sh, or make test, which provides it)", err)
	}
	return p
}

// Every alert's rule is valid and its unit tests pass: each fires when it should, after its
// `for`, with its labels and rendered annotations, and not for planned work or healthy
// clusters, a single-instance one included (config/prometheus/tests).
func TestAlertRules(t *testing.T) {
	p := promtool(t)
	dir := filepath.Join(root, "config", "prometheus")
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", filepath.Join("tests", "rules_test.yaml")}} {
		cmd := exec.Command(p, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}

// The PrometheusRule the chart renders holds the source's groups unchanged: Prometheus'
// {{ $labels… }} survive Helm's templating.
func TestChartPrometheusRuleIsTheSource(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, rulesSource))
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := yaml.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	_, list := renderChart(t, filepath.Join(root, OperatorChart), "dolphin", "db-ops", map[string]any{"prometheusRule": map[string]any{"enabled": true}})
	objs := objectsByKind(list)
	pr := objs["PrometheusRule/dolphin-alerts"]
	if pr == nil {
		t.Fatal("no PrometheusRule rendered with prometheusRule.enabled")
	}
	groups, _, _ := unstructured.NestedSlice(pr.Object, "spec", "groups")
	if !equality.Semantic.DeepEqual(groups, want["groups"]) {
		t.Error("the chart's PrometheusRule groups differ from config/prometheus/rules.yaml's")
	}
	_, list = renderChart(t, filepath.Join(root, OperatorChart), "dolphin", "db-ops", nil)
	if _, ok := objectsByKind(list)["PrometheusRule/dolphin-alerts"]; ok {
		t.Error("a PrometheusRule rendered although prometheusRule.enabled is false")
	}
}

// Every alert links a runbook section of docs/runbooks.md, and every section is an alert's.
func TestEveryAlertHasARunbook(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, rulesSource))
	if err != nil {
		t.Fatal(err)
	}
	var src struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `json:"alert"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(b, &src); err != nil {
		t.Fatal(err)
	}
	book, err := os.ReadFile(filepath.Join(root, "docs", "runbooks.md"))
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, line := range strings.Split(string(book), "\n") {
		if name, ok := strings.CutPrefix(line, "## "); ok {
			sections[name] = true
		}
	}
	alerts := 0
	for _, g := range src.Groups {
		for _, r := range g.Rules {
			alerts++
			want := "https://github.com/dolphin-operator/dolphin/blob/main/docs/runbooks.md#" + strings.ToLower(r.Alert)
			if r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
			}
			if !sections[r.Alert] {
				t.Errorf("%s has no section in docs/runbooks.md", r.Alert)
			}
			delete(sections, r.Alert)
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: summary and description are required", r.Alert)
			}
		}
	}
	for s := range sections {
		t.Errorf("docs/runbooks.md has a section %q for no alert", s)
	}
	if alerts < 15 {
		t.Errorf("%d alerts", alerts)
	}
}

// With grafanaDashboard.enabled the chart ships the generated dashboard in a ConfigMap for
// Grafana's sidecar, byte for byte.
func TestChartShipsTheDashboard(t *testing.T) {
	want, err := os.ReadFile(filepath.Join(root, DashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	_, list := renderChart(t, filepath.Join(root, OperatorChart), "dolphin", "db-ops",
		map[string]any{"grafanaDashboard": map[string]any{"enabled": true, "namespace": "monitoring"}})
	cm := objectsByKind(list)["ConfigMap/dolphin-dashboard"]
	if cm == nil {
		t.Fatal("no dashboard ConfigMap rendered")
	}
	got, _, _ := unstructured.NestedString(cm.Object, "data", "dolphin.json")
	if got != strings.TrimSuffix(string(want), "\n") || cm.GetNamespace() != "monitoring" || cm.GetLabels()["grafana_dashboard"] != "1" {
		t.Errorf("the ConfigMap (namespace %s, labels %v) does not hold config/grafana/dolphin.json as it is", cm.GetNamespace(), cm.GetLabels())
	}
}
