package sqlobjects

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// ErrReadOnly means the server refused a write because it is read-only: it is not the
// writable primary (a replica, a fenced former primary, or a primary a failover is about to
// replace). Nothing was changed; retry once the cluster has a writable primary.
var ErrReadOnly = errors.New("the server is read-only: it is not the writable primary")

// errOptionPreventsStatement is ER_OPTION_PREVENTS_STATEMENT, what read_only answers.
const errOptionPreventsStatement = 1290

// errAccessDenied is ER_ACCESS_DENIED_ERROR: the schema account does not log in (yet).
const errAccessDenied = 1045

// ErrRefused marks a statement the server refused (Apply).
var ErrRefused = errors.New("the server refused the statement")

// IsRefused reports whether err is the server refusing a statement (an unknown collation, a
// name too long, a privilege the schema account may not grant …): something to fix in the
// declaration, as opposed to a server that cannot be reached, is read-only, or does not let
// the schema account log in yet (Dolphin creates it when the engine starts). Access denied
// (1045) is a login failure when reading, a refusal when a statement answers it.
func IsRefused(err error) bool {
	if errors.Is(err, ErrRefused) {
		return true
	}
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number != errOptionPreventsStatement && me.Number != errAccessDenied
}

// defaultTimeout bounds each statement. A statement that waits for a semi-sync
// acknowledgement longer than this has still been written; the next observation sees it.
const defaultTimeout = 10 * time.Second

// Server observes and applies users and databases on one server, through a pool logged in
// as Dolphin's schema account. Its statements are written to the binary log.
type Server struct {
	db      *sql.DB
	flavor  Flavor
	timeout time.Duration
}

// NewServer uses db (whose sessions must not turn sql_log_bin off) for a server of flavor f.
func NewServer(db *sql.DB, f Flavor) *Server {
	return &Server{db: db, flavor: f, timeout: defaultTimeout}
}

// Flavor is the server's flavor.
func (s *Server) Flavor() Flavor { return s.flavor }

// Close closes the pool.
func (s *Server) Close() error { return s.db.Close() }

// CheckWritable returns ErrReadOnly when the server is read-only, so that a reconcile
// reports the wait without trying statements the server would refuse.
func (s *Server) CheckWritable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var ro bool
	if err := s.db.QueryRowContext(ctx, "SELECT @@global.read_only").Scan(&ro); err != nil {
		return fmt.Errorf("sqlobjects: reading read_only: %w", err)
	}
	if ro {
		return ErrReadOnly
	}
	return nil
}

// ObserveUser reads the account name@host: whether it exists, its authentication, limits
// and every global, database and table privilege.
func (s *Server) ObserveUser(ctx context.Context, name, host string) (ObservedUser, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var (
		o       ObservedUser
		sslType string
	)
	err := s.db.QueryRowContext(ctx,
		"SELECT plugin, authentication_string, max_user_connections, ssl_type FROM mysql.user WHERE User = ? AND Host = ?",
		name, host).Scan(&o.Plugin, &o.AuthenticationString, &o.MaxUserConnections, &sslType)
	if errors.Is(err, sql.ErrNoRows) {
		return ObservedUser{}, nil
	}
	if err != nil {
		return ObservedUser{}, fmt.Errorf("sqlobjects: reading account %s@%s: %w", name, host, err)
	}
	o.Exists = true
	o.Require = map[string]string{"": "", "ANY": "SSL", "X509": "X509"}[strings.ToUpper(sslType)]
	if o.Require == "" && sslType != "" {
		o.Require = strings.ToUpper(sslType)
	}
	o.Privileges, err = s.privileges(ctx, grantee(name, host))
	return o, err
}

// grantee is the account as information_schema spells it.
func grantee(name, host string) string { return "'" + name + "'@'" + host + "'" }

// privilegesQuery reads every privilege of one grantee at the three levels.
const privilegesQuery = "SELECT 'global', '', '', PRIVILEGE_TYPE, IS_GRANTABLE FROM information_schema.USER_PRIVILEGES WHERE GRANTEE = ?" +
	" UNION ALL SELECT 'database', TABLE_SCHEMA, '', PRIVILEGE_TYPE, IS_GRANTABLE FROM information_schema.SCHEMA_PRIVILEGES WHERE GRANTEE = ?" +
	" UNION ALL SELECT 'table', TABLE_SCHEMA, TABLE_NAME, PRIVILEGE_TYPE, IS_GRANTABLE FROM information_schema.TABLE_PRIVILEGES WHERE GRANTEE = ?"

func (s *Server) privileges(ctx context.Context, g string) (map[Scope]Held, error) {
	rows, err := s.db.QueryContext(ctx, privilegesQuery, g, g, g)
	if err != nil {
		return nil, fmt.Errorf("sqlobjects: reading privileges of %s: %w", g, err)
	}
	defer rows.Close()
	out := map[Scope]Held{}
	for rows.Next() {
		var level, db, table, priv, grantable string
		if err := rows.Scan(&level, &db, &table, &priv, &grantable); err != nil {
			return nil, fmt.Errorf("sqlobjects: reading privileges of %s: %w", g, err)
		}
		var sc Scope
		switch level {
		case "global":
			sc = Scope{Database: "*", Table: "*"}
		case "database":
			sc = databaseScope(db)
		default:
			sc = Scope{Database: db, Table: table}
		}
		h := out[sc]
		if h.Privileges == nil {
			h.Privileges = map[string]bool{}
		}
		if priv != "USAGE" {
			h.Privileges[priv] = true
		}
		h.GrantOption = h.GrantOption || grantable == "YES"
		if len(h.Privileges) == 0 && !h.GrantOption {
			continue // plain USAGE: the account exists, nothing is held here
		}
		out[sc] = h
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlobjects: reading privileges of %s: %w", g, err)
	}
	return out, nil
}

// ObserveDatabase reads whether the database exists and its defaults.
func (s *Server) ObserveDatabase(ctx context.Context, name string) (ObservedDatabase, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var o ObservedDatabase
	err := s.db.QueryRowContext(ctx,
		"SELECT DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?",
		name).Scan(&o.CharacterSet, &o.Collation)
	if errors.Is(err, sql.ErrNoRows) {
		return ObservedDatabase{}, nil
	}
	if err != nil {
		return ObservedDatabase{}, fmt.Errorf("sqlobjects: reading database %s: %w", name, err)
	}
	o.Exists = true
	return o, nil
}

// Apply runs the statements in order and stops at the first failure. A server that is
// read-only answers ErrReadOnly (wrapped with the server's error).
func (s *Server) Apply(ctx context.Context, stmts []Statement) error {
	for _, st := range stmts {
		qctx, cancel := context.WithTimeout(ctx, s.timeout)
		_, err := s.db.ExecContext(qctx, st.SQL, st.Args...)
		cancel()
		if err != nil {
			var me *mysql.MySQLError
			switch {
			case errors.As(err, &me) && me.Number == errOptionPreventsStatement:
				return fmt.Errorf("%s: %w (%w)", st, ErrReadOnly, err)
			case errors.As(err, &me):
				return fmt.Errorf("%s: %w: %w", st, ErrRefused, err)
			}
			return fmt.Errorf("%s: %w", st, err)
		}
	}
	return nil
}
