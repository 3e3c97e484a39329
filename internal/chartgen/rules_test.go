package chartgen

import (
	"os"
	"os/exec"
	"path/filepath"
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
