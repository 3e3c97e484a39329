package sqlobjects

import (
	"cmp"
	"crypto/sha1" //nolint:gosec // mysql_native_password is defined with SHA-1
	"encoding/hex"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// PasswordIsCurrent tells whether the account's stored hash is that of password. known is
// false when the account's authentication plugin keeps a salted hash (caching_sha2_password,
// ed25519): the caller then relies on whether the password changed since it last set it.
func PasswordIsCurrent(have ObservedUser, password string) (current, known bool) {
	if have.Plugin != "mysql_native_password" && !(have.Plugin == "" && strings.HasPrefix(have.AuthenticationString, "*")) {
		return false, false
	}
	return strings.EqualFold(have.AuthenticationString, nativePasswordHash(password)), true
}

// nativePasswordHash is mysql_native_password's stored form: '*' and the upper-case hex of
// SHA1(SHA1(password)).
func nativePasswordHash(password string) string {
	first := sha1.Sum([]byte(password)) //nolint:gosec // the protocol's hash, not a choice
	second := sha1.Sum(first[:])        //nolint:gosec
	return "*" + strings.ToUpper(hex.EncodeToString(second[:]))
}

// PlanUser returns the statements that make the server's account (have) what was declared
// (want), in order; none when it already is. setPassword sets the password even when the
// account exists (the caller decides, with PasswordIsCurrent).
func PlanUser(f Flavor, want User, have ObservedUser, setPassword bool) []Statement {
	var out []Statement
	held := have.Privileges
	if !have.Exists {
		out = append(out, createUser(f, want))
		held = nil // a new account holds nothing (USAGE)
	} else if s, ok := alterUser(f, want, have, setPassword); ok {
		out = append(out, s)
	}
	return append(out, planGrants(f, want, held)...)
}

// PlanDropUser drops the account (nothing when it does not exist).
func PlanDropUser(name, host string) Statement {
	return Statement{SQL: "DROP USER IF EXISTS ?@?", Args: []any{name, host}}
}

// identifiedBy is how a statement sets a password, and its argument. MariaDB writes the
// statement to the binary log as typed, so it gets the mysql_native_password hash, never the
// password (it would be in every binlog, relay log and archive). MySQL rewrites the statement
// with the hash itself before logging it (not verified here: no MySQL server).
func identifiedBy(f Flavor, password string) (string, any) {
	if f == MariaDB {
		return " IDENTIFIED BY PASSWORD ?", nativePasswordHash(password)
	}
	return " IDENTIFIED BY ?", password
}

func createUser(f Flavor, u User) Statement {
	clause, arg := identifiedBy(f, u.Password)
	q := "CREATE USER ?@?" + clause
	if u.Require != "" {
		q += requireClause(u.Require)
	}
	if u.MaxUserConnections > 0 {
		q += fmt.Sprintf(" WITH MAX_USER_CONNECTIONS %d", u.MaxUserConnections)
	}
	return Statement{SQL: q, Args: []any{u.Name, u.Host, arg}, Secret: true}
}

// alterUser changes what differs of the account's password, TLS requirement and
// connection limit in one statement.
func alterUser(f Flavor, want User, have ObservedUser, setPassword bool) (Statement, bool) {
	q := "ALTER USER ?@?"
	args := []any{want.Name, want.Host}
	if setPassword {
		clause, arg := identifiedBy(f, want.Password)
		q += clause
		args = append(args, arg)
	}
	if want.Require != have.Require {
		q += requireClause(want.Require)
	}
	if want.MaxUserConnections != have.MaxUserConnections {
		q += fmt.Sprintf(" WITH MAX_USER_CONNECTIONS %d", want.MaxUserConnections)
	}
	if q == "ALTER USER ?@?" {
		return Statement{}, false
	}
	return Statement{SQL: q, Args: args, Secret: setPassword}, true
}

func requireClause(r string) string {
	switch r {
	case "SSL", "X509":
		return " REQUIRE " + r
	default:
		return " REQUIRE NONE"
	}
}

// planGrants grants what is missing and revokes what is not declared, scope by scope in a
// fixed order (global, databases, tables; by name).
func planGrants(f Flavor, u User, held map[Scope]Held) []Statement {
	want := wantedGrants(f, u.Grants)
	scopes := slices.Collect(maps.Keys(want))
	for s := range held {
		if _, ok := want[s]; !ok {
			scopes = append(scopes, s)
		}
	}
	slices.SortFunc(scopes, func(a, b Scope) int {
		return cmp.Or(cmp.Compare(a.Level(), b.Level()), cmp.Compare(a.Database, b.Database),
			cmp.Compare(a.Table, b.Table), boolCompare(a.Pattern, b.Pattern))
	})
	acct := []any{u.Name, u.Host}
	grant := func(privs []string, s Scope, withGrant bool) Statement {
		q := "GRANT " + strings.Join(privs, ", ") + " ON " + s.sql() + " TO ?@?"
		if withGrant {
			q += " WITH GRANT OPTION"
		}
		return Statement{SQL: q, Args: acct}
	}
	revoke := func(privs []string, s Scope) Statement {
		return Statement{SQL: "REVOKE " + strings.Join(privs, ", ") + " ON " + s.sql() + " FROM ?@?", Args: acct}
	}
	var out []Statement
	for _, s := range scopes {
		h := held[s]
		w, declared := want[s]
		if !declared {
			w = wanted{scope: s, privileges: []string{}}
		}
		if miss := w.missing(f, h); len(miss) > 0 {
			out = append(out, grant(miss, s, w.grantOption))
		} else if w.grantOption && !h.GrantOption {
			out = append(out, grant([]string{"USAGE"}, s, true))
		}
		if extra := w.extra(h); len(extra) > 0 {
			out = append(out, revoke(extra, s))
		}
		if !w.grantOption && h.GrantOption {
			out = append(out, revoke([]string{"GRANT OPTION"}, s))
		}
	}
	return out
}

func boolCompare(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	default:
		return 1
	}
}

// charsetName matches character set and collation names, which statements take unquoted.
var charsetName = regexp.MustCompile(`^[a-z0-9_]+$`)

// PlanDatabase returns the statement that makes the server's database (have) what was
// declared, or none.
func PlanDatabase(want Database, have ObservedDatabase) ([]Statement, error) {
	cs, co := normalizeCharset(want.CharacterSet), normalizeCharset(want.Collation)
	for _, n := range []string{cs, co} {
		if n != "" && !charsetName.MatchString(n) {
			return nil, fmt.Errorf("sqlobjects: %q is not a character set or collation name", n)
		}
	}
	clause := ""
	if cs != "" {
		clause += " CHARACTER SET " + cs
	}
	if co != "" {
		clause += " COLLATE " + co
	}
	if !have.Exists {
		return []Statement{{SQL: "CREATE DATABASE " + QuoteIdent(want.Name) + clause}}, nil
	}
	if (cs != "" && cs != have.CharacterSet) || (co != "" && co != have.Collation) {
		return []Statement{{SQL: "ALTER DATABASE " + QuoteIdent(want.Name) + clause}}, nil
	}
	return nil, nil
}

// PlanDropDatabase drops the database and every table in it (nothing when it does not
// exist).
func PlanDropDatabase(name string) Statement {
	return Statement{SQL: "DROP DATABASE IF EXISTS " + QuoteIdent(name)}
}

// normalizeCharset spells utf8 (and its collations) as the servers report it: utf8mb3.
func normalizeCharset(name string) string {
	if name == "utf8" {
		return "utf8mb3"
	}
	if rest, ok := strings.CutPrefix(name, "utf8_"); ok {
		return "utf8mb3_" + rest
	}
	return name
}
