// Package chartgen writes the parts of Dolphin's Helm charts that come from config/, so that
// the charts cannot drift from what controller-gen and the kustomize sources say
// (docs/design/0058): the dolphin-crds chart's templates are the CustomResourceDefinitions of
// config/crd, each made to survive `helm uninstall` (helm.sh/resource-policy: keep) and with
// the conversion webhook's Service taken from the chart's values; the dolphin chart's RBAC
// rules and ValidatingWebhookConfiguration are config/rbac's, config/namespaced's and
// config/webhook's, named after the release; the alert rules of config/prometheus/rules.yaml
// become PrometheusRules for kustomize and the chart; the Grafana dashboard is built by
// internal/dashboard. A test compares the committed charts with what
// Generate makes.
package chartgen

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"

	"github.com/dolphin-operator/dolphin/internal/dashboard"
)

// DashboardFile is the Grafana dashboard internal/dashboard builds, for import by hand.
const DashboardFile = "config/grafana/dolphin.json"

// Generate returns the generated templates of every chart, keyed by their path relative to
// the repository at root.
func Generate(root string) (map[string][]byte, error) {
	crds, err := generateCRDs(root)
	if err != nil {
		return nil, fmt.Errorf("the CRD chart: %w", err)
	}
	operator, err := generateOperator(root)
	if err != nil {
		return nil, fmt.Errorf("the operator chart: %w", err)
	}
	rules, err := generateRules(root)
	if err != nil {
		return nil, fmt.Errorf("the alert rules: %w", err)
	}
	dash, err := dashboard.JSON()
	if err != nil {
		return nil, err
	}
	maps.Copy(crds, operator)
	maps.Copy(crds, rules)
	crds[DashboardFile] = dash
	crds[OperatorChart+"/dashboards/dolphin.json"] = dash
	return crds, nil
}

// Write writes what Generate makes under root.
func Write(root string, files map[string][]byte) error {
	for name, b := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", name, err)
		}
	}
	return nil
}
