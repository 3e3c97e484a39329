package resources

import (
	"maps"
	"slices"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/mycnf"
	"github.com/dolphin-operator/dolphin/internal/sysvars"
)

// A spec.mysqlConfig key is one of three kinds (internal/sysvars holds the table per flavor
// and version, checked against a real server):
//   - dynamic: applied with SET GLOBAL on every instance by the topology engine and kept in
//     my.cnf; changing it restarts nothing;
//   - static: only a restart applies it; it is part of ConfigHash, so changing it rolls the
//     instances (replicas first, then a switchover);
//   - unknown: not in the table. It is refused (UnknownConfigKeys) unless written with my.cnf's
//     `loose_` prefix, which the server ignores when it does not know the option; a `loose_`
//     key Dolphin does not know counts as static.

// restartConfig returns the spec.mysqlConfig entries whose change needs a restart (nil when
// none, as an unset spec.mysqlConfig, so that the hash of such clusters stays what it was).
func restartConfig(c *dolphinv1.MySQLCluster) map[string]dolphinv1.MySQLConfigValue {
	var out map[string]dolphinv1.MySQLConfigValue
	for k, v := range c.Spec.MySQLConfig {
		if !appliedLive(c, k) {
			if out == nil {
				out = map[string]dolphinv1.MySQLConfigValue{}
			}
			out[k] = v
		}
	}
	return out
}

// appliedLive reports whether key is a setting SET GLOBAL applies at run time for any value.
func appliedLive(c *dolphinv1.MySQLCluster, key string) bool {
	in, ok := sysvars.Lookup(string(c.Spec.Engine.Flavor), c.Spec.Engine.Version, key)
	return ok && in.Kind == sysvars.Dynamic && !in.RaiseNeedsRestart
}

// UnknownConfigKeys lists, sorted, the spec.mysqlConfig keys Dolphin does not know for the
// cluster's flavor and version and that lack the `loose_` prefix.
func UnknownConfigKeys(c *dolphinv1.MySQLCluster) []string {
	var out []string
	for k := range c.Spec.MySQLConfig {
		if _, ok := sysvars.Lookup(string(c.Spec.Engine.Flavor), c.Spec.Engine.Version, k); !ok && !isLoose(k) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// InvalidConfigValues says, one message per key in key order, which spec.mysqlConfig values
// do not have the form their setting takes (sysvars.CheckValue: the table's value types,
// checked against real servers): refused are those mysqld would not start with (a word for a
// number), misread those it would read otherwise than written (a boolean it takes as OFF).
func InvalidConfigValues(c *dolphinv1.MySQLCluster) (refused, misread []string) {
	for _, k := range slices.Sorted(maps.Keys(c.Spec.MySQLConfig)) {
		t, err := sysvars.CheckValueType(string(c.Spec.Engine.Flavor), c.Spec.Engine.Version, k, string(c.Spec.MySQLConfig[k]))
		switch {
		case err == nil:
		case t.StopsTheServer():
			refused = append(refused, err.Error())
		default:
			misread = append(misread, err.Error())
		}
	}
	return refused, misread
}

// RestartConfigKeys lists, sorted, the spec.mysqlConfig keys whose change needs a restart.
func RestartConfigKeys(c *dolphinv1.MySQLCluster) []string {
	return slices.Sorted(maps.Keys(restartConfig(c)))
}

func isLoose(key string) bool { return len(key) > 6 && key[:6] == "loose_" }

// DynamicVariables returns what the topology engine sets with SET GLOBAL on every instance:
// for each setting of the effective configuration (Dolphin's tunable defaults with
// spec.mysqlConfig merged in) that the server applies at run time, its variable name and
// the SET GLOBAL literal of its value, and the managed settings Dolphin enforces at run
// time (mycnf.RunTimeMandatory). A value that cannot be written as a literal is left to the
// next restart; one of the wrong form for its setting (InvalidConfigValues) is left out.
func DynamicVariables(c *dolphinv1.MySQLCluster) (map[string]string, error) {
	eff, err := mycnf.Effective(string(c.Spec.Engine.Flavor), overrides(c))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for k, v := range eff {
		if !appliedLive(c, k) {
			continue
		}
		in, _ := sysvars.Lookup(string(c.Spec.Engine.Flavor), c.Spec.Engine.Version, k)
		if sysvars.CheckValue(string(c.Spec.Engine.Flavor), c.Spec.Engine.Version, k, v) != nil {
			continue // reported by the reconciler; never sent to a server
		}
		lit, err := sysvars.SetGlobalValue(in.Variable, v)
		if err != nil {
			continue
		}
		out[in.Variable] = lit
	}
	// Dolphin's own run-time settings: servers started with an older my.cnf get them now.
	maps.Copy(out, mycnf.RunTimeMandatory(string(c.Spec.Engine.Flavor)))
	return out, nil
}
