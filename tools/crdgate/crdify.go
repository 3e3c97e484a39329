package main

import (
	"fmt"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/crdify/pkg/config"
	"sigs.k8s.io/crdify/pkg/runner"
	"sigs.k8s.io/crdify/pkg/validations"
)

// crdifyConfig: every crdify validation at its default (Error), except description changes,
// which break nothing, and enum values added, which stored objects do not notice (clients must
// tolerate values they do not know, as the Kubernetes API conventions ask); unhandled changes
// are errors (a change nobody models is a finding,
// not a pass), and versions served side by side are not compared with each other when a
// conversion webhook translates between them (they are meant to differ).
var crdifyConfig = config.Config{
	Validations: []config.ValidationConfig{
		{Name: "description", Enforcement: config.EnforcementPolicyNone},
		{Name: "enum", Enforcement: config.EnforcementPolicyError, Configuration: map[string]any{"additionPolicy": "Allow"}},
	},
	UnhandledEnforcement: config.EnforcementPolicyError,
	Conversion:           config.ConversionPolicyIgnore,
}

// crdifyFindings runs crdify on copies without CEL rules (celFindings compares those, in
// canonical form, which crdify's "unhandled" check would report for a mere reformat).
func crdifyFindings(old, new *apiextensionsv1.CustomResourceDefinition) ([]Finding, error) {
	r, err := runner.New(&crdifyConfig, runner.DefaultRegistry())
	if err != nil {
		return nil, fmt.Errorf("crdify: %w", err)
	}
	res := r.Run(withoutCEL(old), withoutCEL(new))
	var out []Finding
	for _, c := range res.CRDValidation {
		for _, e := range c.Errors {
			out = append(out, Finding{CRD: new.Name, Rule: Rule(c.Name), Message: oneLine(e)})
		}
	}
	add := func(byVersion map[string]map[string][]validations.ComparisonResult, prefix string) {
		for v, props := range byVersion {
			for path, results := range props {
				for _, c := range results {
					for _, e := range c.Errors {
						out = append(out, Finding{CRD: new.Name, Version: v, Path: path, Rule: Rule(c.Name), Message: prefix + oneLine(e)})
					}
				}
			}
		}
	}
	add(res.SameVersionValidation, "")
	add(res.ServedVersionValidation, "between served versions: ")
	return out, nil
}

// withoutCEL is a copy of crd with every x-kubernetes-validations rule removed.
func withoutCEL(crd *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.CustomResourceDefinition {
	c := crd.DeepCopy()
	for i := range c.Spec.Versions {
		if s := c.Spec.Versions[i].Schema; s != nil && s.OpenAPIV3Schema != nil {
			walkSchema(s.OpenAPIV3Schema, "^", func(p *apiextensionsv1.JSONSchemaProps, _ string) { p.XValidations = nil })
		}
	}
	return c
}

// walkSchema calls fn on s and every schema below it, with crdify's path notation (^.spec.x,
// [*] for array items, additionalProperties as .*).
func walkSchema(s *apiextensionsv1.JSONSchemaProps, path string, fn func(*apiextensionsv1.JSONSchemaProps, string)) {
	if s == nil {
		return
	}
	fn(s, path)
	for name, child := range s.Properties {
		walkSchema(&child, path+"."+name, fn)
		s.Properties[name] = child
	}
	if s.Items != nil && s.Items.Schema != nil {
		walkSchema(s.Items.Schema, path+"[*]", fn)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		walkSchema(s.AdditionalProperties.Schema, path+".*", fn)
	}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
