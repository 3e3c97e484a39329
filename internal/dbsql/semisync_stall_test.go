package dbsql

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
)

// TestServerSemiSyncStallRecovery restarts a semi-sync replica's connection over and
// over (STOP, CHANGE, START twice in a row: a connection that starts and ends
// at once) under a writer, with a watchdog doing what the topology engine does
// about MariaDB's ack-receiver stall: when a dump thread is stuck ending and no
// semi-sync replica is connected, restart the source side. Every write must
// then commit well before the semi-sync timeout and reach the replica; without
// the watchdog a stall makes every later write wait the full timeout and
// replication stop for good.
//
// The stall is a race that needs a busy machine: DOLPHIN_STALL_ROUNDS raises
// the rounds (default 20), and `make stress-semisync` runs it with the CPUs
// kept busy, where it shows up within a few hundred rounds. The count of
// restarts is logged.
func TestServerSemiSyncStallRecovery(t *testing.T) {
	dbtest.RequireMariaDB(t)
	rounds := 20
	if v := os.Getenv("DOLPHIN_STALL_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("DOLPHIN_STALL_ROUNDS=%q: want a positive number", v)
		}
		rounds = n
	}
	c := dbtest.Start(t, dbtest.Options{Instances: 2})
	ctx := t.Context()
	srv := c.Instances
	writer := rootConn(ctx, t, srv[0])
	op := accountsAsRoot(ctx, t, srv)
	src := semiSyncPair(ctx, t, op, srv)
	timeout := time.Duration(status(ctx, t, op[0]).SemiSync.TimeoutMS) * time.Millisecond
	must(t, op[1].ConfigureReplication(ctx, src))
	semiSyncConnected(ctx, t, op[0], srv[0].Name)
	for _, q := range []string{"CREATE DATABASE app", "CREATE TABLE app.t (id INT PRIMARY KEY)"} {
		if _, err := writer.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}

	var restarts atomic.Int32
	wctx, stopWatchdog := context.WithCancel(ctx)
	watchdogDone := make(chan error, 1)
	go func() {
		watchdogDone <- func() error {
			for wctx.Err() == nil {
				st, err := op[0].Status(wctx)
				if err != nil {
					return err
				}
				if ss := st.SemiSync; ss.StalledDumps > 0 && ss.Clients == 0 {
					if err := op[0].RestartSemiSyncSource(wctx, false); err != nil {
						return err
					}
					restarts.Add(1)
				}
				time.Sleep(200 * time.Millisecond)
			}
			return nil
		}()
	}()

	var slowest time.Duration
	for round := range rounds {
		must(t, op[1].ConfigureReplication(ctx, src))
		must(t, op[1].ConfigureReplication(ctx, src))
		start := time.Now()
		if _, err := writer.ExecContext(ctx, fmt.Sprintf("INSERT INTO app.t VALUES (%d)", round)); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		slowest = max(slowest, took)
		if took >= timeout {
			t.Fatalf("round %d: the write waited %s, the whole semi-sync timeout: the replica never acknowledged it", round, took)
		}
		if err := op[1].WaitForGTID(ctx, status(ctx, t, op[0]).Executed, timeout); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	stopWatchdog()
	if err := <-watchdogDone; err != nil && ctx.Err() == nil && wctx.Err() == nil {
		t.Fatal(err)
	}
	var n int
	if err := plainOperatorConn(ctx, t, srv[1]).QueryRowContext(ctx, "SELECT COUNT(*) FROM app.t").Scan(&n); err != nil || n != rounds {
		t.Fatalf("replica has %d rows (%v), want %d", n, err, rounds)
	}
	t.Logf("%d rounds: slowest write %s, semi-sync source restarted %d time(s) to end a stall", rounds, slowest.Round(time.Millisecond), restarts.Load())
}
