package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
	"github.com/dolphin-operator/dolphin/internal/sqlobjects"
)

// gtidList is a MariaDB GTID position: domain-server-sequence, comma-separated per domain.
var gtidList = regexp.MustCompile(`^[0-9]+-[0-9]+-[0-9]+(,[0-9]+-[0-9]+-[0-9]+)*$`)

// TableChecksum is one table's CHECKSUM TABLE … EXTENDED on both sides at one position.
type TableChecksum struct {
	Table          string
	Source, Target int64
}

// Verification is the result of Verify.
type Verification struct {
	// Position is the source's GTID position both sides were compared at.
	Position string
	// Tables are every table compared, in the order asked.
	Tables []TableChecksum
}

// Mismatched are the tables whose checksums differ.
func (v Verification) Mismatched() []string {
	var out []string
	for _, t := range v.Tables {
		if t.Source != t.Target {
			out = append(out, t.Table)
		}
	}
	return out
}

// Verify compares tables (schema.name) of the source and of the target, a server replicating
// from it on its default connection, at one GTID position of the source, while the source
// keeps taking writes: the target's replication is stopped first; the source's checksums are
// taken in one consistent snapshot whose position is BINLOG_GTID_POS of the snapshot's binary
// log coordinates; the target is let run to exactly that position (START SLAVE UNTIL
// master_gtid_pos) and checksummed there; its replication is started again whatever
// happened. Nothing is written on either side. A person can rerun it any time; CHECKSUM TABLE
// values depend on the row format and server version, so both sides should run the same.
func Verify(ctx context.Context, source, target *sql.DB, tables []string, timeout time.Duration) (_ Verification, err error) {
	tconn, err := target.Conn(ctx)
	if err != nil {
		return Verification{}, fmt.Errorf("connecting to the target: %w", err)
	}
	defer tconn.Close()
	running, err := replicating(ctx, tconn)
	if err != nil {
		return Verification{}, err
	}
	// Stopped before the snapshot: a target still running could pass the snapshot's position
	// before it is known.
	if _, err := tconn.ExecContext(ctx, "STOP SLAVE"); err != nil {
		return Verification{}, fmt.Errorf("stopping the target's replication: %w", err)
	}
	defer func() {
		// As it was, through a fresh connection: a cancelled query closes the one in use.
		// Stopped first whatever happened: threads started with UNTIL may still be running
		// (they stop only when they next look at the condition, which can be after the
		// target reached it), and START SLAVE on running threads does nothing — replication
		// would then end at the verified position (seen on a busy machine).
		qs := []string{"STOP SLAVE"}
		if running {
			qs = append(qs, "START SLAVE")
		}
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, q := range qs {
			if _, serr := target.ExecContext(uctx, q); serr != nil {
				err = errors.Join(err, fmt.Errorf("restoring the target's replication (%s): %w", q, serr))
			}
		}
	}()

	v, err := sourceChecksums(ctx, source, tables)
	if err != nil {
		return v, err
	}
	if !gtidList.MatchString(v.Position) {
		return v, fmt.Errorf("the source's position %q is not a GTID list", v.Position)
	}
	// Not a placeholder: START SLAVE cannot be prepared; the position was checked above.
	if _, err := tconn.ExecContext(ctx, "START SLAVE UNTIL master_gtid_pos = '"+v.Position+"'"); err != nil {
		return v, fmt.Errorf("running the target's replication up to %s: %w", v.Position, err)
	}
	want, err := dbsql.ParseMariaDBGTID(v.Position)
	if err != nil {
		return v, fmt.Errorf("the source's position: %w", err)
	}
	deadline := time.Now().Add(timeout)
	for {
		var at string
		if err := tconn.QueryRowContext(ctx, "SELECT @@gtid_slave_pos").Scan(&at); err != nil {
			return v, fmt.Errorf("reading the target's position: %w", err)
		}
		// As sets (the server lists domains in any order); it stops at the position, so
		// holding all of it is being exactly there in its domains.
		if got, err := dbsql.ParseMariaDBGTID(at); err == nil && got.Contains(want) {
			break
		}
		if time.Now().After(deadline) {
			return v, fmt.Errorf("the target did not reach the source's %s within %v (it is at %s)", v.Position, timeout, at)
		}
		select {
		case <-ctx.Done():
			return v, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	for i, t := range tables {
		if v.Tables[i].Target, err = checksumTable(ctx, tconn, t); err != nil {
			return v, fmt.Errorf("on the target: %w", err)
		}
	}
	return v, nil
}

// sourceChecksums checksums tables in one consistent snapshot of the source and returns the
// snapshot's GTID position with them.
func sourceChecksums(ctx context.Context, source *sql.DB, tables []string) (Verification, error) {
	conn, err := source.Conn(ctx)
	if err != nil {
		return Verification{}, fmt.Errorf("connecting to the source: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "START TRANSACTION WITH CONSISTENT SNAPSHOT"); err != nil {
		return Verification{}, fmt.Errorf("on the source: %w", err)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK") //nolint:errcheck // read-only snapshot
	var file, pos string
	rows, err := conn.QueryContext(ctx, "SHOW STATUS LIKE 'binlog_snapshot_%'")
	if err != nil {
		return Verification{}, fmt.Errorf("on the source: %w", err)
	}
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			rows.Close()
			return Verification{}, err
		}
		switch name {
		case "Binlog_snapshot_file":
			file = value
		case "Binlog_snapshot_position":
			pos = value
		}
	}
	if err := closeRows(rows); err != nil {
		return Verification{}, fmt.Errorf("on the source: %w", err)
	}
	if file == "" {
		return Verification{}, errors.New("the source reports no binary log coordinates for its snapshot: is its binary log on?")
	}
	var v Verification
	var gtid sql.NullString
	if err := conn.QueryRowContext(ctx, "SELECT BINLOG_GTID_POS(?, ?)", file, pos).Scan(&gtid); err != nil {
		return Verification{}, fmt.Errorf("on the source: %w", err)
	}
	if !gtid.Valid {
		return Verification{}, fmt.Errorf("the source cannot name the GTID position of %s:%s", file, pos)
	}
	v.Position = gtid.String
	for _, t := range tables {
		sum, err := checksumTable(ctx, conn, t)
		if err != nil {
			return v, fmt.Errorf("on the source: %w", err)
		}
		v.Tables = append(v.Tables, TableChecksum{Table: t, Source: sum})
	}
	return v, nil
}

// checksumTable is CHECKSUM TABLE … EXTENDED of table (schema.name, quoted here).
func checksumTable(ctx context.Context, conn *sql.Conn, table string) (int64, error) {
	schema, name, ok := cutTable(table)
	if !ok {
		return 0, fmt.Errorf("table %q is not schema.name", table)
	}
	var got string
	var sum sql.NullInt64
	if err := conn.QueryRowContext(ctx, "CHECKSUM TABLE "+sqlobjects.QuoteIdent(schema)+"."+sqlobjects.QuoteIdent(name)+" EXTENDED").Scan(&got, &sum); err != nil {
		return 0, fmt.Errorf("CHECKSUM TABLE %s: %w", table, err)
	}
	if !sum.Valid {
		return 0, fmt.Errorf("CHECKSUM TABLE %s: the table does not exist", table)
	}
	return sum.Int64, nil
}

func cutTable(t string) (schema, name string, ok bool) {
	for i := 0; i < len(t); i++ {
		if t[i] == '.' {
			return t[:i], t[i+1:], i > 0 && i < len(t)-1
		}
	}
	return "", "", false
}

// replicating reports whether the server's default replication connection runs (both threads).
func replicating(ctx context.Context, conn *sql.Conn) (bool, error) {
	rows, err := conn.QueryContext(ctx, "SHOW SLAVE STATUS")
	if err != nil {
		return false, fmt.Errorf("reading the target's replication: %w", err)
	}
	defer rows.Close()
	status, err := dbsql.ResultMaps(rows)
	if err != nil {
		return false, fmt.Errorf("reading the target's replication: %w", err)
	}
	running := false
	for _, row := range status {
		running = row["Slave_IO_Running"] != "No" && row["Slave_SQL_Running"] == "Yes"
	}
	return running, nil
}
