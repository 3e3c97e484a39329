package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
	"github.com/dolphin-operator/dolphin/internal/faults"
)

// CutoverResult says what Cutover did.
type CutoverResult struct {
	// Position is the source's final GTID position, which the target holds exactly.
	Position string
	// Fenced is when the source stopped taking writes, Opened when the target started to:
	// the write pause as the servers saw it (a client adds its own reconnection).
	Fenced, Opened time.Time
	// ClientsEnded is how many sessions of the source's clients were ended at the fence.
	ClientsEnded int
}

// ErrSourceMoved is returned when the source's position moved after it was fenced: an
// account allowed to write through read_only (READ_ONLY ADMIN) wrote. The cutover is undone.
var ErrSourceMoved = errors.New("the source took a write after it was fenced")

// Cutover moves writes from the source to the target, a server replicating from it on its
// default connection: it fences the source (read_only, then ends its clients' sessions so
// that no open transaction commits later and every client reconnects — to the target, once
// it points there), reads the source's final position, waits until the target has applied
// it (at most wait), stops the target's replication, checks that the source is still at
// that position and that the stopped target holds all of it (a write by an account with
// READ_ONLY ADMIN in between is ErrSourceMoved), detaches the target (RESET SLAVE ALL) and
// opens it for writes (read_only off). If anything fails before the detach, the target's
// replication is started again and the source opened again (unless it was read-only before),
// through fresh connections, whatever became of the ones in use: no half-cut state, and the
// error says what was undone. After the target is open the source is read once more: a write
// that got in after the last check is reported (ErrSourceMoved) for a person to reconcile.
// The account on the source needs READ_ONLY ADMIN, CONNECTION ADMIN and PROCESS (Check warns
// without them).
func Cutover(ctx context.Context, source, target *sql.DB, wait time.Duration) (res CutoverResult, err error) {
	sconn, err := source.Conn(ctx)
	if err != nil {
		return res, fmt.Errorf("connecting to the source: %w", err)
	}
	defer sconn.Close()
	var initialReadOnly int
	var account string
	if err := sconn.QueryRowContext(ctx, "SELECT @@read_only, CURRENT_USER()").Scan(&initialReadOnly, &account); err != nil {
		return res, fmt.Errorf("on the source: %w", err)
	}
	user, _, ok := splitAccount(account)
	if !ok {
		return res, fmt.Errorf("the source names the account %q, not user@host", account)
	}
	if _, err := sconn.ExecContext(ctx, "SET GLOBAL read_only = ON"); err != nil {
		return res, fmt.Errorf("fencing the source (read_only needs READ_ONLY ADMIN): %w", err)
	}
	res.Fenced = time.Now()
	targetStopped, detached := false, false
	defer func() {
		if err == nil || detached {
			return
		}
		err = undoCutover(ctx, err, source, target, targetStopped, initialReadOnly == 0)
	}()
	if res.ClientsEnded, err = endClientSessions(ctx, sconn, user); err != nil {
		return res, err
	}
	if res.Position, err = binlogPos(ctx, sconn); err != nil {
		return res, fmt.Errorf("reading the source's final position: %w", err)
	}
	faults.Pause(ctx, faults.CutoverFenced)
	tconn, err := target.Conn(ctx)
	if err != nil {
		return res, fmt.Errorf("connecting to the target: %w", err)
	}
	defer tconn.Close()
	if reached, err := gtidWait(ctx, tconn, res.Position, wait); err != nil {
		return res, fmt.Errorf("waiting for the target to apply %s: %w", res.Position, err)
	} else if !reached {
		return res, fmt.Errorf("the target did not apply the source's %s within %v", res.Position, wait)
	}
	// Stopped before the last look at the source: nothing the source takes from now on can
	// reach the target unnoticed.
	if _, err := tconn.ExecContext(ctx, "STOP SLAVE"); err != nil {
		return res, fmt.Errorf("stopping the target's replication: %w", err)
	}
	targetStopped = true
	now, err := binlogPos(ctx, sconn)
	if err != nil {
		return res, fmt.Errorf("reading the source's position again: %w", err)
	}
	if !sameGTIDs(now, res.Position) {
		return res, fmt.Errorf("%w (%s, then %s): find the account with READ_ONLY ADMIN that writes", ErrSourceMoved, res.Position, now)
	}
	if reached, err := gtidWait(ctx, tconn, res.Position, 0); err != nil {
		return res, fmt.Errorf("checking that the stopped target holds the source's %s: %w", res.Position, err)
	} else if !reached {
		return res, fmt.Errorf("the stopped target does not hold the source's %s", res.Position)
	}
	if _, err := tconn.ExecContext(ctx, "RESET SLAVE ALL"); err != nil {
		return res, fmt.Errorf("detaching the target: %w", err)
	}
	detached = true
	faults.Pause(ctx, faults.CutoverDetached)
	if _, err := tconn.ExecContext(ctx, "SET GLOBAL read_only = OFF"); err != nil {
		return res, fmt.Errorf("opening the target for writes: %w (it is detached from the source, which stays fenced)", err)
	}
	res.Opened = time.Now()
	faults.Pause(ctx, faults.CutoverOpened)
	if after, err := binlogPos(context.WithoutCancel(ctx), sconn); err == nil && !sameGTIDs(after, res.Position) {
		return res, fmt.Errorf("%w after the target was opened (%s, then %s): those writes are on the source only; "+
			"reconcile them by hand", ErrSourceMoved, res.Position, after)
	}
	return res, nil
}

// undoCutover starts the target's replication again when Cutover had stopped it and opens the
// source again when it was writable before, through fresh connections from the pools (the ones
// in use may have been closed by a cancelled query), and says in the error what it undid.
func undoCutover(ctx context.Context, cause error, source, target *sql.DB, targetStopped, reopenSource bool) error {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var undone []string
	var failed []error
	if targetStopped {
		if _, err := target.ExecContext(uctx, "START SLAVE"); err != nil {
			failed = append(failed, fmt.Errorf("starting the target's replication again: %w", err))
		} else {
			undone = append(undone, "the target replicates again")
		}
	}
	if reopenSource {
		if _, err := source.ExecContext(uctx, "SET GLOBAL read_only = OFF"); err != nil {
			failed = append(failed, fmt.Errorf("opening the source again: %w", err))
		} else {
			undone = append(undone, "the source is open again")
		}
	} else {
		undone = append(undone, "the source stays read-only, as it was before")
	}
	if len(failed) > 0 {
		return errors.Join(append([]error{fmt.Errorf("%w; undoing the cutover FAILED, a person must finish it", cause)}, failed...)...)
	}
	return fmt.Errorf("%w; undone: %s", cause, strings.Join(undone, ", "))
}

// binlogPos is the server's @@gtid_binlog_pos.
func binlogPos(ctx context.Context, conn *sql.Conn) (string, error) {
	var pos string
	err := conn.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&pos)
	return pos, err
}

// gtidWait is MASTER_GTID_WAIT(pos, wait): whether the server has applied pos within wait.
func gtidWait(ctx context.Context, conn *sql.Conn, pos string, wait time.Duration) (bool, error) {
	var waited sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT MASTER_GTID_WAIT(?, ?)", pos, wait.Seconds()).Scan(&waited); err != nil {
		return false, err
	}
	return waited.Valid && waited.Int64 == 0, nil
}

// sameGTIDs compares two MariaDB GTID positions as sets (the server may list domains in any
// order); unparsable positions compare as text.
func sameGTIDs(a, b string) bool {
	as, aerr := dbsql.ParseMariaDBGTID(a)
	bs, berr := dbsql.ParseMariaDBGTID(b)
	if aerr != nil || berr != nil {
		return a == b
	}
	return as.Equal(bs)
}

// endClientSessions ends every session of the source but the server's own and the migration
// account's — the target's replication connection is one, and while it (re)connects it is not
// yet a 'Binlog Dump' (ended then, it would retry only after its connect-retry interval,
// measured: the cutover then waited its whole timeout) — and returns how many it ended. Ending
// them makes every client reconnect, and rolls back a transaction left open, which read_only
// would otherwise let commit nothing but hold. Applications must not use the migration account.
func endClientSessions(ctx context.Context, conn *sql.Conn, migrationUser string) (int, error) {
	rows, err := conn.QueryContext(ctx, `SELECT ID FROM information_schema.PROCESSLIST
		WHERE ID <> CONNECTION_ID() AND USER <> ?
		AND COMMAND NOT IN ('Daemon', 'Binlog Dump', 'Killed') AND USER NOT IN ('system user', 'event_scheduler')`, migrationUser)
	if err != nil {
		return 0, fmt.Errorf("listing the source's sessions: %w", err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, err
		}
		ids = append(ids, id)
	}
	if err := closeRows(rows); err != nil {
		return 0, fmt.Errorf("listing the source's sessions: %w", err)
	}
	ended := 0
	for _, id := range ids {
		if _, err := conn.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id)); err != nil {
			// A session that ended meanwhile (1094: unknown thread) is not an error.
			if !isUnknownThread(err) {
				return ended, fmt.Errorf("ending session %d on the source (needs CONNECTION ADMIN): %w", id, err)
			}
			continue
		}
		ended++
	}
	return ended, nil
}

// isUnknownThread reports whether err is the server's 1094 (unknown thread id).
func isUnknownThread(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1094
}
