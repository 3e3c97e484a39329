package operator_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// clusterScoped says, for every resource config/rbac/role.yaml names, whether it is
// cluster-scoped. A resource missing here fails the test: add it with its scope.
var clusterScoped = map[string]bool{
	"configmaps": false, "serviceaccounts": false, "services": false, "persistentvolumeclaims": false,
	"pods": false, "secrets": false, "statefulsets": false, "deployments": false, "leases": false, "events": false,
	"mysqlclusters": false, "mysqlclusters/finalizers": false, "mysqlclusters/status": false,
	"mysqlbackups": false, "mysqlbackups/finalizers": false, "mysqlbackups/status": false,
	"validatingwebhookconfigurations": true,
	"mysqlusers":                      false, "mysqlusers/finalizers": false, "mysqlusers/status": false,
	"mysqldatabases": false, "mysqldatabases/finalizers": false, "mysqldatabases/status": false,
	"mysqlbackupstores":    false,
	"poddisruptionbudgets": false,
	"tokenreviews":         true, "subjectaccessreviews": true, "storageclasses": true,
	"customresourcedefinitions": true, "customresourcedefinitions/status": true,
}

// notNamespaced are permissions of the cluster-wide install that the namespaced one leaves out
// on purpose, with the reason.
var notNamespaced = map[string]string{
	// Trimming storedVersions needs every namespace migrated: a namespaced operator migrates
	// its own and leaves the trim to `dolphin migrate-storage`, run by an administrator.
	"apiextensions.k8s.io/customresourcedefinitions/status patch": "storedVersions are trimmed only by a migration of every namespace",
}

// permissions expands RBAC rules into "group/resource verb" entries.
func permissions(t *testing.T, rules []rbacv1.PolicyRule) []string {
	t.Helper()
	var out []string
	for _, r := range rules {
		// A rule narrowed to some names (the namespaced install's own webhook configuration)
		// grants less than the same rule without them: it counts as that permission.
		if len(r.NonResourceURLs) > 0 {
			t.Fatalf("rule %+v: only resource rules are compared", r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					out = append(out, g+"/"+res+" "+v)
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func readRules(t *testing.T, path, kind string) []rbacv1.PolicyRule {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", path))
	if err != nil {
		t.Fatal(err)
	}
	var role struct {
		Kind  string              `json:"kind"`
		Rules []rbacv1.PolicyRule `json:"rules"`
	}
	if err := yaml.Unmarshal(b, &role); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if role.Kind != kind {
		t.Fatalf("%s is a %s, want a %s", path, role.Kind, kind)
	}
	return role.Rules
}

// TestNamespacedRBACMatchesClusterRBAC: the namespaced install (config/namespaced) grants
// exactly what the cluster-wide ClusterRole does, split by scope: its Role holds every
// namespaced rule, its small ClusterRole every cluster-scoped one, and neither holds more.
// config/rbac/role.yaml is generated from the reconciler's RBAC markers, so a permission
// added there fails this test until the namespaced install has it too.
func TestNamespacedRBACMatchesClusterRBAC(t *testing.T) {
	var wantNamespaced, wantCluster []string
	for _, p := range permissions(t, readRules(t, "config/rbac/role.yaml", "ClusterRole")) {
		resource := strings.SplitN(strings.SplitN(p, " ", 2)[0], "/", 2)[1]
		scoped, known := clusterScoped[resource]
		switch {
		case !known:
			t.Fatalf("config/rbac/role.yaml names %q, whose scope this test does not know: add it to clusterScoped", resource)
		case notNamespaced[p] != "":
			continue
		case scoped:
			wantCluster = append(wantCluster, p)
		default:
			wantNamespaced = append(wantNamespaced, p)
		}
	}
	for _, c := range []struct {
		path, kind string
		want       []string
	}{
		{"config/namespaced/role.yaml", "Role", wantNamespaced},
		{"config/namespaced/cluster_role.yaml", "ClusterRole", wantCluster},
	} {
		got := permissions(t, readRules(t, c.path, c.kind))
		for _, p := range c.want {
			if !slices.Contains(got, p) {
				t.Errorf("%s lacks %q, which config/rbac/role.yaml grants", c.path, p)
			}
		}
		for _, p := range got {
			if !slices.Contains(c.want, p) {
				t.Errorf("%s grants %q, which config/rbac/role.yaml does not (or not at this scope)", c.path, p)
			}
		}
	}
}
