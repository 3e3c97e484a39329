package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// BinlogCoordinates is a place in a server's binary log: a file and the offset of an event
// in it (SHOW MASTER STATUS, or the comment mariadb-dump --master-data=2 writes).
type BinlogCoordinates struct {
	File string
	Pos  uint64
}

func (c BinlogCoordinates) String() string { return fmt.Sprintf("%s:%d", c.File, c.Pos) }

// Change is a statement in the source's binary log that changes a schema or an account.
type Change struct {
	// GTID is the transaction's, e.g. 0-1-19 ("" when the log shows none before it).
	GTID string
	// Statement is the statement as logged (without its `use` prefix), shortened, and cut
	// before anything that may be a password.
	Statement string
}

// ErrChangedDuringCopy is returned when the source's schemas or accounts changed while a
// logical copy was made: the copy may already hold such a change and replication from the
// copy's position would apply it again — an error that stops replication (a column added
// twice) or, for a statement that applies twice without error, a silent difference. The copy
// must be discarded and made again once the changes stop.
var ErrChangedDuringCopy = errors.New("the source's schemas or accounts changed during the copy")

// changesPage is how many binary log events one SHOW BINLOG EVENTS returns.
const changesPage = 5000

// ChangesSince reads the source's binary log from `from` to its end as the call begins and
// returns the statements in it that change a schema or an account (isChange), with the
// coordinates it read up to. It needs BINLOG MONITOR (Check requires it) and reads every
// event written meanwhile: a copy under heavy writes makes it read as much as they wrote.
func ChangesSince(ctx context.Context, db *sql.DB, from BinlogCoordinates) ([]Change, BinlogCoordinates, error) {
	end, err := MasterCoordinates(ctx, db)
	if err != nil {
		return nil, from, err
	}
	files, err := binaryLogs(ctx, db)
	if err != nil {
		return nil, from, err
	}
	start := -1
	for i, f := range files {
		if f == from.File {
			start = i
		}
	}
	if start < 0 {
		return nil, from, fmt.Errorf("the source's binary log %s is gone (purged during the copy?): the changes made during the copy cannot be read", from.File)
	}
	var changes []Change
	gtid := ""
	for _, file := range files[start:] {
		pos := uint64(4)
		if file == from.File {
			pos = from.Pos
		}
		for {
			if file == end.File && pos >= end.Pos {
				return changes, end, nil
			}
			n, next, err := scanEvents(ctx, db, file, pos, &gtid, &changes)
			if err != nil {
				return nil, from, err
			}
			if n == 0 || next <= pos {
				break // the end of this file
			}
			pos = next
		}
		if file == end.File {
			return changes, end, nil
		}
	}
	return changes, end, nil
}

// scanEvents reads one page of events of file from pos, adding the changes it finds; it
// returns how many events it read and where the next one starts.
func scanEvents(ctx context.Context, db *sql.DB, file string, pos uint64, gtid *string, changes *[]Change) (int, uint64, error) {
	rows, err := db.QueryContext(ctx, fmt.Sprintf("SHOW BINLOG EVENTS IN '%s' FROM %d LIMIT %d", strings.ReplaceAll(file, "'", "''"), pos, changesPage))
	if err != nil {
		return 0, pos, fmt.Errorf("reading the source's binary log %s from %d: %w", file, pos, err)
	}
	defer rows.Close()
	n, next := 0, pos
	for rows.Next() {
		var logName, eventType, info string
		var at, serverID, endPos uint64
		if err := rows.Scan(&logName, &at, &eventType, &serverID, &endPos, &info); err != nil {
			return n, next, fmt.Errorf("reading the source's binary log %s: %w", file, err)
		}
		n++
		next = endPos
		switch eventType {
		case "Gtid":
			// "BEGIN GTID 0-1-19", "GTID 0-1-20" (a statement alone), perhaps " cid=…" after.
			if f := strings.Fields(strings.TrimPrefix(strings.TrimPrefix(info, "BEGIN "), "GTID ")); len(f) > 0 {
				*gtid = f[0]
			}
		case "Query":
			if stmt := strings.TrimSpace(useClause.ReplaceAllString(info, "")); isChange(stmt) {
				*changes = append(*changes, Change{GTID: *gtid, Statement: shorten(redact(stmt), 200)})
			}
		}
	}
	return n, next, rows.Err()
}

// secretClause starts the part of an account statement that can hold a password (the
// binary log has CREATE USER … IDENTIFIED BY 'x' in clear text).
var secretClause = regexp.MustCompile(`(?is)\b(IDENTIFIED|PASSWORD)\b.*$`)

// redact cuts a statement before anything that could be a password: the statement is shown
// in conditions and logs.
func redact(stmt string) string {
	return secretClause.ReplaceAllString(stmt, "… (the rest not shown: it may hold a password)")
}

// useClause is the "use `schema`; " the server puts before a statement run in a schema.
var useClause = regexp.MustCompile("^use `(?:[^`]|``)*`; ")

// isChange reports whether a statement of the binary log changes a schema or an account,
// rather than marking a transaction (row changes are row events in ROW format) or
// maintaining a table. Conservative: what it does not know is a change.
func isChange(stmt string) bool {
	upper := strings.ToUpper(strings.TrimSpace(stmt))
	for _, harmless := range []string{"BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE SAVEPOINT", "XA ", "FLUSH ", "ANALYZE ", "OPTIMIZE "} {
		if strings.HasPrefix(upper, harmless) {
			return false
		}
	}
	// Temporary tables are the session's own; the server logs their drop at disconnect.
	return !strings.Contains(upper, "TEMPORARY TABLE")
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// MasterCoordinates is the end of the server's binary log (SHOW MASTER STATUS).
func MasterCoordinates(ctx context.Context, db *sql.DB) (BinlogCoordinates, error) {
	rows, err := db.QueryContext(ctx, "SHOW MASTER STATUS")
	if err != nil {
		return BinlogCoordinates{}, fmt.Errorf("SHOW MASTER STATUS: %w", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return BinlogCoordinates{}, err
	}
	if !rows.Next() {
		return BinlogCoordinates{}, errors.New("SHOW MASTER STATUS: the source's binary log is off")
	}
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return BinlogCoordinates{}, err
	}
	var c BinlogCoordinates
	c.File = string(vals[0])
	if _, err := fmt.Sscan(string(vals[1]), &c.Pos); err != nil {
		return BinlogCoordinates{}, fmt.Errorf("SHOW MASTER STATUS: position %q: %w", vals[1], err)
	}
	return c, rows.Err()
}

// binaryLogs lists the server's binary log files, oldest first (SHOW BINARY LOGS).
func binaryLogs(ctx context.Context, db *sql.DB) ([]string, error) {
	rows, err := db.QueryContext(ctx, "SHOW BINARY LOGS")
	if err != nil {
		return nil, fmt.Errorf("SHOW BINARY LOGS: %w", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var files []string
	for rows.Next() {
		vals := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		files = append(files, string(vals[0]))
	}
	return files, rows.Err()
}

// ChangedDuringCopyError is the ErrChangedDuringCopy error listing changes found in a copy's
// window (the first three, and how many more).
func ChangedDuringCopyError(changes []Change) error {
	var parts []string
	for i, c := range changes {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("and %d more", len(changes)-3))
			break
		}
		parts = append(parts, fmt.Sprintf("%q (GTID %s)", c.Statement, c.GTID))
	}
	return fmt.Errorf("%w: %s. Replication would apply them again after the copy; the copy is discarded. "+
		"Pause schema and account changes on the server until the cluster follows it", ErrChangedDuringCopy, strings.Join(parts, ", "))
}
