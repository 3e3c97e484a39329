package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
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
// exactly that (at most wait), checks that the source did not move meanwhile, detaches the
// target (STOP SLAVE, RESET SLAVE ALL) and opens it for writes (read_only off). If anything
// fails before the target is detached, the source is opened again (read_only off) and the
// target keeps replicating: no half-cut state. The account on the source needs READ_ONLY
// ADMIN, CONNECTION ADMIN and PROCESS (Check warns without them).
func Cutover(ctx context.Context, source, target *sql.DB, wait time.Duration) (res CutoverResult, err error) {
	sconn, err := source.Conn(ctx)
	if err != nil {
		return res, fmt.Errorf("connecting to the source: %w", err)
	}
	defer sconn.Close()
	var initialReadOnly int
	if err := sconn.QueryRowContext(ctx, "SELECT @@read_only").Scan(&initialReadOnly); err != nil {
		return res, fmt.Errorf("on the source: %w", err)
	}
	if _, err := sconn.ExecContext(ctx, "SET GLOBAL read_only = ON"); err != nil {
		return res, fmt.Errorf("fencing the source (read_only needs READ_ONLY ADMIN): %w", err)
	}
	res.Fenced = time.Now()
	detached := false
	defer func() {
		if err != nil && !detached && initialReadOnly == 0 {
			if _, uerr := sconn.ExecContext(context.WithoutCancel(ctx), "SET GLOBAL read_only = OFF"); uerr != nil {
				err = errors.Join(err, fmt.Errorf("opening the source again: %w", uerr))
			}
		}
	}()
	if res.ClientsEnded, err = endClientSessions(ctx, sconn); err != nil {
		return res, err
	}
	if err := sconn.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&res.Position); err != nil {
		return res, fmt.Errorf("reading the source's final position: %w", err)
	}
	tconn, err := target.Conn(ctx)
	if err != nil {
		return res, fmt.Errorf("connecting to the target: %w", err)
	}
	defer tconn.Close()
	var waited sql.NullInt64
	if err := tconn.QueryRowContext(ctx, "SELECT MASTER_GTID_WAIT(?, ?)", res.Position, wait.Seconds()).Scan(&waited); err != nil {
		return res, fmt.Errorf("waiting for the target to apply %s: %w", res.Position, err)
	}
	if !waited.Valid || waited.Int64 != 0 {
		return res, fmt.Errorf("the target did not apply the source's %s within %v; the source is open again", res.Position, wait)
	}
	var now string
	if err := sconn.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&now); err != nil {
		return res, fmt.Errorf("reading the source's position again: %w", err)
	}
	if now != res.Position {
		return res, fmt.Errorf("%w (%s, then %s): find the account with READ_ONLY ADMIN that writes; the source is open again", ErrSourceMoved, res.Position, now)
	}
	for _, q := range []string{"STOP SLAVE", "RESET SLAVE ALL"} {
		if _, err := tconn.ExecContext(ctx, q); err != nil {
			return res, fmt.Errorf("detaching the target (%s): %w", q, err)
		}
	}
	detached = true
	if _, err := tconn.ExecContext(ctx, "SET GLOBAL read_only = OFF"); err != nil {
		return res, fmt.Errorf("opening the target for writes: %w (it is detached from the source, which stays fenced)", err)
	}
	res.Opened = time.Now()
	return res, nil
}

// endClientSessions ends every session of the source but the server's own and the migration
// account's — the target's replication connection is one, and while it (re)connects it is not
// yet a 'Binlog Dump' (ended then, it would retry only after its connect-retry interval,
// measured: the cutover then waited its whole timeout) — and returns how many it ended. Ending
// them makes every client reconnect, and rolls back a transaction left open, which read_only
// would otherwise let commit nothing but hold. Applications must not use the migration account.
func endClientSessions(ctx context.Context, conn *sql.Conn) (int, error) {
	rows, err := conn.QueryContext(ctx, `SELECT ID FROM information_schema.PROCESSLIST
		WHERE ID <> CONNECTION_ID() AND USER <> SUBSTRING_INDEX(CURRENT_USER(), '@', 1)
		AND COMMAND NOT IN ('Daemon', 'Binlog Dump', 'Killed') AND USER NOT IN ('system user', 'event_scheduler')`)
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
