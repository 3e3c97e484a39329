// Command crdconversion adds the conversion webhook to the CRDs whose versions differ in
// schema (controller-gen has no marker for it). `make manifests` runs it after controller-gen:
//
//	go run ./hack/crdconversion config/crd/bases/mysql.dolphin.dev_mysqlclusters.yaml
//
// The webhook is the operator's Service (dolphin-webhook in dolphin-system, path /convert),
// as for the validating webhooks; kustomize's namespace transformer moves it with the install,
// the operator injects the caBundle, and `dolphin local` points it at 127.0.0.1.
package main

import (
	"bytes"
	"fmt"
	"os"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// conversion is inserted right after "spec:" (controller-gen's output is stable: the group
// follows), in controller-gen's two-space style.
const conversion = `  conversion:
    strategy: Webhook
    webhook:
      clientConfig:
        service:
          name: dolphin-webhook
          namespace: dolphin-system
          path: /convert
      conversionReviewVersions:
      - v1
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: crdconversion CRD.yaml…")
		os.Exit(2)
	}
	for _, path := range os.Args[1:] {
		if err := addConversion(path); err != nil {
			fmt.Fprintln(os.Stderr, "crdconversion:", err)
			os.Exit(1)
		}
	}
}

func addConversion(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	anchor := []byte("\nspec:\n  group: ")
	if !bytes.Contains(b, anchor) {
		return fmt.Errorf("%s: no \"spec:\" followed by \"group:\" (not controller-gen output?)", path)
	}
	if bytes.Contains(b, []byte("\n  conversion:\n")) {
		return fmt.Errorf("%s: already has spec.conversion", path)
	}
	out := bytes.Replace(b, anchor, []byte("\nspec:\n"+conversion+"  group: "), 1)
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(out, &crd); err != nil {
		return fmt.Errorf("%s after adding the conversion: %w", path, err)
	}
	if c := crd.Spec.Conversion; c == nil || c.Strategy != apiextensionsv1.WebhookConverter || c.Webhook.ClientConfig.Service.Path == nil {
		return fmt.Errorf("%s: the conversion did not land in spec.conversion", path)
	}
	return os.WriteFile(path, out, 0o644)
}
