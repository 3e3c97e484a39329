package backup

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
)

// errSlaveMustStop is MariaDB's ER_SLAVE_MUST_STOP: slave_parallel_threads can be changed only
// while the applier is stopped (someone started it again between our STOP and SET).
const errSlaveMustStop = 1198

// applierSwitchAttempts bounds the stop–set–start round when something keeps starting the
// applier between its steps (the topology engine starts a stopped applier within a second).
const applierSwitchAttempts = 20

// applierRestoreTimeout bounds giving the applier its threads back after a copy: STOP SLAVE
// waits for the transactions the applier is in the middle of, a long one included.
const applierRestoreTimeout = 5 * time.Minute

// serialApplyFunc makes a replica's applier commit one transaction at a time for a backup
// tool's run and returns what releases that. See StreamOptions.serialApply.
type serialApplyFunc func(ctx context.Context) (release func(context.Context) error, err error)

// serialHolds counts, per server (its socket or address), the copies running with its applier
// made serial: the first makes it serial, the last gives the threads back, so a clone that
// overlaps a backup of the same replica is not left with a parallel applier halfway.
var serialHolds = struct {
	sync.Mutex
	m map[string]*serialHold
}{m: map[string]*serialHold{}}

type serialHold struct {
	copies  int
	threads int // slave_parallel_threads before the first copy
	db      *sql.DB
	addr    string
}

// serialApply makes the server's replication applier commit one transaction at a time while
// mariadb-backup runs, and returns the function that gives it back its parallel threads.
//
// A parallel applier that writes a binary log (log_slave_updates, which every Dolphin replica
// has) lets go of its commit lock while it waits for the transactions before its own to
// commit, after its own is prepared in InnoDB. BACKUP STAGE BLOCK_COMMIT, under which
// mariadb-backup reads the binary log coordinates the backup's position comes from, can then
// be granted with such transactions half done, and the copy holds data that matches no
// position (MariaDB MDEV-36025, open upstream; a busy CI run once restored a replica backup
// holding two transactions beyond its position and its own replication position one before
// it). A serial applier holds its commit lock from prepare to commit like any client's
// session, which BLOCK_COMMIT waits for. mariadb-backup's own --safe-slave-backup, which
// stops the applier for the locked phase, is not used: Dolphin's engine starts a replica's
// stopped applier again within a second (docs/design/0064).
//
// A server that is no replica, or whose applier is serial already, is left alone. The switch
// stops the applier at a transaction boundary and starts it again only if it ran; so does the
// release. An error (no privilege to change it, say) fails the backup, after putting back
// what the switch had changed: a backup whose position may not match its data is worse than
// none.
func (o *StreamOptions) serialApply(ctx context.Context) (func(context.Context) error, error) {
	key := o.Socket
	if key == "" {
		key = o.Host + ":" + strconv.Itoa(o.Port)
	}
	serialHolds.Lock()
	defer serialHolds.Unlock()
	if h := serialHolds.m[key]; h != nil {
		h.copies++
		return o.releaser(key), nil
	}
	db, addr, err := o.openDBWithReadTimeout(0)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	var threads int
	if err := db.QueryRowContext(ctx, "SELECT @@slave_parallel_threads").Scan(&threads); err != nil {
		db.Close()
		return nil, fmt.Errorf("SELECT @@slave_parallel_threads on %s: %w", addr, err)
	}
	_, replica, err := applierRunning(ctx, db)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("SHOW SLAVE STATUS on %s: %w", addr, err)
	}
	if !replica || threads == 0 {
		db.Close()
		return func(context.Context) error { return nil }, nil
	}
	if err := setApplierThreads(ctx, db, 0); err != nil {
		err = fmt.Errorf("making the applier of %s serial for the backup (MDEV-36025): %w", addr, err)
		// Put back what the switch may have done (threads set, applier not started again).
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), applierRestoreTimeout)
		defer cancel()
		if uerr := setApplierThreads(uctx, db, threads); uerr != nil {
			err = errors.Join(err, fmt.Errorf("giving it its %d parallel threads back: %w", threads, uerr))
		}
		db.Close()
		return nil, err
	}
	serialHolds.m[key] = &serialHold{copies: 1, threads: threads, db: db, addr: addr}
	return o.releaser(key), nil
}

// releaser returns the function that ends one copy's hold on the serial applier of the
// server under key; the last one gives the applier its threads back.
func (o *StreamOptions) releaser(key string) func(context.Context) error {
	var once sync.Once
	return func(ctx context.Context) (err error) {
		once.Do(func() {
			serialHolds.Lock()
			defer serialHolds.Unlock()
			h := serialHolds.m[key]
			if h == nil {
				return
			}
			if h.copies--; h.copies > 0 {
				return
			}
			delete(serialHolds.m, key)
			defer h.db.Close()
			if serr := setApplierThreads(ctx, h.db, h.threads); serr != nil {
				err = fmt.Errorf("giving the applier of %s its %d parallel threads back after the backup: %w "+
					"(it stays serial until set again: SET GLOBAL slave_parallel_threads = %d with the applier stopped, or a restart)",
					h.addr, h.threads, serr, h.threads)
			}
		})
		return err
	}
}

// setApplierThreads sets slave_parallel_threads, which needs the applier stopped: it stops the
// applier if it runs, sets the value and starts it again. Something that starts the applier
// in between (the engine) makes it try again.
func setApplierThreads(ctx context.Context, db *sql.DB, n int) error {
	var last error
	for range applierSwitchAttempts {
		running, _, err := applierRunning(ctx, db)
		if err != nil {
			return err
		}
		if running {
			if _, err := db.ExecContext(ctx, "STOP SLAVE SQL_THREAD"); err != nil {
				return err
			}
		}
		_, err = db.ExecContext(ctx, "SET GLOBAL slave_parallel_threads = "+strconv.Itoa(n))
		if me := (*mysql.MySQLError)(nil); errors.As(err, &me) && me.Number == errSlaveMustStop {
			last = err
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		if err != nil {
			return err
		}
		if running {
			if _, err := db.ExecContext(ctx, "START SLAVE SQL_THREAD"); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("the applier was started again each time it was stopped (%d tries): %w", applierSwitchAttempts, last)
}

// applierRunning reads SHOW SLAVE STATUS (the default connection, the only one Dolphin
// configures): whether a replication source is configured and whether its applier (SQL
// thread) runs.
func applierRunning(ctx context.Context, db *sql.DB) (running, replica bool, err error) {
	rows, err := db.QueryContext(ctx, "SHOW SLAVE STATUS")
	if err != nil {
		return false, false, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return false, false, err
	}
	if !rows.Next() {
		return false, false, rows.Err()
	}
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return false, false, err
	}
	for i, c := range cols {
		if c == "Slave_SQL_Running" {
			running = string(vals[i]) == "Yes"
		}
	}
	return running, true, rows.Err()
}
