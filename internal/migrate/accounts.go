package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/dolphin-operator/dolphin/internal/sqlobjects"
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
		return sqlobjects.QuoteIdent(a.User)
	}
	return sqlobjects.QuoteIdent(a.User) + "@" + sqlobjects.QuoteIdent(a.Host)
}

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
	// Copied are the accounts created on the target with all their grants, roles first.
	Copied []Account
	// Skipped are the source's accounts not copied: the reserved ones and those the caller
	// named (an application that logs in as one of them must get another account).
	Skipped []Account
	// Failed maps an account that could not be copied whole (String) to the reason; it is not
	// left behind half-granted, and the other accounts were copied.
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
			res.Skipped = append(res.Skipped, a)
			continue
		}
		create := "CREATE ROLE " + a.sql()
		if !a.Role {
			if create, err = showOne(ctx, src, "SHOW CREATE USER "+a.sql()); err != nil {
				// An account the source cannot show (a host entry it ignores): the others go on.
				res.Failed[a.String()] = fmt.Sprintf("reading it on the source: %v", err)
				continue
			}
		}
		if _, err := conn.ExecContext(ctx, create); err != nil {
			res.Failed[a.String()] = err.Error()
			continue
		}
		created = append(created, a)
	}
	for _, a := range created {
		if reason := copyGrants(ctx, src, conn, "SHOW GRANTS FOR "+a.sql()); reason != "" {
			res.Failed[a.String()] = reason
			// Not left behind with part of its grants.
			drop := "DROP USER "
			if a.Role {
				drop = "DROP ROLE "
			}
			if _, err := conn.ExecContext(ctx, drop+a.sql()); err != nil {
				res.Failed[a.String()] += fmt.Sprintf("; and it could not be removed again: %v", err)
			}
			continue
		}
		res.Copied = append(res.Copied, a)
	}
	// CREATE ROLE granted each new role, with its admin option, to the loading account, which
	// needed it to grant the role on; the source's holders came from their grants.
	for _, a := range res.Copied {
		if a.Role {
			if _, err := conn.ExecContext(ctx, "REVOKE "+a.sql()+" FROM CURRENT_USER"); err != nil {
				return res, fmt.Errorf("revoking %s from the loading account: %w", a, err)
			}
		}
	}
	// What every account holds through the PUBLIC role (10.11 on; older sources have none).
	if grants, err := showAll(ctx, src, "SHOW GRANTS FOR PUBLIC"); err == nil && len(grants) > 0 {
		if reason := copyGrants(ctx, src, conn, "SHOW GRANTS FOR PUBLIC"); reason != "" {
			res.Failed["role PUBLIC"] = reason
		}
	}
	return res, nil
}

// copyGrants replays on conn the grants a SHOW GRANTS statement lists on src; "" when all
// applied, else why not.
func copyGrants(ctx context.Context, src *sql.DB, conn *sql.Conn, show string) string {
	grants, err := showAll(ctx, src, show)
	if err != nil {
		return fmt.Sprintf("reading its grants on the source: %v", err)
	}
	for _, g := range grants {
		if _, err := conn.ExecContext(ctx, g); err != nil {
			return fmt.Sprintf("%s: %v", g, err)
		}
	}
	return ""
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
