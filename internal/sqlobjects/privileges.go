package sqlobjects

import (
	"slices"
	"strings"
)

// allPrivileges is how a declared grant asks for every privilege of its level.
const allPrivileges = "ALL PRIVILEGES"

// Privileges that GRANT ALL gives on a table and on a database, as the servers list them in
// information_schema. A scope holding all of these holds ALL PRIVILEGES (newer servers may
// add privileges to ALL; holding these is enough not to grant again).
var (
	tablePrivileges = []string{"SELECT", "INSERT", "UPDATE", "DELETE", "CREATE", "DROP",
		"REFERENCES", "INDEX", "ALTER", "CREATE VIEW", "SHOW VIEW", "TRIGGER"}
	databaseOnlyPrivileges = []string{"CREATE TEMPORARY TABLES", "LOCK TABLES", "EXECUTE",
		"CREATE ROUTINE", "ALTER ROUTINE", "EVENT"}
	// MariaDB adds DELETE HISTORY (system-versioned tables) at both levels.
	mariadbOnlyPrivileges = []string{"DELETE HISTORY"}
)

// allOf lists the privileges ALL PRIVILEGES stands for on a scope of level l.
func allOf(f Flavor, l Level) []string {
	all := slices.Clone(tablePrivileges)
	if l != TableLevel {
		all = append(all, databaseOnlyPrivileges...)
	}
	if f == MariaDB {
		all = append(all, mariadbOnlyPrivileges...)
	}
	return all
}

// normalizePrivilege spells a declared privilege the way the server reports it: upper case,
// single spaces, ALL as ALL PRIVILEGES, and MariaDB's current names for its aliases.
func normalizePrivilege(f Flavor, p string) string {
	p = strings.Join(strings.Fields(strings.ToUpper(p)), " ")
	switch {
	case p == "ALL":
		return allPrivileges
	case f == MariaDB && p == "REPLICATION CLIENT":
		return "BINLOG MONITOR" // an alias since MariaDB 10.5
	}
	return p
}

// wanted is what a declared grant asks for on its scope.
type wanted struct {
	scope       Scope
	privileges  []string // normalized, sorted; [ALL PRIVILEGES] for all
	grantOption bool
}

func (w wanted) all() bool { return len(w.privileges) == 1 && w.privileges[0] == allPrivileges }

// wantedGrants normalizes declared grants by scope. Grants on the same scope are merged
// (the API allows one per scope; merging keeps the planner total).
func wantedGrants(f Flavor, grants []Grant) map[Scope]wanted {
	out := map[Scope]wanted{}
	for _, g := range grants {
		s := Scope{Database: g.Database, Table: g.Table}
		if s.Table == "" || s.Database == "*" {
			s.Table = "*"
		}
		w := out[s]
		w.scope = s
		w.grantOption = w.grantOption || g.GrantOption
		for _, p := range g.Privileges {
			if n := normalizePrivilege(f, p); !slices.Contains(w.privileges, n) {
				w.privileges = append(w.privileges, n)
			}
		}
		if slices.Contains(w.privileges, allPrivileges) {
			w.privileges = []string{allPrivileges}
		}
		slices.Sort(w.privileges)
		out[s] = w
	}
	return out
}

// missing lists what w asks for that h lacks (ALL PRIVILEGES when any privilege of the
// level is missing).
func (w wanted) missing(f Flavor, h Held) []string {
	if w.all() {
		for _, p := range allOf(f, w.scope.Level()) {
			if !h.Privileges[p] {
				return []string{allPrivileges}
			}
		}
		return nil
	}
	var out []string
	for _, p := range w.privileges {
		if !h.Privileges[p] {
			out = append(out, p)
		}
	}
	return out
}

// extra lists what h holds that w does not ask for, sorted. Under ALL PRIVILEGES nothing is
// extra.
func (w wanted) extra(h Held) []string {
	if w.all() {
		return nil
	}
	var out []string
	for p := range h.Privileges {
		if !slices.Contains(w.privileges, p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}
