package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/dolphin-operator/dolphin/internal/binlog"
	"github.com/dolphin-operator/dolphin/internal/dbsql"
)

// positionCovers reports whether the GTID position p holds every transaction of q.
func positionCovers(p, q string) (bool, error) {
	pp, err := binlog.Parse(p)
	if err != nil {
		return false, fmt.Errorf("position %q: %w", p, err)
	}
	qq, err := binlog.Parse(q)
	if err != nil {
		return false, fmt.Errorf("position %q: %w", q, err)
	}
	return pp.Covers(qq), nil
}

// Fallback makes the old source replicate from the new primary (newPrimary: its address and a
// replication account there), from position, the cutover's final position, so that the move
// can be undone by a second Cutover the other way round; until then the old source stays
// read-only and follows every write made on the new primary. The old source's binary log must
// hold nothing beyond position: a write it took after the fence (ErrSourceMoved) is not on the
// new primary, and replication from there would fail on it. position may be further than its
// binary log (what it applied from the new primary before, pointed again). The account on the old source needs REPLICATION
// SLAVE ADMIN. newPrimary.CAFile, when set, is read by the old source's server: it is a path
// on the old source's host, not on the caller's.
func Fallback(ctx context.Context, oldSource *sql.DB, newPrimary Endpoint, position string) error {
	if !gtidList.MatchString(position) {
		return fmt.Errorf("position %q is not a GTID list", position)
	}
	return pointAt(ctx, oldSource, newPrimary, func(at, _ string) (string, error) {
		if covered, err := positionCovers(position, at); err != nil {
			return "", err
		} else if !covered {
			return "", fmt.Errorf("%w: it is at %s, beyond %s; it cannot follow the new primary", ErrSourceMoved, at, position)
		}
		return position, nil
	})
}

// FallbackAgain points the old source at the new primary again (a changed address or
// account, a detached server), continuing from what it holds: its replication stopped first,
// then, domain by domain, the further of its binary log and what it applied. accept refuses a
// position the new primary does not hold all of (ErrSourceMoved: the old source took writes
// of its own).
func FallbackAgain(ctx context.Context, oldSource *sql.DB, newPrimary Endpoint, accept func(position string) error) error {
	return pointAt(ctx, oldSource, newPrimary, func(binlogPos, slavePos string) (string, error) {
		position, err := Furthest(binlogPos, slavePos)
		if err != nil {
			return "", err
		}
		if err := accept(position); err != nil {
			return "", err
		}
		return position, nil
	})
}

// pointAt stops the old source's replication, reads its positions (binary log, applied),
// asks from(binlog, applied) where to continue, and points it at the new primary from there.
func pointAt(ctx context.Context, oldSource *sql.DB, newPrimary Endpoint, from func(binlogPos, slavePos string) (string, error)) error {
	conn, err := oldSource.Conn(ctx)
	if err != nil {
		return fmt.Errorf("connecting to the old source: %w", err)
	}
	defer conn.Close()
	running, err := replicating(ctx, conn)
	if err != nil {
		return err
	}
	// Stopped before its positions are read: an applier still running would move them.
	if _, err := conn.ExecContext(ctx, "STOP SLAVE"); err != nil {
		return fmt.Errorf("on the old source, STOP SLAVE: %w", err)
	}
	var binlogPos, slavePos string
	if err := conn.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos, @@gtid_slave_pos").Scan(&binlogPos, &slavePos); err != nil {
		return fmt.Errorf("on the old source: %w", err)
	}
	position, err := from(binlogPos, slavePos)
	if err != nil {
		if running {
			// Refused: it goes on as it was.
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "START SLAVE")
		}
		return err
	}
	port := newPrimary.Port
	if port == 0 {
		port = 3306
	}
	change := "CHANGE MASTER TO MASTER_HOST = " + quoteString(newPrimary.Host) +
		", MASTER_PORT = " + strconv.Itoa(port) +
		", MASTER_USER = " + quoteString(newPrimary.User) +
		", MASTER_PASSWORD = " + quoteString(newPrimary.Password) +
		", MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1"
	if newPrimary.CAFile != "" {
		change += ", MASTER_SSL = 1, MASTER_SSL_CA = " + quoteString(newPrimary.CAFile) + ", MASTER_SSL_VERIFY_SERVER_CERT = 1"
	}
	// The session goes back to the pool: its sql_mode as the server's again, whatever happens.
	defer conn.ExecContext(context.WithoutCancel(ctx), "SET SESSION sql_mode = @@GLOBAL.sql_mode") //nolint:errcheck // best effort on a pooled session
	for _, q := range []string{
		// The quoting below assumes backslash escapes: this session's, whatever the server's.
		"SET SESSION sql_mode = ''",
		"SET GLOBAL gtid_slave_pos = '" + position + "'",
		change,
		"START SLAVE",
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			what := q
			if strings.HasPrefix(q, "CHANGE MASTER") {
				what = "CHANGE MASTER TO " + newPrimary.Host // not the password
			}
			return fmt.Errorf("on the old source, %s: %w", what, err)
		}
	}
	return nil
}

// Furthest is, domain by domain, the further of two GTID positions.
func Furthest(a, b string) (string, error) {
	pa, err := binlog.Parse(a)
	if err != nil {
		return "", err
	}
	pb, err := binlog.Parse(b)
	if err != nil {
		return "", err
	}
	domains := map[uint32]bool{}
	for _, p := range []binlog.Position{pa, pb} {
		for _, d := range p.Domains() {
			domains[d] = true
		}
	}
	var parts []string
	for _, dom := range slices.Sorted(maps.Keys(domains)) {
		ga, okA := pa.Last(dom)
		gb, okB := pb.Last(dom)
		if okA && (!okB || ga.Seq >= gb.Seq) {
			parts = append(parts, ga.String())
		} else {
			parts = append(parts, gb.String())
		}
	}
	return strings.Join(parts, ","), nil
}

// quoteString is s as a string literal for a session with backslash escapes and a utf8 or
// latin1 connection character set (the driver's default utf8mb4); multi-byte sets such as
// gbk or sjis, where a byte after a lead byte can be a backslash, are not safe with it.
func quoteString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\x00", `\0`, "\n", `\n`, "\r", `\r`, "\x1a", `\Z`)
	return "'" + r.Replace(s) + "'"
}

// Replication is a server's replication connection as SHOW SLAVE STATUS reports it: the old
// source's from the new primary once it follows it (Fallback).
type Replication struct {
	IORunning, SQLRunning     bool
	SecondsBehind             *int64
	LastIOError, LastSQLError string
}

// ReplicationOf reads db's (default) replication connection; nil when it has none. It needs
// SLAVE MONITOR or REPLICATION SLAVE ADMIN (the fallback's).
func ReplicationOf(ctx context.Context, db *sql.DB) (*Replication, error) {
	rows, err := db.QueryContext(ctx, "SHOW SLAVE STATUS")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	status, err := dbsql.ResultMaps(rows)
	if err != nil {
		return nil, err
	}
	if len(status) == 0 {
		return nil, nil
	}
	row := status[0]
	r := &Replication{IORunning: row["Slave_IO_Running"] == "Yes", SQLRunning: row["Slave_SQL_Running"] == "Yes",
		LastIOError: row["Last_IO_Error"], LastSQLError: row["Last_SQL_Error"]}
	if s, err := strconv.ParseInt(row["Seconds_Behind_Master"], 10, 64); err == nil {
		r.SecondsBehind = &s
	}
	return r, nil
}
