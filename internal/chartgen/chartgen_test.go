package chartgen

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	release "helm.sh/helm/v4/pkg/release/v1"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/dolphin-operator/dolphin/internal/localcluster"
)

const root = "../.."

// The committed charts hold what Generate makes from config/: a CRD, an RBAC marker or a
// webhook changed without `make manifests` fails here, in `make test`; so does a generated
// file left behind.
func TestChartsAreGenerated(t *testing.T) {
	files, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 11 {
		t.Fatalf("%d generated files, want 11 (5 CRDs, RBAC rules, webhooks, 2 PrometheusRules, 2 dashboards)", len(files))
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(root, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is not what config/ makes (%v): run `make manifests` and commit", name, err)
		}
	}
	for dir, handWritten := range map[string][]string{
		CRDChart + "/templates":                {"NOTES.txt"},
		OperatorChart + "/templates/generated": nil,
	} {
		entries, err := os.ReadDir(filepath.Join(root, dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if _, ok := files[dir+"/"+e.Name()]; !ok && !slices.Contains(handWritten, e.Name()) {
				t.Errorf("%s/%s is not generated from config/: remove it", dir, e.Name())
			}
		}
	}
}

// The CRD chart passes Helm's own lint (values checked against values.schema.json) and renders,
// as `helm template` does, the five CRDs of config/crd unchanged but for the keep annotation,
// the release's labels and the operator's Service named by the values. The release Secret
// Helm would store for it (base64 of the gzipped JSON release: chart and rendered manifest) stays
// well under the 1 MiB an object may hold.
func TestCRDChartLintsRendersAndFits(t *testing.T) {
	dir := filepath.Join(root, CRDChart)
	vals := map[string]any{"operator": map[string]any{"namespace": "db-ops", "webhookService": "dolphin-webhook"}}
	if l := lint.RunAll(dir, vals, "db-ops"); l.HighestSeverity >= support.WarningSev {
		for _, m := range l.Messages {
			t.Errorf("helm lint: %s", m)
		}
	}
	if l := lint.RunAll(dir, map[string]any{"operator": map[string]any{"namespace": "Not A Namespace", "webhookService": "dolphin-webhook"}}, "x"); l.HighestSeverity < support.ErrorSev {
		t.Errorf("helm lint took a namespace the schema must refuse: %v", l.Messages)
	}

	rel, _ := renderChart(t, dir, "dolphin-crds", "db-ops", vals)
	ch := rel.Chart

	rendered := map[string]apiextensionsv1.CustomResourceDefinition{}
	for _, doc := range strings.Split(rel.Manifest, "\n---\n") {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal([]byte(doc), &crd); err != nil {
			t.Fatal(err)
		}
		if crd.Kind == "CustomResourceDefinition" {
			rendered[crd.Name] = crd
		}
	}
	bases, _ := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
	if len(rendered) != 5 || len(bases) != 5 {
		t.Fatalf("%d CRDs rendered, %d in config/crd/bases; want 5 each", len(rendered), len(bases))
	}
	for _, f := range bases {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var want apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		got := rendered[want.Name]
		if got.Annotations["helm.sh/resource-policy"] != "keep" || got.Labels["app.kubernetes.io/managed-by"] != "Helm" ||
			got.Labels["helm.sh/chart"] != "dolphin-crds-"+ch.Metadata.Version {
			t.Errorf("%s: annotations %v, labels %v", want.Name, got.Annotations, got.Labels)
		}
		if c := got.Spec.Conversion; c != nil && c.Webhook != nil {
			if s := c.Webhook.ClientConfig.Service; s.Namespace != "db-ops" || s.Name != "dolphin-webhook" {
				t.Errorf("%s: conversion Service %s/%s, want db-ops/dolphin-webhook", want.Name, s.Namespace, s.Name)
			}
			c.Webhook.ClientConfig.Service.Namespace = want.Spec.Conversion.Webhook.ClientConfig.Service.Namespace
		}
		if !equality.Semantic.DeepEqual(got.Spec, want.Spec) {
			t.Errorf("%s: the chart's spec differs from config/crd's", want.Name)
		}
	}

	checkReleaseSize(t, rel)

	// With the operator's certificate from cert-manager, its CA injector is named on the CRD
	// it converts, and only there.
	vals["operator"].(map[string]any)["certManagerCertificate"] = "dolphin-webhook-cert"
	_, objs := renderChart(t, dir, "dolphin-crds", "db-ops", vals)
	for _, o := range objs {
		got := o.GetAnnotations()["cert-manager.io/inject-ca-from"]
		if want := map[bool]string{true: "db-ops/dolphin-webhook-cert"}[o.GetName() == "mysqlclusters.mysql.dolphin.dev"]; got != want {
			t.Errorf("%s: cert-manager.io/inject-ca-from %q, want %q", o.GetName(), got, want)
		}
	}
}

// renderChart renders the chart in dir as `helm template` does (a client-side dry-run install
// of release name in namespace ns) and returns the release and the objects of its manifest.
func renderChart(t *testing.T, dir, name, ns string, vals map[string]any) (*release.Release, []*unstructured.Unstructured) {
	t.Helper()
	ch, err := loader.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(action.NewConfiguration())
	install.DryRunStrategy = action.DryRunClient
	install.ReleaseName, install.Namespace, install.Replace = name, ns, true
	// The API server of this project's tests (Helm's SDK assumes v1.20 otherwise).
	kv, err := common.ParseKubeVersion(localcluster.KubernetesVersion)
	if err != nil {
		t.Fatal(err)
	}
	install.KubeVersion = kv
	r, err := install.RunWithContext(context.Background(), ch, vals)
	if err != nil {
		t.Fatalf("rendering %s: %v", dir, err)
	}
	rel, ok := r.(*release.Release)
	if !ok {
		t.Fatalf("a %T, not a *release.Release", r)
	}
	var objs []*unstructured.Unstructured
	for _, doc := range releaseutil.SplitManifests(rel.Manifest) {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("%s renders YAML that does not parse: %v\n%s", dir, err, doc)
		}
		if u.Object != nil {
			objs = append(objs, &u)
		}
	}
	return rel, objs
}

// checkReleaseSize fails the test when the release Secret Helm would store for rel (pkg/storage/driver:
// base64 of the gzipped JSON release, chart and rendered manifest) comes near the 1 MiB an
// object may hold.
func checkReleaseSize(t *testing.T, rel *release.Release) {
	t.Helper()
	b, err := json.Marshal(rel)
	if err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	w, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	_, _ = w.Write(b)
	_ = w.Close()
	size := base64.StdEncoding.EncodedLen(gz.Len())
	t.Logf("%s: release Secret data %d bytes (chart and manifest %d bytes of JSON)", rel.Chart.Name(), size, len(b))
	if size > 700<<10 {
		t.Errorf("the release Secret would hold %d bytes: over the 700 KiB this project allows itself under the 1 MiB limit", size)
	}
}

// hack/helm.sh builds the helm command of the Helm version these tests and the Helm e2e link,
// so that what the docs show with it is what the tests checked.
func TestHelmCommandIsTheTestedVersion(t *testing.T) {
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join(root, "hack", "helm.sh"))
	if err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`(?m)^\s*helm\.sh/helm/v4 (v\S+)`).FindSubmatch(mod)
	got := regexp.MustCompile(`(?m)^HELM_VERSION=(\S+)$`).FindSubmatch(script)
	if want == nil || got == nil || !bytes.Equal(want[1], got[1]) {
		t.Errorf("hack/helm.sh builds helm %q, go.mod links %q: keep them in step", got, want)
	}
}
