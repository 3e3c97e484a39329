package dbsql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/go-sql-driver/mysql"

	"github.com/dolphin-operator/dolphin/internal/sysvars"
)

// errUnknownThread is ER_NO_SUCH_THREAD: the connection ended before KILL.
const errUnknownThread = 1094

// EnsureAccounts implements Instance.
func (in *instance) EnsureAccounts(ctx context.Context, a Accounts) error {
	accts := []struct {
		role  string
		acct  Account
		grant string
	}{
		{"operator", a.Operator, grantAll},
		{"replication", a.Replication, "GRANT " + in.d.replicationPrivileges + " ON *.* TO ?@'%'"},
		{"monitor", a.Monitor, "GRANT " + in.d.monitorPrivileges + " ON *.* TO ?@'%'"},
	}
	var stmts []stmt
	for _, x := range accts {
		if x.acct.User == "" || x.acct.Password == "" {
			return fmt.Errorf("dbsql: %s account needs a user name and a password", x.role)
		}
		stmts = append(stmts,
			st(createUser, x.acct.User, x.acct.Password),
			st(alterUser, x.acct.User, x.acct.Password),
			st(x.grant, x.acct.User))
	}
	if a.Schema.User != "" {
		if a.Schema.Password == "" {
			return fmt.Errorf("dbsql: schema account needs a password")
		}
		// An explicit list, never ALL: a GRANT ALL followed by a REVOKE would hold the
		// read_only bypass for a moment on every run.
		stmts = append(stmts,
			st(createUser, a.Schema.User, a.Schema.Password),
			st(alterUser, a.Schema.User, a.Schema.Password),
			st("GRANT "+in.d.schemaPrivileges+" ON *.* TO ?@'%' WITH GRANT OPTION", a.Schema.User))
	}
	if a.Root.Password != "" {
		// root@localhost stays for socket access inside the pod; it gets the password of
		// the credentials Secret instead of the installer's empty one.
		stmts = append(stmts, st(alterLocalUser, a.Root.User, a.Root.Password))
	}
	if err := in.exec(ctx, in.db, stmts...); err != nil {
		return err
	}
	return in.lockDown(ctx)
}

// lockDown drops the passwordless root and anonymous accounts an installer
// leaves behind, keeping root@localhost (socket access on the server's host).
func (in *instance) lockDown(ctx context.Context) error {
	rows, err := in.queryRows(ctx, lockdownQuery)
	if err != nil {
		return err
	}
	stmts := make([]stmt, 0, len(rows))
	for _, r := range rows {
		stmts = append(stmts, st(dropUser, r["User"], r["Host"]))
	}
	return in.exec(ctx, in.db, stmts...)
}

// Threads KillConnections never kills, by user and by command.
var (
	systemUsers    = []string{"system user", "event_scheduler"}
	systemCommands = []string{"Binlog Dump", "Binlog Dump GTID", "Daemon",
		"Slave_IO", "Slave_SQL", "Slave_worker"}
)

// KillConnections implements Instance. The process list is read and the
// threads killed on one session, so the statement never kills its own
// connection.
func (in *instance) KillConnections(ctx context.Context, exceptUsers []string) error {
	return in.killWhere(ctx, func(user, command string) bool {
		idleExcepted := slices.Contains(exceptUsers, user) && command == "Sleep"
		return !slices.Contains(systemUsers, user) && !idleExcepted && !slices.Contains(systemCommands, command)
	})
}

// KillClientConnections implements Instance.
func (in *instance) KillClientConnections(ctx context.Context, spareUsers []string) error {
	return in.killWhere(ctx, func(user, command string) bool {
		return !slices.Contains(systemUsers, user) && !slices.Contains(spareUsers, user) && !slices.Contains(systemCommands, command)
	})
}

// KillBinlogReaders implements Instance.
func (in *instance) KillBinlogReaders(ctx context.Context) error {
	return in.killWhere(ctx, func(_, command string) bool { return command == "Binlog Dump" || command == "Binlog Dump GTID" })
}

// killWhere kills the threads pick chooses by user and command. The process list is read and
// the threads killed on one session, so the statement never kills its own connection.
func (in *instance) killWhere(ctx context.Context, pick func(user, command string) bool) error {
	conn, err := in.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("dbsql: kill connections: %w", err)
	}
	defer conn.Close()

	qctx, cancel := context.WithTimeout(ctx, in.queryTimeout)
	defer cancel()
	rows, err := conn.QueryContext(qctx, in.d.processList)
	if err != nil {
		return fmt.Errorf("dbsql: %s: %w", in.d.processList, err)
	}
	var ids []int64
	for rows.Next() {
		var (
			id            int64
			user, command sql.NullString
		)
		if err := rows.Scan(&id, &user, &command); err != nil {
			rows.Close()
			return fmt.Errorf("dbsql: process list: %w", err)
		}
		if pick(user.String, command.String) {
			ids = append(ids, id)
		}
	}
	err = errors.Join(rows.Err(), rows.Close())
	if err != nil {
		return fmt.Errorf("dbsql: process list: %w", err)
	}
	for _, id := range ids {
		err := in.exec(ctx, conn, st(killConn, id))
		var me *mysql.MySQLError
		if err != nil && !(errors.As(err, &me) && me.Number == errUnknownThread) {
			return err
		}
	}
	return nil
}

// variableName is what GlobalVariable accepts as a name.
var variableName = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// GlobalVariable implements Instance.
func (in *instance) GlobalVariable(ctx context.Context, name string) (string, error) {
	if !variableName.MatchString(name) {
		return "", fmt.Errorf("dbsql: %q is not a variable name", name)
	}
	rows, err := in.queryRows(ctx, "SELECT @@GLOBAL."+name+" AS v")
	if err != nil {
		return "", err
	}
	if len(rows) != 1 {
		return "", fmt.Errorf("dbsql: @@GLOBAL.%s: %d rows", name, len(rows))
	}
	return rows[0]["v"], nil
}

// SetGlobalVariables implements Instance.
func (in *instance) SetGlobalVariables(ctx context.Context, vars map[string]string) error {
	names := make([]string, 0, len(vars))
	for n := range vars {
		names = append(names, n)
	}
	slices.Sort(names)
	var errs []error
	for _, n := range names {
		q, err := sysvars.Statement(n, vars[n])
		if err == nil {
			err = in.exec(ctx, in.db, st(q))
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
