package restore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Fix-up statements, run in this order on one session of the temporary server. `?` are
// interpolated by the driver (see tempServer.connector).
const (
	// Nothing of the fix-up may reach the binary log: a restored instance must hold exactly
	// the backup's transactions. First, so that FLUSH PRIVILEGES is not logged either.
	sqlLogBinOff = "SET SESSION sql_log_bin = 0"
	// Loads the grant tables, which --skip-grant-tables left out, so that account statements
	// work; the session keeps its privileges.
	flushPrivileges  = "FLUSH PRIVILEGES"
	replaceOperator  = "CREATE OR REPLACE USER ?@'%' IDENTIFIED BY ?"
	grantOperator    = "GRANT ALL PRIVILEGES ON *.* TO ?@'%' WITH GRANT OPTION"
	createRoot       = "CREATE USER IF NOT EXISTS 'root'@'localhost' IDENTIFIED BY ?"
	alterRoot        = "ALTER USER 'root'@'localhost' IDENTIFIED BY ?"
	grantRoot        = "GRANT ALL PRIVILEGES ON *.* TO 'root'@'localhost' WITH GRANT OPTION"
	stopAllSlaves    = "STOP ALL SLAVES"
	showAllSlaves    = "SHOW ALL SLAVES STATUS"
	resetSlaveAll    = "RESET SLAVE ALL"
	resetNamedSlave  = "RESET SLAVE ? ALL"
	resetMaster      = "RESET MASTER"
	setBinlogState   = "SET GLOBAL gtid_binlog_state = ?"
	setSlavePos      = "SET GLOBAL gtid_slave_pos = ?"
	gtidStateQuery   = "SELECT @@log_bin, @@gtid_binlog_pos, @@gtid_slave_pos, @@gtid_current_pos"
	connectionColumn = "Connection_name"
)

// fixUp makes the restored data directory the new cluster's, on a temporary server: its
// accounts, no replication connection and position as its GTID state.
func (o *Options) fixUp(ctx context.Context, position string) (err error) {
	log := o.logf()
	srv, err := o.startTempServer(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, srv.stop(o.StopTimeout))
		}
	}()
	c, err := srv.connector()
	if err != nil {
		return err
	}
	db := sql.OpenDB(c)
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("connecting to the temporary server: %w", err)
	}
	defer conn.Close()

	exec := func(q string, args ...any) error {
		if _, err := conn.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("%s: %w", q, err) // q holds placeholders, never a password
		}
		return nil
	}
	for _, s := range []struct {
		q    string
		args []any
	}{
		{sqlLogBinOff, nil},
		{flushPrivileges, nil},
		{replaceOperator, []any{o.OperatorUser, o.OperatorPassword}},
		{grantOperator, []any{o.OperatorUser}},
		{createRoot, []any{o.RootPassword}},
		{alterRoot, []any{o.RootPassword}},
		{grantRoot, nil},
		{stopAllSlaves, nil},
	} {
		if err := exec(s.q, s.args...); err != nil {
			return err
		}
	}
	log("replaced the operator account %q and root@localhost's password", o.OperatorUser)

	names, err := connectionNames(ctx, conn)
	if err != nil {
		return err
	}
	for _, n := range names {
		q, args := resetSlaveAll, []any(nil)
		if n != "" {
			q, args = resetNamedSlave, []any{n}
		}
		if err := exec(q, args...); err != nil {
			return err
		}
	}
	if len(names) > 0 {
		log("removed the replication connection(s) of the source: %q", names)
	}
	for _, s := range []struct {
		q    string
		args []any
	}{
		{resetMaster, nil},
		{setBinlogState, []any{position}},
		{setSlavePos, []any{position}},
	} {
		if err := exec(s.q, s.args...); err != nil {
			return err
		}
	}
	if err := checkState(ctx, conn, position); err != nil {
		return err
	}
	log("binary log reset; gtid_binlog_state and gtid_slave_pos set to %q", position)
	if err := srv.shutdown(ctx, conn, o.StopTimeout); err != nil {
		return err
	}
	log("the temporary server shut down cleanly")
	return nil
}

// connectionNames returns the replication connections the server knows ("" is the default
// one), as SHOW ALL SLAVES STATUS lists them.
func connectionNames(ctx context.Context, conn *sql.Conn) ([]string, error) {
	rows, err := conn.QueryContext(ctx, showAllSlaves)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", showAllSlaves, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	idx := slices.Index(cols, connectionColumn)
	if idx < 0 {
		return nil, fmt.Errorf("%s has no column %s", showAllSlaves, connectionColumn)
	}
	var names []string
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		names = append(names, string(vals[idx]))
	}
	return names, rows.Err()
}

// checkState verifies what the fix-up set: the binary log is on and every GTID position is
// want, and no replication connection is left.
func checkState(ctx context.Context, conn *sql.Conn, want string) error {
	var logBin int
	var binlogPos, slavePos, currentPos string
	if err := conn.QueryRowContext(ctx, gtidStateQuery).Scan(&logBin, &binlogPos, &slavePos, &currentPos); err != nil {
		return fmt.Errorf("%s: %w", gtidStateQuery, err)
	}
	if logBin != 1 {
		return errors.New("the binary log is off: the server's option file must set log_bin")
	}
	for _, p := range []struct{ name, v string }{
		{"gtid_binlog_pos", binlogPos}, {"gtid_slave_pos", slavePos}, {"gtid_current_pos", currentPos},
	} {
		if !SameGTIDPosition(p.v, want) {
			return fmt.Errorf("after setting it, @@%s is %q, not the backup's position %q", p.name, p.v, want)
		}
	}
	names, err := connectionNames(ctx, conn)
	if err != nil {
		return err
	}
	if len(names) > 0 {
		return fmt.Errorf("replication connections %q are left after RESET SLAVE ALL", names)
	}
	return nil
}

// SameGTIDPosition reports whether two MariaDB GTID positions (comma-separated
// domain-server-seq, in any order, with any spaces) are the same set.
func SameGTIDPosition(a, b string) bool {
	return slices.Equal(gtidSet(a), gtidSet(b))
}

func gtidSet(pos string) []string {
	var out []string
	for _, g := range strings.Split(pos, ",") {
		if g = strings.TrimSpace(g); g != "" {
			out = append(out, g)
		}
	}
	slices.Sort(out)
	return out
}
