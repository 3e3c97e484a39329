package main

import (
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// versionFindings: served versions dropped, and the storage version changed without a way to
// keep reading what is stored.
//
//   - A version served before and not now breaks its clients, and loses objects stored in it.
//     It may go only when the last release already marked it deprecated (clients were
//     warned) and did not store in it (the objects were written in another version since).
//     Whether a cluster still has objects in it (status.storedVersions) is the storage
//     migration's to clear before the release that drops it.
//   - A new storage version is safe only while the old one is still served (objects stored in
//     it can still be read and are migrated) and the two are converted between: the schemas
//     are the same, or a conversion webhook translates.
func versionFindings(old, new *apiextensionsv1.CustomResourceDefinition) []Finding {
	var out []Finding
	oldStorage, newStorage := storageVersion(old), storageVersion(new)
	for _, ov := range old.Spec.Versions {
		if !ov.Served {
			continue
		}
		nv := version(new, ov.Name)
		if nv != nil && nv.Served {
			continue
		}
		switch {
		case ov.Name == oldStorage:
			out = append(out, Finding{CRD: new.Name, Version: ov.Name, Rule: RuleVersionRemoved,
				Message: fmt.Sprintf("%s is no longer served, but the last release stored objects in it: make another version the storage version, migrate the stored objects and release that first", ov.Name)})
		case !ov.Deprecated:
			out = append(out, Finding{CRD: new.Name, Version: ov.Name, Rule: RuleVersionRemoved,
				Message: fmt.Sprintf("%s is no longer served, and the last release did not mark it deprecated: its clients had no warning (set deprecated: true in one release, drop it in a later one)", ov.Name)})
		}
	}
	if f, ok := unconverted(new); ok {
		out = append(out, f)
	}
	if oldStorage != "" && newStorage != oldStorage {
		ov, nv := version(new, oldStorage), version(new, newStorage)
		switch {
		case ov == nil || !ov.Served:
			out = append(out, Finding{CRD: new.Name, Version: newStorage, Rule: RuleStorageVersionChange,
				Message: fmt.Sprintf("the storage version changed from %s to %s and %s is no longer served: objects stored in it cannot be read or migrated", oldStorage, newStorage, oldStorage)})
		case !sameSchema(ov, nv) && (new.Spec.Conversion == nil || new.Spec.Conversion.Strategy != apiextensionsv1.WebhookConverter):
			out = append(out, Finding{CRD: new.Name, Version: newStorage, Rule: RuleStorageVersionChange,
				Message: fmt.Sprintf("the storage version changed from %s to %s, whose schemas differ, without a conversion webhook: objects stored as %s would be read as %s unchanged", oldStorage, newStorage, oldStorage, newStorage)})
		}
	}
	return out
}

func sameSchema(a, b *apiextensionsv1.CustomResourceDefinitionVersion) bool {
	if a == nil || b == nil || a.Schema == nil || b.Schema == nil {
		return a != nil && b != nil && a.Schema == nil && b.Schema == nil
	}
	return equality.Semantic.DeepEqual(a.Schema.OpenAPIV3Schema, b.Schema.OpenAPIV3Schema)
}

// unconverted finds versions whose schemas differ in a CRD without a conversion webhook: the
// API server would serve an object written in one as the other with only apiVersion changed,
// so renamed or moved fields would read as absent (and be lost on the next write). Versions
// that are not served count too: objects stored in them are still read and converted.
func unconverted(crd *apiextensionsv1.CustomResourceDefinition) (Finding, bool) {
	if crd.Spec.Conversion != nil && crd.Spec.Conversion.Strategy == apiextensionsv1.WebhookConverter {
		return Finding{}, false
	}
	vs := crd.Spec.Versions
	for i := 1; i < len(vs); i++ {
		if !sameSchema(&vs[0], &vs[i]) {
			return Finding{CRD: crd.Name, Version: vs[i].Name, Rule: RuleUnconvertedVersions,
				Message: fmt.Sprintf("the schemas of %s and %s differ, and no conversion webhook translates between them (spec.conversion.strategy None): add one, or keep the schemas identical", vs[0].Name, vs[i].Name)}, true
		}
	}
	return Finding{}, false
}
