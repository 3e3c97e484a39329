package chartgen

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// Versions of the peers whose CRDs the charts' objects are checked against.
const (
	prometheusOperatorModule = "github.com/prometheus-operator/prometheus-operator@v0.94.0"
	certManagerModule        = "github.com/cert-manager/cert-manager@v1.19.1"
)

// moduleDir downloads a Go module (through the module proxy, into the module cache) and
// returns its folder: the peers' CRDs come from their own repositories, at a fixed version.
func moduleDir(t *testing.T, module string) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", module)
	cmd.Dir = t.TempDir() // outside this module: nothing is added to go.mod
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &info); err != nil || jerr != nil || info.Dir == "" {
		t.Fatalf("go mod download %s: %v %v %s", module, err, jerr, info.Error)
	}
	return info.Dir
}

// TestEnvtestChartsApplyToARealAPIServer applies every object the charts render — the CRD
// chart, and the operator chart with its defaults and each test values file — to a real
// kube-apiserver with server-side dry run: the API server's own validation (schemas, CEL of
// the webhooks' match conditions, the ServiceMonitor, PodMonitor, Certificate and Issuer
// schemas of prometheus-operator and cert-manager) accepts each one.
func TestEnvtestChartsApplyToARealAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("needs kube-apiserver and etcd (envtest); skipped under -short")
	}
	prom := filepath.Join(moduleDir(t, prometheusOperatorModule), "example", "prometheus-operator-crd")
	cm := filepath.Join(moduleDir(t, certManagerModule), "deploy", "crds")
	env := testenv.StartForTestWithCRDs(t, testenv.CRDDir(),
		filepath.Join(prom, "monitoring.coreos.com_servicemonitors.yaml"), filepath.Join(prom, "monitoring.coreos.com_podmonitors.yaml"),
		filepath.Join(prom, "monitoring.coreos.com_prometheusrules.yaml"),
		filepath.Join(cm, "cert-manager.io_certificates.yaml"), filepath.Join(cm, "cert-manager.io_issuers.yaml"))
	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, ns := range []string{"db-ops", "dolphin", "monitoring"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	type render struct {
		chart, release, namespace, what string
		vals                            map[string]any
	}
	renders := []render{{CRDChart, "dolphin-crds", "db-ops", "defaults",
		map[string]any{"operator": map[string]any{"certManagerCertificate": "dolphin-webhook-cert"}}}}
	for name, vals := range valuesFiles(t, OperatorChart) {
		renders = append(renders, render{OperatorChart, "dolphin", "db-ops", name, vals})
	}
	for name, vals := range valuesFiles(t, ClusterChart) {
		renders = append(renders, render{ClusterChart, "shop", "db-ops", name, vals})
	}
	renders = append(renders, render{OperatorChart, "dolphin", "dolphin", "scope Namespace", map[string]any{"scope": "Namespace"}})
	// config/prometheus's PrometheusRule, as kustomize users apply it.
	b, err := os.ReadFile(filepath.Join(root, rulesPrometheusCR))
	if err != nil {
		t.Fatal(err)
	}
	var pr unstructured.Unstructured
	if err := yaml.Unmarshal(b, &pr.Object); err != nil {
		t.Fatal(err)
	}
	pr.SetNamespace("db-ops")
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(&pr), client.DryRunAll, client.FieldOwner("kubectl"), client.ForceOwnership); err != nil {
		t.Errorf("%s refused by the API server: %v", rulesPrometheusCR, err)
	}
	for _, r := range renders {
		_, objs := renderChart(t, filepath.Join(root, r.chart), r.release, r.namespace, r.vals)
		for _, o := range objs {
			if o.GetNamespace() == "" && o.GetKind() != "CustomResourceDefinition" && o.GetKind() != "ClusterRole" &&
				o.GetKind() != "ClusterRoleBinding" && o.GetKind() != "ValidatingWebhookConfiguration" {
				o.SetNamespace(r.namespace) // as Helm does for a namespaced object that names none
			}
			if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.DryRunAll, client.FieldOwner("helm"), client.ForceOwnership); err != nil {
				t.Errorf("%s (%s): %s %s refused by the API server: %v", r.chart, r.what, o.GetKind(), o.GetName(), err)
			}
		}
		t.Logf("%s (%s): %d objects accepted", r.chart, r.what, len(objs))
	}
}
