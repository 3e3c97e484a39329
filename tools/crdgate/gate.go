// Package main is the CRD change-impact gate (`make crd-gate`): it compares every
// CustomResourceDefinition as it is in the working tree with the same CRD at the last release
// (a tag, or a committed baseline before the first one) and fails on changes that break stored
// objects or clients, unless a reviewed exception names the change.
//
// Field-level rules come from sigs.k8s.io/crdify (removed fields, type changes, new required
// fields, enum values removed, bounds tightened, defaults changed, scope); this package adds
// what crdify does not model: CEL rules (compiled by the API server's own CRD validation,
// compared in canonical form), storage-version changes, and served versions dropped.
package main

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// Rule names a kind of breaking change. Exceptions name them.
type Rule string

// Rules this gate adds to crdify's (whose validation names are used as rules for theirs:
// existingFieldRemoval, type, required, enum, default, maximum, maxLength, …).
const (
	RuleCRDInvalid           Rule = "crdInvalid"
	RuleVersionRemoved       Rule = "servedVersionRemoved"
	RuleStorageVersionChange Rule = "storageVersionChanged"
	RuleUnconvertedVersions  Rule = "versionsNotConverted"
	RuleCELRuleAdded         Rule = "celRuleAdded"
	RuleCELRuleChanged       Rule = "celRuleChanged"
	RuleCRDRemoved           Rule = "crdRemoved"
)

// Finding is one breaking change.
type Finding struct {
	// CRD is the CustomResourceDefinition's name (plural.group).
	CRD string `json:"crd"`
	// Version is the API version ("" for changes to the whole CRD).
	Version string `json:"version,omitempty"`
	// Path is the property ("^" is the version's root, "^.spec.replicas" a field; "" for the
	// whole CRD or version).
	Path string `json:"path,omitempty"`
	Rule Rule   `json:"rule"`
	// Message says what changed and why it breaks, for the reviewer.
	Message string `json:"message"`
}

func (f Finding) String() string {
	where := f.CRD
	if f.Version != "" {
		where += " " + f.Version
	}
	if f.Path != "" {
		where += " " + f.Path
	}
	return fmt.Sprintf("%s: [%s] %s", where, f.Rule, f.Message)
}

// key identifies what an exception must name.
func (f Finding) key() string {
	return strings.Join([]string{f.CRD, f.Version, f.Path, string(f.Rule)}, "|")
}

// Compare returns the breaking changes from old to new (both the same CRD). A nil old means a
// new CRD, which breaks nothing.
func Compare(old, new *apiextensionsv1.CustomResourceDefinition) ([]Finding, error) {
	if old == nil {
		return checkValid(new), nil
	}
	var out []Finding
	out = append(out, checkValid(new)...)
	fs, err := crdifyFindings(old, new)
	if err != nil {
		return nil, err
	}
	out = append(out, fs...)
	out = append(out, versionFindings(old, new)...)
	cel, err := celFindings(old, new)
	if err != nil {
		return nil, err
	}
	out = append(out, cel...)
	sortFindings(out)
	return out, nil
}

// CompareSets compares every CRD of old with the one of the same name in new. A CRD in old
// that new lacks is a finding; a CRD only in new is fine.
func CompareSets(old, new map[string]*apiextensionsv1.CustomResourceDefinition) ([]Finding, error) {
	var out []Finding
	names := make([]string, 0, len(old)+len(new))
	for n := range old {
		names = append(names, n)
	}
	for n := range new {
		if _, ok := old[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		o, nw := old[n], new[n]
		if nw == nil {
			out = append(out, Finding{CRD: n, Rule: RuleCRDRemoved,
				Message: "the CRD is gone: deleting it deletes every object of its kind"})
			continue
		}
		fs, err := Compare(o, nw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		out = append(out, fs...)
	}
	return out, nil
}

func sortFindings(fs []Finding) {
	slices.SortStableFunc(fs, func(a, b Finding) int { return strings.Compare(a.key(), b.key()) })
}

// version returns the named version of crd, or nil.
func version(crd *apiextensionsv1.CustomResourceDefinition, name string) *apiextensionsv1.CustomResourceDefinitionVersion {
	for i := range crd.Spec.Versions {
		if crd.Spec.Versions[i].Name == name {
			return &crd.Spec.Versions[i]
		}
	}
	return nil
}

// storageVersion is the name of crd's storage version ("" when none is marked).
func storageVersion(crd *apiextensionsv1.CustomResourceDefinition) string {
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			return v.Name
		}
	}
	return ""
}
