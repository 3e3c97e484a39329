package main

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apiserver/pkg/cel/environment"
)

// checkValid runs the API server's own validation of a CRD on new (after its defaults): the
// same checks a create or update of the CRD would get, including compiling every CEL rule
// against its schema and its cost budget. A CRD the API server would refuse is a finding.
func checkValid(new *apiextensionsv1.CustomResourceDefinition) []Finding {
	c := new.DeepCopy()
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(c)
	var internal apiextensions.CustomResourceDefinition
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(c, &internal, nil); err != nil {
		return []Finding{{CRD: new.Name, Rule: RuleCRDInvalid, Message: "cannot be converted for validation: " + err.Error()}}
	}
	var out []Finding
	for _, e := range validation.ValidateCustomResourceDefinition(context.Background(), &internal) {
		out = append(out, Finding{CRD: new.Name, Path: e.Field, Rule: RuleCRDInvalid, Message: oneLine(e.Error())})
	}
	return out
}

// celRule is one x-kubernetes-validations rule in canonical form.
type celRule struct {
	text      string // as written
	canonical string // parsed and printed back: formatting and redundant parentheses do not count
}

// celFindings reports, for every version in both CRDs, CEL rules that are new or changed on a
// property that existed before. Implication between two CEL expressions is not decided: a
// rule whose canonical form differs from every old rule at its place is taken to reject
// objects the old schema accepted. A rule on a property that is new is fine (no stored object
// has it), a removed rule only loosens, and a change of message or of formatting only
// breaks nothing.
func celFindings(old, new *apiextensionsv1.CustomResourceDefinition) ([]Finding, error) {
	env, err := ruleEnv()
	if err != nil {
		return nil, err
	}
	var out []Finding
	for _, nv := range new.Spec.Versions {
		ov := version(old, nv.Name)
		if ov == nil || ov.Schema == nil || nv.Schema == nil {
			continue
		}
		oldRules, oldPaths := rulesByPath(env, ov.Schema.OpenAPIV3Schema)
		newRules, _ := rulesByPath(env, nv.Schema.OpenAPIV3Schema)
		oldProps, newProps := propertiesByPath(ov.Schema.OpenAPIV3Schema), propertiesByPath(nv.Schema.OpenAPIV3Schema)
		paths := make([]string, 0, len(newRules))
		for p := range newRules {
			paths = append(paths, p)
		}
		slices.Sort(paths)
		for _, path := range paths {
			if !oldPaths[path] {
				continue
			}
			before := oldRules[path]
			changed := slices.ContainsFunc(before, func(o celRule) bool {
				return !slices.ContainsFunc(newRules[path], func(n celRule) bool { return n.canonical == o.canonical })
			})
			for _, r := range newRules[path] {
				if slices.ContainsFunc(before, func(o celRule) bool { return o.canonical == r.canonical }) {
					continue
				}
				if acceptsEveryOldObject(env, r.text, oldProps[path], newProps[path]) {
					continue
				}
				rule, what := RuleCELRuleAdded, "a new CEL rule"
				if changed {
					rule, what = RuleCELRuleChanged, "a changed CEL rule"
				}
				out = append(out, Finding{CRD: new.Name, Version: nv.Name, Path: path, Rule: rule,
					Message: fmt.Sprintf("%s on an existing field may reject objects the last release accepted: %q; %s", what, r.text, ratcheting(r))})
			}
		}
	}
	return out, nil
}

// ruleEnv is the API server's environment for stored CRD rules (its libraries: quantity, URL,
// regex …), with self and oldSelf of any type.
func ruleEnv() (*cel.Env, error) {
	base, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Env(environment.StoredExpressions)
	if err != nil {
		return nil, fmt.Errorf("CEL environment: %w", err)
	}
	env, err := base.Extend(cel.Variable("self", cel.DynType), cel.Variable("oldSelf", cel.DynType))
	if err != nil {
		return nil, fmt.Errorf("CEL environment: %w", err)
	}
	return env, nil
}

// objectProperties are the property names of an object schema; nil for anything else (a
// scalar, a list, a map with additionalProperties), whose value cannot be split into old and
// new fields.
type objectProperties []string

// propertiesByPath maps every object schema's path to its property names.
func propertiesByPath(s *apiextensionsv1.JSONSchemaProps) map[string]objectProperties {
	out := map[string]objectProperties{}
	walkSchema(s.DeepCopy(), "^", func(p *apiextensionsv1.JSONSchemaProps, path string) {
		if p.Type != "object" || p.AdditionalProperties != nil || p.XPreserveUnknownFields != nil && *p.XPreserveUnknownFields {
			return
		}
		names := objectProperties{}
		for n := range p.Properties {
			names = append(names, n)
		}
		out[path] = names
	})
	return out
}

// acceptsEveryOldObject proves, where it can, that a new rule cannot reject an object the old
// schema accepted: such an object has none of the fields new at this place (unknown fields are
// pruned), and whatever values it has in the others, the rule is true. It evaluates the rule
// partially: self (and oldSelf) hold no new field, and every old field is unknown; only a
// result of true, with nothing unknown left, counts. A rule that needs an old field's value,
// or a place that is not an object with listed properties, is not proven (false).
func acceptsEveryOldObject(env *cel.Env, rule string, old, new objectProperties) bool {
	if old == nil || new == nil {
		return false
	}
	ast, iss := env.Compile(rule)
	if iss != nil && iss.Err() != nil {
		return false
	}
	prg, err := env.Program(ast, cel.EvalOptions(cel.OptPartialEval))
	if err != nil {
		return false
	}
	var unknown []*cel.AttributePatternType
	for _, v := range []string{"self", "oldSelf"} {
		for _, f := range old {
			unknown = append(unknown, cel.AttributePattern(v).QualString(f))
		}
	}
	vars, err := cel.PartialVars(map[string]any{"self": map[string]any{}, "oldSelf": map[string]any{}}, unknown...)
	if err != nil {
		return false
	}
	out, _, err := prg.Eval(vars)
	return err == nil && !types.IsUnknown(out) && out == types.True
}

var oldSelfRef = regexp.MustCompile(`\boldSelf\b`)

// ratcheting says who the tightened rule still lets through.
func ratcheting(r celRule) string {
	if oldSelfRef.MatchString(r.canonical) {
		return "a transition rule (oldSelf) is checked on every update, nothing is ratcheted"
	}
	return "updates that leave the field as it is still pass (CRD validation ratcheting), but creating an object with such a value (restored from a backup, applied from a Git repository or by an older client) is refused"
}

// rulesByPath collects the CEL rules of a schema by property path, and every path that exists.
func rulesByPath(env *cel.Env, s *apiextensionsv1.JSONSchemaProps) (map[string][]celRule, map[string]bool) {
	rules, paths := map[string][]celRule{}, map[string]bool{}
	walkSchema(s.DeepCopy(), "^", func(p *apiextensionsv1.JSONSchemaProps, path string) {
		paths[path] = true
		for _, v := range p.XValidations {
			rules[path] = append(rules[path], celRule{text: v.Rule, canonical: canonical(env, v.Rule)})
		}
	})
	return rules, paths
}

// canonical parses a rule and prints it back; a rule that does not parse stays as written
// (checkValid reports it).
func canonical(env *cel.Env, rule string) string {
	ast, iss := env.Parse(rule)
	if iss != nil && iss.Err() != nil {
		return strings.TrimSpace(rule)
	}
	s, err := cel.AstToString(ast)
	if err != nil {
		return strings.TrimSpace(rule)
	}
	return s
}
