package chartgen

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	release "helm.sh/helm/v4/pkg/release/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"
)

const root = "../.."

// The committed chart is what Generate makes from config/crd: a CRD changed without `make
// manifests` fails here, in `make test`.
func TestCRDChartIsGenerated(t *testing.T) {
	files, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 5 {
		t.Fatalf("%d CRD templates, want 5", len(files))
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(root, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is not what config/crd makes (%v): run `make manifests` and commit", name, err)
		}
	}
	entries, err := os.ReadDir(filepath.Join(root, CRDChart, "templates"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := files[CRDChart+"/templates/"+e.Name()]; !ok && e.Name() != "NOTES.txt" {
			t.Errorf("templates/%s is no CRD config/crd lists: remove it", e.Name())
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

	ch, err := loader.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(action.NewConfiguration())
	install.DryRunStrategy = action.DryRunClient
	install.ReleaseName, install.Namespace, install.Replace = "dolphin-crds", "db-ops", true
	r, err := install.RunWithContext(context.Background(), ch, vals)
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	rel, ok := r.(*release.Release)
	if !ok {
		t.Fatalf("a %T, not a *release.Release", r)
	}

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

	// What Helm stores (pkg/storage/driver: base64(gzip(json(release)))).
	b, err := json.Marshal(rel)
	if err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	w, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	_, _ = w.Write(b)
	_ = w.Close()
	size := base64.StdEncoding.EncodedLen(gz.Len())
	t.Logf("release Secret data: %d bytes (chart and manifest %d bytes of JSON)", size, len(b))
	if size > 700<<10 {
		t.Errorf("the release Secret would hold %d bytes: over the 700 KiB this project allows itself under the 1 MiB limit", size)
	}
}
