package dbsql

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
)

// TestServerRestartSemiSyncSourceDisconnectsWaitingCommits: a commit waits for an acknowledgement no
// replica can give (its receiver is stopped; the timeout is never, as with spec.durability
// Required). Restarting the source side with disconnectWaiting closes that client's connection
// — it gets an error, never "committed"; without it, MariaDB tells the client the commit
// succeeded although no replica has it (what Preferred durability accepts, and why Required
// must disconnect first).
func TestServerRestartSemiSyncSourceDisconnectsWaitingCommits(t *testing.T) {
	dbtest.RequireMariaDB(t)
	c := dbtest.Start(t, dbtest.Options{Instances: 2})
	ctx := t.Context()
	srv := c.Instances
	// Root's connections before Dolphin's accounts lock root out of TCP logins.
	admin := rootConn(ctx, t, srv[0])
	clients := []*sql.Conn{rootConn(ctx, t, srv[0]), rootConn(ctx, t, srv[0])}
	op := accountsAsRoot(ctx, t, srv)
	src := semiSyncPair(ctx, t, op, srv)
	must(t, op[1].ConfigureReplication(ctx, src))
	semiSyncConnected(ctx, t, op[0], srv[0].Name)
	for _, q := range []string{"CREATE DATABASE app", "CREATE TABLE app.t (id INT PRIMARY KEY)"} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	must(t, op[0].SetSemiSyncTimeout(ctx, 4294967295))
	must(t, op[1].StopReplicationIO(ctx))

	for _, tc := range []struct {
		id         int
		disconnect bool
	}{{1, true}, {2, false}} {
		client := clients[tc.id-1]
		done := make(chan error, 1)
		go func() {
			_, err := client.ExecContext(context.Background(), "INSERT INTO app.t VALUES (?)", tc.id)
			done <- err
		}()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			var n int
			if err := admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE LIKE 'Waiting for semi-sync ACK from %'").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the insert does not wait for an acknowledgement")
			}
		}
		must(t, op[0].RestartSemiSyncSource(ctx, tc.disconnect))
		select {
		case err := <-done:
			switch {
			case tc.disconnect && err == nil:
				t.Fatal("disconnectWaiting: the waiting client was told its commit succeeded")
			case !tc.disconnect && err != nil:
				t.Fatalf("without disconnectWaiting the client got %v; MariaDB used to answer \"committed\" (update the comment of RestartSemiSyncSource)", err)
			}
			t.Logf("disconnectWaiting=%v: the waiting client got %v", tc.disconnect, err)
		case <-time.After(20 * time.Second):
			t.Fatalf("disconnectWaiting=%v: the waiting client got no answer", tc.disconnect)
		}
	}
}
