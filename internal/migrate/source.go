// Package migrate brings data into a cluster from a server outside Dolphin (issue 36,
// docs/design/0066): it reads what it needs of the source through the migration account
// (Observe) and decides, as a pure function of that reading, whether the migration can start
// and what to change on the source if not (Check).
package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
)

// Source is what Observe read of a source server.
type Source struct {
	// Version is SELECT VERSION(), e.g. "10.11.14-MariaDB-0+deb12u2".
	Version string
	// ServerID is @@server_id.
	ServerID uint64
	// LogBin is @@log_bin; BinlogFormat and BinlogRowImage the binary log's settings.
	LogBin         bool
	BinlogFormat   string
	BinlogRowImage string
	// GTIDStrictMode is @@gtid_strict_mode; GTIDBinlogPos @@gtid_binlog_pos.
	GTIDStrictMode bool
	GTIDBinlogPos  string
	// BinlogRetentionDays is @@expire_logs_days: how long the source keeps its binary logs
	// (0: until removed by hand).
	BinlogRetentionDays float64
	// BinlogDoDB and BinlogIgnoreDB are the binary log's database filters (SHOW MASTER
	// STATUS), BinlogFiltersKnown whether the account could read them (BINLOG MONITOR).
	BinlogDoDB, BinlogIgnoreDB string
	BinlogFiltersKnown         bool
	// LogReplicaUpdates is @@log_slave_updates; GTIDSlavePos @@gtid_slave_pos, not empty
	// when the source applies (or applied) replication from another server.
	LogReplicaUpdates bool
	GTIDSlavePos      string
	// Account is CURRENT_USER(), the account the server matched, e.g. "migrate@%".
	Account string
	// GlobalPrivileges are the account's privileges ON *.* (information_schema's
	// USER_PRIVILEGES, as the server resolved them; privileges through roles are not in it).
	GlobalPrivileges []string
	// Tables are the base tables outside the system schemas.
	Tables []Table
}

// Table is one user table of the source.
type Table struct {
	Schema, Name string
	// Engine is the storage engine ("InnoDB", "MyISAM", …).
	Engine string
	// PrimaryKey tells whether the table has a primary key.
	PrimaryKey bool
}

// String is schema.name.
func (t Table) String() string { return t.Schema + "." + t.Name }

// SystemSchemas are the schemas a migration does not copy as user data.
var SystemSchemas = []string{"mysql", "information_schema", "performance_schema", "sys"}

// Observe reads the source through db, on one session: its version and binary log settings,
// the migration account's global privileges, and its user tables with their engines and
// primary keys. It changes nothing on the source.
func Observe(ctx context.Context, db *sql.DB) (Source, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return Source{}, fmt.Errorf("connecting to the source: %w", err)
	}
	defer conn.Close()
	var (
		s                                 Source
		logBin, strict, replicaUpdates    int
		retention                         string
		format, image, gtid, gtidSlavePos sql.NullString
	)
	err = conn.QueryRowContext(ctx, `SELECT VERSION(), @@server_id, @@log_bin, @@binlog_format, @@binlog_row_image,
		@@gtid_strict_mode, @@gtid_binlog_pos, @@expire_logs_days, CURRENT_USER(), @@log_slave_updates, @@gtid_slave_pos`).
		Scan(&s.Version, &s.ServerID, &logBin, &format, &image, &strict, &gtid, &retention, &s.Account, &replicaUpdates, &gtidSlavePos)
	if err != nil {
		return Source{}, fmt.Errorf("reading the source's settings: %w", err)
	}
	s.LogBin, s.GTIDStrictMode, s.LogReplicaUpdates = logBin == 1, strict == 1, replicaUpdates == 1
	s.BinlogFormat, s.BinlogRowImage, s.GTIDBinlogPos, s.GTIDSlavePos = format.String, image.String, gtid.String, gtidSlavePos.String
	if s.LogBin {
		if s.BinlogDoDB, s.BinlogIgnoreDB, s.BinlogFiltersKnown, err = binlogFilters(ctx, conn); err != nil {
			return Source{}, err
		}
	}
	if s.BinlogRetentionDays, err = strconv.ParseFloat(retention, 64); err != nil {
		return Source{}, fmt.Errorf("reading the source's expire_logs_days %q: %w", retention, err)
	}

	user, host, ok := splitAccount(s.Account)
	if !ok {
		return Source{}, fmt.Errorf("the source names the account %q, not user@host", s.Account)
	}
	rows, err := conn.QueryContext(ctx, `SELECT PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES WHERE GRANTEE = ?`,
		"'"+user+"'@'"+host+"'")
	if err != nil {
		return Source{}, fmt.Errorf("reading the account's privileges: %w", err)
	}
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			rows.Close()
			return Source{}, fmt.Errorf("reading the account's privileges: %w", err)
		}
		s.GlobalPrivileges = append(s.GlobalPrivileges, p)
	}
	if err := closeRows(rows); err != nil {
		return Source{}, fmt.Errorf("reading the account's privileges: %w", err)
	}

	// Primary keys from STATISTICS: TABLE_CONSTRAINTS shows an account with SELECT alone
	// none (measured on 10.11), which would call every table keyless.
	placeholders := strings.TrimSuffix(strings.Repeat("?,", len(SystemSchemas)), ",")
	args := make([]any, len(SystemSchemas))
	for i, sc := range SystemSchemas {
		args[i] = sc
	}
	rows, err = conn.QueryContext(ctx, `SELECT t.TABLE_SCHEMA, t.TABLE_NAME, COALESCE(t.ENGINE, ''),
		EXISTS (SELECT 1 FROM information_schema.STATISTICS k WHERE k.TABLE_SCHEMA = t.TABLE_SCHEMA
			AND k.TABLE_NAME = t.TABLE_NAME AND k.INDEX_NAME = 'PRIMARY')
		FROM information_schema.TABLES t
		WHERE t.TABLE_TYPE = 'BASE TABLE' AND t.TABLE_SCHEMA NOT IN (`+placeholders+`)
		ORDER BY t.TABLE_SCHEMA, t.TABLE_NAME`, args...)
	if err != nil {
		return Source{}, fmt.Errorf("listing the source's tables: %w", err)
	}
	for rows.Next() {
		var t Table
		if err := rows.Scan(&t.Schema, &t.Name, &t.Engine, &t.PrimaryKey); err != nil {
			rows.Close()
			return Source{}, fmt.Errorf("listing the source's tables: %w", err)
		}
		s.Tables = append(s.Tables, t)
	}
	if err := closeRows(rows); err != nil {
		return Source{}, fmt.Errorf("listing the source's tables: %w", err)
	}
	return s, nil
}

// binlogFilters reads the binary log's database filters from SHOW MASTER STATUS; known is
// false when the account may not run it (BINLOG MONITOR), which Check reports.
func binlogFilters(ctx context.Context, conn *sql.Conn) (doDB, ignoreDB string, known bool, err error) {
	rows, err := conn.QueryContext(ctx, "SHOW MASTER STATUS")
	var me *mysql.MySQLError
	if errors.As(err, &me) && (me.Number == 1227 || me.Number == 1044 || me.Number == 1045) {
		return "", "", false, nil
	}
	if err != nil {
		return "", "", false, fmt.Errorf("reading the source's binary log filters: %w", err)
	}
	defer rows.Close()
	status, err := dbsql.ResultMaps(rows)
	if err != nil {
		return "", "", false, fmt.Errorf("reading the source's binary log filters: %w", err)
	}
	for _, row := range status {
		doDB, ignoreDB = row["Binlog_Do_DB"], row["Binlog_Ignore_DB"]
	}
	return doDB, ignoreDB, true, nil
}

// splitAccount splits CURRENT_USER()'s "user@host" at its last '@' (a user name may hold one).
func splitAccount(a string) (user, host string, ok bool) {
	i := strings.LastIndexByte(a, '@')
	if i < 0 {
		return "", "", false
	}
	return a[:i], a[i+1:], true
}

func closeRows(rows *sql.Rows) error {
	if err := rows.Err(); err != nil {
		rows.Close()
		return err
	}
	return rows.Close()
}
