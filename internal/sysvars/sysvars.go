// Package sysvars knows which mysqld settings a running server takes with
// SET GLOBAL and which need a restart, so that a change to
// spec.mysqlConfig is applied without restarting when it can be, is rolled
// as a restart only when it must be, and a setting nobody knows is reported
// before anything restarts.
//
// It holds one table per flavor and release series (MariaDB 10.11, 11.4 and 11.8,
// MySQL 8.4) of the commonly tuned settings, keyed by my.cnf option name:
//
//   - Dynamic: SET GLOBAL changes it at run time (for new sessions where the
//     variable also has a session value: running sessions keep theirs). The
//     server may still refuse a value of the wrong type or range (ERROR 1231,
//     1232): report that, it is not a reason to restart.
//   - Static: it only changes with a restart; SET GLOBAL fails with ERROR
//     1238 "Variable '…' is a read only variable" (a few, see their notes,
//     with another error), or (RuntimeSettable) the server accepts it but the
//     setting only takes effect once replication restarts, which Dolphin does
//     with a restart.
//   - Unknown: not in the table. Either a typo, a setting of a plugin, or a
//     setting this package does not cover yet: report it rather than guess.
//
// How much to trust each table: every MariaDB 10.11 entry is checked against
// a real 10.11 server by TestSysvarsServerMariaDB: every option name must be
// one mariadbd accepts in my.cnf, every variable must exist, dynamic ones
// must take SET GLOBAL of their current value (and get it back exactly) and
// of DEFAULT, static ones must be refused, RuntimeSettable ones accepted. The
// MariaDB 11.4 table is the 10.11 table with the differences documented for
// 11.0–11.4; the MySQL 8.4 table comes from the MySQL 8.4 Reference Manual.
// No MySQL or MariaDB 11.4 server can be installed here, so those two are
// covered by exact-value tests only; the MariaDB 11.8 table is checked against an 11.8 server
// in a pod of the real node by the end-to-end suite (sysvarstest).
//
// Settings that Dolphin manages for replication and durability (server_id,
// log_bin, gtid_*, read_only, rpl_semi_sync_*, sync_binlog,
// innodb_flush_log_at_trx_commit, datadir, port, …; see mycnf.IsReserved)
// are not in any table: the API rejects them in spec.mysqlConfig.
//
// The package is pure: it builds statements, it never runs them.
package sysvars

import (
	"slices"
	"strconv"
	"strings"
)

// Flavor names, as in mycnf and the MySQLCluster API.
const (
	FlavorMariaDB = "mariadb"
	FlavorMySQL   = "mysql"
)

// Kind says how a server takes a changed setting.
type Kind int

const (
	// Unknown means the setting is not in the table for that flavor and
	// version (or the flavor is unknown).
	Unknown Kind = iota
	// Dynamic means SET GLOBAL applies it without a restart.
	Dynamic
	// Static means it only takes effect after a restart.
	Static
)

// String returns "dynamic", "static" or "unknown".
func (k Kind) String() string {
	switch k {
	case Dynamic:
		return "dynamic"
	case Static:
		return "static"
	default:
		return "unknown"
	}
}

// Info describes one setting in a table.
type Info struct {
	// Option is the my.cnf key, e.g. default_time_zone.
	Option string
	// Variable is the server variable that SELECT @@GLOBAL and SET GLOBAL
	// name, e.g. time_zone. Most often it equals Option.
	Variable string
	// Kind is Dynamic or Static.
	Kind Kind
	// RuntimeSettable marks a Static setting that the server does accept with
	// SET GLOBAL, but that only takes effect once replication restarts (some
	// only while replication is stopped); Dolphin applies it with a restart.
	RuntimeSettable bool
	// RaiseNeedsRestart marks a Dynamic size that SET GLOBAL can lower but not
	// raise above its start-up value (MariaDB's innodb_buffer_pool_size, capped
	// by innodb_buffer_pool_size_max): Diff sends a raise, and a removal,
	// through a restart.
	RaiseNeedsRestart bool
	// Note explains an entry that could surprise; empty for most.
	Note string
}

// Lookup returns what the table for flavor and version says about the my.cnf
// option name, and false when the table has no such option (Unknown).
//
// version is "10.11", "10.11.6", "11.4", "8.4.3" and the like (anything after
// MAJOR.MINOR is ignored); a series without a table uses the nearest known one
// of that flavor, and an empty or unparsable version the oldest one (MariaDB
// 10.11, MySQL 8.4). name may carry my.cnf's "loose_" prefix and use dashes
// instead of underscores, as my.cnf allows.
func Lookup(flavor, version, name string) (Info, bool) {
	t := tableFor(flavor, version)
	if t == nil {
		return Info{}, false
	}
	in, ok := t[normalize(name)]
	return in, ok
}

// Classify returns whether the my.cnf option name can change at run time
// (Dynamic), needs a restart (Static), or is not known (Unknown) for flavor
// ("mariadb" or "mysql") and version; see Lookup for how version and name
// are read.
func Classify(flavor, version, name string) Kind {
	in, ok := Lookup(flavor, version, name)
	if !ok {
		return Unknown
	}
	return in.Kind
}

// Variables returns every entry of the table for flavor and version (see
// Lookup), sorted by option name; nil for an unknown flavor.
func Variables(flavor, version string) []Info {
	t := tableFor(flavor, version)
	if t == nil {
		return nil
	}
	out := make([]Info, 0, len(t))
	for _, in := range t {
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(a.Option, b.Option) })
	return out
}

// Change is what it takes to go from one my.cnf configuration to another.
type Change struct {
	// Dynamic maps server variable names (Info.Variable, which differs from
	// the my.cnf key for a few, e.g. default_time_zone -> time_zone) to the
	// literal to SET GLOBAL them to: the new value as SetGlobalValue converts
	// it, or DEFAULT for a setting that was removed. Apply with Statement.
	Dynamic map[string]string
	// Restart lists, sorted, the my.cnf keys whose change needs a restart.
	Restart []string
	// Unknown lists, sorted, the my.cnf keys set or changed to a setting the
	// table does not know. Report them and apply nothing until they are fixed:
	// a restart with a bad key may leave the server unable to start.
	Unknown []string
}

// NeedsRestart reports whether some change only takes effect after a restart.
func (c Change) NeedsRestart() bool { return len(c.Restart) > 0 }

// Empty reports whether nothing changed.
func (c Change) Empty() bool {
	return len(c.Dynamic) == 0 && len(c.Restart) == 0 && len(c.Unknown) == 0
}

// Diff compares two my.cnf configurations (option name -> value as written in
// my.cnf) for flavor and version, and sorts every changed key into one of
// Change's three groups:
//
//   - added or changed, Dynamic: Dynamic[variable] = SetGlobalValue of the new
//     value; a value that cannot be written as a SET GLOBAL literal (a NUL or
//     a line break in it, a size beyond 2^64-1) goes to Restart, where the
//     server judges it at start-up like any other my.cnf value; so does a
//     RaiseNeedsRestart size that is added, raised, or not a size;
//   - added or changed, Static: Restart;
//   - added or changed, not in the table: Unknown;
//   - removed, Dynamic: Dynamic[variable] = "DEFAULT", the server's default
//     (except RaiseNeedsRestart: Restart);
//   - removed, anything else: Restart (removing a key the table does not know
//     must stay possible: it may be how the user fixes one).
//
// Pass the effective settings, Dolphin's defaults with spec.mysqlConfig merged
// in, not spec.mysqlConfig alone: a key the user removes but Dolphin sets
// itself (character_set_server=utf8mb4) must come back to Dolphin's value, not
// to the server's default.
func Diff(flavor, version string, old, new map[string]string) Change {
	ch := Change{Dynamic: map[string]string{}}
	keys := make([]string, 0, len(old)+len(new))
	for k := range old {
		keys = append(keys, k)
	}
	for k := range new {
		if _, ok := old[k]; !ok {
			keys = append(keys, k)
		}
	}
	// Sorted, so that when two keys name the same variable the later one wins,
	// as it does in the generated my.cnf (whose keys are sorted too).
	slices.Sort(keys)
	for _, k := range keys {
		ov, inOld := old[k]
		nv, inNew := new[k]
		if inOld && inNew && ov == nv {
			continue
		}
		in, known := Lookup(flavor, version, k)
		switch {
		case !inNew && known && in.Kind == Dynamic && !in.RaiseNeedsRestart:
			ch.Dynamic[in.Variable] = "DEFAULT"
		case !inNew:
			ch.Restart = append(ch.Restart, k)
		case !known:
			ch.Unknown = append(ch.Unknown, k)
		case in.Kind == Dynamic && in.RaiseNeedsRestart && !lowered(ov, nv, inOld):
			ch.Restart = append(ch.Restart, k)
		case in.Kind == Dynamic:
			lit, err := SetGlobalValue(in.Variable, nv)
			if err != nil {
				ch.Restart = append(ch.Restart, k)
				continue
			}
			ch.Dynamic[in.Variable] = lit
		default:
			ch.Restart = append(ch.Restart, k)
		}
	}
	return ch
}

// lowered reports whether the size nv is at most ov (both as in my.cnf).
func lowered(ov, nv string, inOld bool) bool {
	o, ok1 := sizeValue(ov)
	n, ok2 := sizeValue(nv)
	return inOld && ok1 && ok2 && n <= o
}

// tableFor returns the table for flavor and version, nil for an unknown
// flavor.
func tableFor(flavor, version string) table {
	rs := releases[flavor]
	if len(rs) == 0 {
		return nil
	}
	major, minor, ok := parseVersion(version)
	if !ok {
		return rs[0].vars
	}
	best, bestDist := rs[0], -1
	for _, r := range rs {
		d := seriesIndex(r.major, r.minor) - seriesIndex(major, minor)
		if d < 0 {
			d = -d
		}
		if bestDist < 0 || d < bestDist {
			best, bestDist = r, d
		}
	}
	return best.vars
}

// HasTable reports whether a table describes exactly the release series of version (Lookup
// and the others fall back to the nearest series otherwise).
func HasTable(flavor, version string) bool {
	major, minor, ok := parseVersion(version)
	if !ok {
		return false
	}
	for _, r := range releases[flavor] {
		if r.major == major && r.minor == minor {
			return true
		}
	}
	return false
}

// seriesIndex orders release series: 10.11 < 11.0 < 11.4 < 12.0.
func seriesIndex(major, minor int) int { return major*100 + minor }

// parseVersion reads MAJOR.MINOR from the start of v ("10.11.6-MariaDB-log"
// gives 10, 11).
func parseVersion(v string) (major, minor int, ok bool) {
	num := func(s string) (int, string, bool) {
		i := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == 0 || i > 4 {
			return 0, s, false
		}
		n, _ := strconv.Atoi(s[:i])
		return n, s[i:], true
	}
	major, rest, ok := num(strings.TrimSpace(v))
	if !ok || !strings.HasPrefix(rest, ".") {
		return 0, 0, false
	}
	minor, _, ok = num(rest[1:])
	return major, minor, ok
}

// normalize turns a my.cnf key into the form the tables use: lower case,
// underscores, no loose_ prefix.
func normalize(name string) string {
	n := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(name)), "-", "_")
	return strings.TrimPrefix(n, "loose_")
}
