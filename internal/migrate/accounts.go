package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
)

// Account is a user or a role of the source.
type Account struct {
	User, Host string
	// Role is true for a role (its Host is empty).
	Role bool
}

// String is 'user'@'host', or the role's name.
func (a Account) String() string {
	if a.Role {
		return "role " + a.User
	}
	return "'" + a.User + "'@'" + a.Host + "'"
}

// sql is the account's name as SQL (backquoted identifiers).
func (a Account) sql() string {
	if a.Role {
		return quoteIdent(a.User)
	}
	return quoteIdent(a.User) + "@" + quoteIdent(a.Host)
}

func quoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// serverAccounts are the server's own accounts and roles, never copied (the API refuses them
// as MySQLUser names too), nor is any name starting with "dolphin" (Dolphin's own).
var serverAccounts = []string{"root", "mariadb.sys", "mysql.sys", "mysql.session", "mysql.infoschema", "PUBLIC"}

// ReservedAccount reports whether user is the server's or Dolphin's own: the cluster has its
// own, and a copy must neither replace them nor bring the source's passwords for them.
func ReservedAccount(user string) bool {
	return user == "" || strings.HasPrefix(user, "dolphin") || slices.Contains(serverAccounts, user)
}

// AccountsResult says what CopyAccounts did.
type AccountsResult struct {
	// Copied are the accounts created on the target, roles first.
	Copied []Account
	// Failed maps an account the target refused (String) to the server's reason; the other
	// accounts were copied.
	Failed map[string]string
}

// CopyAccounts copies the source's users and roles, with their passwords (as the hashes the
// source stores: nobody needs to know them) and their grants, into the target, on one target
// session with sql_log_bin=0, except the reserved ones (ReservedAccount) and those skip names
// (the migration account). Roles come first, so that grants of roles find them. mariadb-dump's
// --system=users does the same but stops at the first account it cannot show (a host entry the
// server ignores under skip-name-resolve), which is why Dolphin reads them itself. The
// account reading the source needs SELECT on the mysql schema (Check asks for SELECT ON *.*).
func CopyAccounts(ctx context.Context, src, dst *sql.DB, skip func(Account) bool) (AccountsResult, error) {
	accounts, err := listAccounts(ctx, src)
	if err != nil {
		return AccountsResult{}, err
	}
	conn, err := dst.Conn(ctx)
	if err != nil {
		return AccountsResult{}, fmt.Errorf("connecting to the target: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET SESSION sql_log_bin = 0"); err != nil {
		return AccountsResult{}, fmt.Errorf("on the target: %w", err)
	}
	res := AccountsResult{Failed: map[string]string{}}
	var created []Account
	for _, a := range accounts {
		if ReservedAccount(a.User) || (skip != nil && skip(a)) {
			continue
		}
		create := "CREATE ROLE " + a.sql()
		if !a.Role {
			if create, err = showOne(ctx, src, "SHOW CREATE USER "+a.sql()); err != nil {
				return res, fmt.Errorf("reading %s on the source: %w", a, err)
			}
		}
		if _, err := conn.ExecContext(ctx, create); err != nil {
			res.Failed[a.String()] = err.Error()
			continue
		}
		created = append(created, a)
	}
	for _, a := range created {
		grants, err := showAll(ctx, src, "SHOW GRANTS FOR "+a.sql())
		if err != nil {
			return res, fmt.Errorf("reading the grants of %s on the source: %w", a, err)
		}
		for _, g := range grants {
			if _, err := conn.ExecContext(ctx, g); err != nil {
				res.Failed[a.String()] = fmt.Sprintf("%s: %v", g, err)
			}
		}
		if _, failed := res.Failed[a.String()]; !failed {
			res.Copied = append(res.Copied, a)
		}
	}
	return res, nil
}

// listAccounts lists the source's accounts, roles first.
func listAccounts(ctx context.Context, db *sql.DB) ([]Account, error) {
	rows, err := db.QueryContext(ctx, "SELECT User, Host, is_role = 'Y' FROM mysql.user ORDER BY is_role = 'Y' DESC, User, Host")
	if err != nil {
		return nil, fmt.Errorf("listing the source's accounts: %w", err)
	}
	defer rows.Close()
	var out []Account
	for rows.Next() {
		var a Account
		if err := rows.Scan(&a.User, &a.Host, &a.Role); err != nil {
			return nil, fmt.Errorf("listing the source's accounts: %w", err)
		}
		if a.Role {
			a.Host = ""
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing the source's accounts: %w", err)
	}
	return out, nil
}

// showOne is the single text column of a SHOW statement's single row.
func showOne(ctx context.Context, db *sql.DB, q string) (string, error) {
	all, err := showAll(ctx, db, q)
	if err != nil {
		return "", err
	}
	if len(all) != 1 {
		return "", fmt.Errorf("%s: %d rows", q, len(all))
	}
	return all[0], nil
}

// showAll is the first column of every row of a SHOW statement.
func showAll(ctx context.Context, db *sql.DB, q string) ([]string, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
