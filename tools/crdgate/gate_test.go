package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// spec is the schema of a test CRD's spec: a string field, an integer with bounds, an enum, a
// field with a default, and a nested object.
func spec() apiextensionsv1.JSONSchemaProps {
	return apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"name":     {Type: "string", MaxLength: ptr.To[int64](63), Description: "the name"},
		"replicas": {Type: "integer", Minimum: ptr.To(1.0), Maximum: ptr.To(9.0)},
		"mode":     {Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"a"`)}, {Raw: []byte(`"b"`)}}},
		"policy":   {Type: "string", Default: &apiextensionsv1.JSON{Raw: []byte(`"Retain"`)}},
		"tls": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"enabled": {Type: "boolean"},
			"secret":  {Type: "string"},
		}},
	}}
}

// testCRD is a CRD serving the given versions (the first stored), each with schema s.
func testCRD(s apiextensionsv1.JSONSchemaProps, versions ...string) *apiextensionsv1.CustomResourceDefinition {
	crd := &apiextensionsv1.CustomResourceDefinition{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.dev"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.dev", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
		},
	}
	for i, v := range versions {
		root := apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"apiVersion": {Type: "string"}, "kind": {Type: "string"}, "metadata": {Type: "object"}, "spec": *s.DeepCopy(),
		}}
		crd.Spec.Versions = append(crd.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{
			Name: v, Served: true, Storage: i == 0, Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &root},
		})
	}
	return crd
}

// edit returns a copy of the default test CRD (one version, v1) with f applied to its spec
// schema.
func edit(f func(s *apiextensionsv1.JSONSchemaProps)) *apiextensionsv1.CustomResourceDefinition {
	s := spec()
	f(&s)
	return testCRD(s, "v1")
}

func field(s *apiextensionsv1.JSONSchemaProps, name string, f func(*apiextensionsv1.JSONSchemaProps)) {
	p := s.Properties[name]
	f(&p)
	s.Properties[name] = p
}

func rule(r string) apiextensionsv1.ValidationRule {
	return apiextensionsv1.ValidationRule{Rule: r, Message: "m"}
}

// TestRules: for every rule, a pair of CRDs that must fail with it and, where a change looks
// alike but breaks nothing, a pair that must pass.
func TestRules(t *testing.T) {
	base := testCRD(spec(), "v1")
	cases := []struct {
		name string
		old  *apiextensionsv1.CustomResourceDefinition
		new  *apiextensionsv1.CustomResourceDefinition
		want Rule // "" must pass
		msg  string
	}{
		{"unchanged", base, edit(func(*apiextensionsv1.JSONSchemaProps) {}), "", ""},
		{"a field removed", base, edit(func(s *apiextensionsv1.JSONSchemaProps) { delete(s.Properties, "policy") }), "existingFieldRemoval", "policy"},
		{"a field renamed", base, edit(func(s *apiextensionsv1.JSONSchemaProps) {
			s.Properties["retention"] = s.Properties["policy"]
			delete(s.Properties, "policy")
		}), "existingFieldRemoval", "policy"},
		{"an optional field added", base, edit(func(s *apiextensionsv1.JSONSchemaProps) {
			s.Properties["extra"] = apiextensionsv1.JSONSchemaProps{Type: "string"}
		}), "", ""},
		{"a type changed", base, edit(func(s *apiextensionsv1.JSONSchemaProps) {
			field(s, "name", func(p *apiextensionsv1.JSONSchemaProps) { p.Type = "integer"; p.MaxLength = nil })
		}), "type", ""},
		{"a field made required", base, edit(func(s *apiextensionsv1.JSONSchemaProps) { s.Required = []string{"name"} }), "required", "name"},
		{"an enum value removed", base, edit(func(s *apiextensionsv1.JSONSchemaProps) {
			field(s, "mode", func(p *apiextensionsv1.JSONSchemaProps) { p.Enum = p.Enum[:1] })
		}), "enum", ""},
		{"an enum value added", base, edit(func(s *apiextensionsv1.JSONSchemaProps) {
			field(s, "mode", func(p *apiextensionsv1.JSONSchemaProps) {
				p.Enum = append(p.Enum, apiextensionsv1.JSON{Raw: []byte(`"c"`)})
			})
		}), "", ""},
		{"a maximum lowered", base, edit(func(s *apiextensionsv1.JSONSchemaProps) {
			field(s, "replicas", func(p *apiextensionsv1.JSONSchemaProps) { p.Maximum = ptr.To(5.0) })
		}), "maximum", ""},
		{"a maximum raised", base, edit(func(s *apiextensionsv1.JSONSchemaProps) {
			field(s, "replicas", func(p *apiextensionsv1.JSONSchemaProps) { p.Maximum = ptr.To(15.0) })
		}), "", ""},
		{"a minimum raised", base, edit(func(s *apiextensionsv1.JSONSchemaProps) {
			field(s, "replicas", func(p *apiextensionsv1.JSONSchemaProps) { p.Minimum = ptr.To(3.0) })
		}), "minimum", ""},
		{"a maxLength lowered", base, edit(func(s *apiextensionsv1.JSONSchemaProps) {
			field(s, "name", func(p *apiextensionsv1.JSONSchemaProps) { p.MaxLength = ptr.To[int64](10) })
		}), "maxLength", ""},
		{"a default changed", base, edit(func(s *apiextensionsv1.JSONSchemaProps) {
			field(s, "policy", func(p *apiextensionsv1.JSONSchemaProps) { p.Default = &apiextensionsv1.JSON{Raw: []byte(`"Delete"`)} })
		}), "default", ""},
		{"a description changed", base, edit(func(s *apiextensionsv1.JSONSchemaProps) {
			field(s, "name", func(p *apiextensionsv1.JSONSchemaProps) { p.Description = "what it is called" })
		}), "", ""},
		{"the scope changed", base, func() *apiextensionsv1.CustomResourceDefinition {
			c := base.DeepCopy()
			c.Spec.Scope = apiextensionsv1.ClusterScoped
			return c
		}(), "scope", ""},

		// CEL.
		{"a CEL rule added on an existing field", base, edit(func(s *apiextensionsv1.JSONSchemaProps) {
			field(s, "name", func(p *apiextensionsv1.JSONSchemaProps) {
				p.XValidations = []apiextensionsv1.ValidationRule{rule("self.size() <= 5")}
			})
		}), RuleCELRuleAdded, "ratcheting"},
		{"a CEL rule on a new field", base, edit(func(s *apiextensionsv1.JSONSchemaProps) {
			s.Properties["extra"] = apiextensionsv1.JSONSchemaProps{Type: "string", XValidations: []apiextensionsv1.ValidationRule{rule("self.size() <= 5")}}
		}), "", ""},
		{"a CEL rule on an existing object that only constrains a new field", base, edit(func(s *apiextensionsv1.JSONSchemaProps) {
			field(s, "tls", func(p *apiextensionsv1.JSONSchemaProps) {
				p.Properties["required"] = apiextensionsv1.JSONSchemaProps{Type: "boolean"}
				p.XValidations = []apiextensionsv1.ValidationRule{rule("!has(self.required) || !self.required || self.enabled")}
			})
		}), "", ""},
		{"a CEL rule on an existing object that needs an old field's value", base, edit(func(s *apiextensionsv1.JSONSchemaProps) {
			field(s, "tls", func(p *apiextensionsv1.JSONSchemaProps) {
				p.Properties["required"] = apiextensionsv1.JSONSchemaProps{Type: "boolean"}
				p.XValidations = []apiextensionsv1.ValidationRule{rule("has(self.required) || !has(self.secret)")}
			})
		}), RuleCELRuleAdded, ""},
		{"a transition rule added", base, edit(func(s *apiextensionsv1.JSONSchemaProps) {
			field(s, "name", func(p *apiextensionsv1.JSONSchemaProps) {
				p.XValidations = []apiextensionsv1.ValidationRule{rule("self == oldSelf")}
			})
		}), RuleCELRuleAdded, "nothing is ratcheted"},
		{"a CEL rule tightened", edit(func(s *apiextensionsv1.JSONSchemaProps) {
			s.XValidations = []apiextensionsv1.ValidationRule{rule("!has(self.replicas) || self.replicas > 1")}
		}), edit(func(s *apiextensionsv1.JSONSchemaProps) {
			s.XValidations = []apiextensionsv1.ValidationRule{rule("!has(self.replicas) || self.replicas > 2")}
		}), RuleCELRuleChanged, "self.replicas > 2"},
		{"a CEL rule reformatted, its message changed", edit(func(s *apiextensionsv1.JSONSchemaProps) {
			s.XValidations = []apiextensionsv1.ValidationRule{rule("!has(self.replicas)||self.replicas>1")}
		}), edit(func(s *apiextensionsv1.JSONSchemaProps) {
			s.XValidations = []apiextensionsv1.ValidationRule{{Rule: "(!has(self.replicas) || (self.replicas > 1))", Message: "replicas must be more than one"}}
		}), "", ""},
		{"a CEL rule removed", edit(func(s *apiextensionsv1.JSONSchemaProps) {
			s.XValidations = []apiextensionsv1.ValidationRule{rule("!has(self.replicas) || self.replicas > 1")}
		}), base, "", ""},
		{"a CEL rule that does not compile", base, edit(func(s *apiextensionsv1.JSONSchemaProps) {
			s.Properties["extra"] = apiextensionsv1.JSONSchemaProps{Type: "string", XValidations: []apiextensionsv1.ValidationRule{rule("self.nosuch > 1")}}
		}), RuleCRDInvalid, "compilation failed"},

		// Versions.
		{"a served version dropped without deprecation", testCRD(spec(), "v2", "v1"), testCRD(spec(), "v2"), RuleVersionRemoved, "did not mark it deprecated"},
		{"a deprecated version dropped", func() *apiextensionsv1.CustomResourceDefinition {
			c := testCRD(spec(), "v2", "v1")
			c.Spec.Versions[1].Deprecated = true
			return c
		}(), testCRD(spec(), "v2"), "", ""},
		{"the version objects are stored in dropped", func() *apiextensionsv1.CustomResourceDefinition {
			c := testCRD(spec(), "v1", "v2")
			c.Spec.Versions[0].Deprecated = true
			return c
		}(), testCRD(spec(), "v2"), RuleVersionRemoved, "stored objects in it"},
		{"the storage version changed, schemas differ, no conversion webhook", testCRD(spec(), "v1"), func() *apiextensionsv1.CustomResourceDefinition {
			c := testCRD(spec(), "v2", "v1")
			delete(c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties, "mode")
			return c
		}(), RuleStorageVersionChange, "without a conversion webhook"},
		{"the storage version changed with a conversion webhook", testCRD(spec(), "v1"), func() *apiextensionsv1.CustomResourceDefinition {
			c := testCRD(spec(), "v2", "v1")
			delete(c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties, "mode")
			c.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{ConversionReviewVersions: []string{"v1"},
					ClientConfig: &apiextensionsv1.WebhookClientConfig{Service: &apiextensionsv1.ServiceReference{Namespace: "ns", Name: "svc", Path: ptr.To("/convert")}}}}
			return c
		}(), "", ""},
		{"the storage version changed, same schema", testCRD(spec(), "v1"), testCRD(spec(), "v2", "v1"), "", ""},
		{"a new version whose schema differs, no conversion webhook", testCRD(spec(), "v1"), func() *apiextensionsv1.CustomResourceDefinition {
			c := testCRD(spec(), "v1", "v2")
			delete(c.Spec.Versions[1].Schema.OpenAPIV3Schema.Properties["spec"].Properties, "mode")
			return c
		}(), RuleUnconvertedVersions, "no conversion webhook translates"},
		{"the conversion webhook removed while the schemas differ", func() *apiextensionsv1.CustomResourceDefinition {
			c := testCRD(spec(), "v1", "v2")
			delete(c.Spec.Versions[1].Schema.OpenAPIV3Schema.Properties["spec"].Properties, "mode")
			c.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{ConversionReviewVersions: []string{"v1"},
					ClientConfig: &apiextensionsv1.WebhookClientConfig{Service: &apiextensionsv1.ServiceReference{Namespace: "ns", Name: "svc", Path: ptr.To("/convert")}}}}
			return c
		}(), func() *apiextensionsv1.CustomResourceDefinition {
			c := testCRD(spec(), "v1", "v2")
			delete(c.Spec.Versions[1].Schema.OpenAPIV3Schema.Properties["spec"].Properties, "mode")
			return c
		}(), RuleUnconvertedVersions, "spec.conversion.strategy None"},
		{"the storage version changed and the old one not served", testCRD(spec(), "v1"), func() *apiextensionsv1.CustomResourceDefinition {
			c := testCRD(spec(), "v2", "v1")
			c.Spec.Versions[1].Served = false
			return c
		}(), RuleStorageVersionChange, "no longer served"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Compare(tc.old, tc.new)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if len(got) > 0 {
					t.Fatalf("want no finding, got:\n%s", lines(got))
				}
				return
			}
			i := slices.IndexFunc(got, func(f Finding) bool { return f.Rule == tc.want })
			if i < 0 {
				t.Fatalf("want a %s finding, got:\n%s", tc.want, lines(got))
			}
			if !strings.Contains(got[i].String(), tc.msg) {
				t.Errorf("finding %q does not mention %q", got[i], tc.msg)
			}
		})
	}
}

func lines(fs []Finding) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString("  " + f.String() + "\n")
	}
	return b.String()
}

// A CRD that is gone is a finding; a new CRD is not.
func TestCompareSets(t *testing.T) {
	old := map[string]*apiextensionsv1.CustomResourceDefinition{"widgets.example.dev": testCRD(spec(), "v1")}
	fs, err := CompareSets(old, map[string]*apiextensionsv1.CustomResourceDefinition{})
	if err != nil || len(fs) != 1 || fs[0].Rule != RuleCRDRemoved {
		t.Errorf("CRD removed: %v %v", fs, err)
	}
	fs, err = CompareSets(map[string]*apiextensionsv1.CustomResourceDefinition{}, old)
	if err != nil || len(fs) != 0 {
		t.Errorf("CRD added: %v %v", fs, err)
	}
}

// An exception allows exactly the finding it names; one that names nothing is stale; one
// without a reason or reviewer is refused.
func TestExceptions(t *testing.T) {
	f := Finding{CRD: "widgets.example.dev", Version: "v1", Path: "^.spec.policy", Rule: "existingFieldRemoval"}
	other := Finding{CRD: "widgets.example.dev", Version: "v1", Path: "^.spec.name", Rule: "type"}
	ex := []Exception{
		{CRD: f.CRD, Version: f.Version, Path: f.Path, Rule: f.Rule, Reason: "r", ReviewedBy: "x"},
		{CRD: f.CRD, Version: "v1", Path: "^.spec.gone", Rule: "existingFieldRemoval", Reason: "r", ReviewedBy: "x"},
	}
	failing, excepted, unused := applyExceptions([]Finding{f, other}, ex)
	if len(failing) != 1 || failing[0] != other || len(excepted) != 1 || excepted[0] != f || len(unused) != 1 || unused[0].Path != "^.spec.gone" {
		t.Errorf("failing %v excepted %v unused %v", failing, excepted, unused)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "x.yaml")
	if err := os.WriteFile(p, []byte("exceptions:\n- crd: a\n  rule: type\n  reason: because\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadExceptions(p); err == nil || !strings.Contains(err.Error(), "reviewedBy") {
		t.Errorf("an exception without reviewedBy: %v", err)
	}
}

// The gate on this repository: the CRDs of the working tree against the last release (the
// committed baseline until there is a tag) have no unexcepted break.
func TestRepositoryGate(t *testing.T) {
	if err := run("../..", "config/crd/bases", "config/crd/baseline", "", "config/crd/gate-exceptions.yaml"); err != nil {
		t.Fatal(err)
	}
}
