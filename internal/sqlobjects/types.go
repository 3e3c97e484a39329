package sqlobjects

import (
	"fmt"
	"strings"
)

// Flavor selects the server's privilege names: "mariadb" or "mysql".
type Flavor string

// The flavors, spelled like dbsql.Flavor.
const (
	MariaDB Flavor = "mariadb"
	MySQL   Flavor = "mysql"
)

// User is an application account as declared.
type User struct {
	// Name and Host identify the account (Name@Host).
	Name, Host string
	// Password is the clear-text password. On MariaDB only its hash leaves this process (the
	// statement is binlogged as typed); Statement.String redacts either.
	Password string
	// MaxUserConnections is the account's connection limit (0: none).
	MaxUserConnections int
	// Require is "" (none), "SSL" or "X509".
	Require string
	// Grants are every privilege the account should hold.
	Grants []Grant
}

// Account is Name@Host as users write it.
func (u User) Account() string { return u.Name + "@" + u.Host }

// Grant is a set of privileges on one scope.
type Grant struct {
	// Privileges are upper-case privilege names; "ALL" or "ALL PRIVILEGES" means every
	// privilege of the scope's level.
	Privileges []string
	// Database is a database name or "*" (every database); Table a table name or "*".
	Database, Table string
	// GrantOption lets the account pass the privileges on.
	GrantOption bool
}

// Scope is what a grant applies to: every database (Database "*"), one database (Table "*")
// or one table.
type Scope struct {
	Database, Table string
	// Pattern marks an observed database-level grant whose database name is a wildcard
	// pattern (someone granted on `shop_%`.* by hand): Database is then the pattern as the
	// server stores it. Declared scopes are never patterns.
	Pattern bool
}

// Level is a scope's privilege level.
type Level int

// The privilege levels.
const (
	Global Level = iota
	DatabaseLevel
	TableLevel
)

// Level returns the scope's level.
func (s Scope) Level() Level {
	switch {
	case s.Database == "*":
		return Global
	case s.Table == "" || s.Table == "*":
		return DatabaseLevel
	default:
		return TableLevel
	}
}

// String is the scope as in GRANT … ON <scope>.
func (s Scope) String() string { return s.sql() }

// sql is the scope as GRANT and REVOKE take it. A database name in a database-level grant
// is a pattern to the server ('_' and '%' are wildcards); it is escaped so that it matches
// that one database only. Table-level grants take the database name literally.
func (s Scope) sql() string {
	switch s.Level() {
	case Global:
		return "*.*"
	case DatabaseLevel:
		if s.Pattern {
			return QuoteIdent(s.Database) + ".*"
		}
		return QuoteIdent(escapeWildcards(s.Database)) + ".*"
	default:
		return QuoteIdent(s.Database) + "." + QuoteIdent(s.Table)
	}
}

// Held is what an account holds on one scope.
type Held struct {
	// Privileges held, upper-case (never USAGE).
	Privileges map[string]bool
	// GrantOption is whether the account may pass them on.
	GrantOption bool
}

// ObservedUser is an account as the server has it.
type ObservedUser struct {
	// Exists is false when the server has no such account (the rest is then empty).
	Exists bool
	// Plugin and AuthenticationString are the account's authentication method and its
	// stored hash, to tell whether the password is the declared one.
	Plugin, AuthenticationString string
	// MaxUserConnections is the connection limit (0: none).
	MaxUserConnections int
	// Require is "" (none), "SSL" or "X509" ("SPECIFIED" for cipher/issuer/subject
	// requirements Dolphin does not set).
	Require string
	// Privileges are the global, database and table privileges, by scope.
	Privileges map[Scope]Held
}

// Database is a database as declared.
type Database struct {
	// Name of the database.
	Name string
	// CharacterSet and Collation are its defaults; empty ones are left to the server.
	CharacterSet, Collation string
}

// ObservedDatabase is a database as the server has it.
type ObservedDatabase struct {
	Exists                  bool
	CharacterSet, Collation string
}

// Statement is one SQL statement with its arguments (quoted by the driver).
type Statement struct {
	SQL  string
	Args []any
	// Secret marks a statement whose arguments include a password: String hides them.
	Secret bool
}

// String shows the statement with its arguments in place, passwords redacted, for
// logs, events and conditions.
func (s Statement) String() string {
	var b strings.Builder
	args := s.Args
	for _, r := range s.SQL {
		if r == '?' && len(args) > 0 {
			if s.Secret && isPasswordSlot(b.String()) {
				b.WriteString("'<redacted>'")
			} else {
				fmt.Fprintf(&b, "'%v'", args[0])
			}
			args = args[1:]
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// isPasswordSlot reports whether the placeholder after text is a password or its hash
// (IDENTIFIED BY ?, IDENTIFIED BY PASSWORD ?).
func isPasswordSlot(text string) bool {
	t := strings.TrimRight(text, " ")
	return strings.HasSuffix(t, "IDENTIFIED BY") || strings.HasSuffix(t, "IDENTIFIED BY PASSWORD")
}

// QuoteIdent quotes an identifier (a name, a host) for SQL: backquotes, doubled inside.
func QuoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// escapeWildcards escapes the wildcards of a database-level grant's database name.
func escapeWildcards(s string) string {
	return strings.NewReplacer(`\`, `\\`, `_`, `\_`, `%`, `\%`).Replace(s)
}

// databaseScope is the scope of a database-level grant on the database name the server
// reports: the literal name when the server's name is an escaped one, else a pattern.
func databaseScope(stored string) Scope {
	literal := strings.NewReplacer(`\\`, `\`, `\_`, `_`, `\%`, `%`).Replace(stored)
	if escapeWildcards(literal) == stored {
		return Scope{Database: literal, Table: "*"}
	}
	return Scope{Database: stored, Table: "*", Pattern: true}
}
