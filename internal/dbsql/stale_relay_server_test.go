package dbsql

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestServerStaleRelayLogInfo: a replica killed while its applier moves between relay logs
// can restart with relay-log.info naming a relay log it had already purged (the file is
// written from a buffer in the server's memory; seen on a replica crash-stopped under
// writes, docs/design/0038). START SLAVE then fails with error 1201 ("Could not initialize
// master info structure") every time. Dolphin replicates by GTID, so the relay logs hold
// nothing it needs: StartReplication recovers by discarding them and starts again from
// gtid_slave_pos, with the same source, and the replica catches up.
func TestServerStaleRelayLogInfo(t *testing.T) {
	dbtest.RequireMariaDB(t)
	c := dbtest.Start(t, dbtest.Options{Instances: 2})
	ctx := t.Context()
	srv := c.Instances
	op := accountsAsRoot(ctx, t, srv)
	src := semiSyncPair(ctx, t, op, srv)
	must(t, op[1].ConfigureReplication(ctx, src))
	semiSyncConnected(ctx, t, op[0], srv[0].Name)
	root := plainOperatorConn(ctx, t, srv[0])
	mustExec := func(q string) {
		t.Helper()
		if _, err := root.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	mustExec("CREATE DATABASE stale")
	mustExec("CREATE TABLE stale.t (id INT PRIMARY KEY)")
	mustExec("INSERT INTO stale.t VALUES (1)")
	testenv.Eventually(t, 10*time.Second, "the replica applied the first row", func() error {
		return appliedAll(ctx, t, op)
	})

	// staleRelayLogInfo restarts the replica with its relay log info naming a purged relay
	// log, and writes a row it has not received.
	row := 1
	staleRelayLogInfo := func() {
		t.Helper()
		must(t, op[1].Close())
		srv[1].Stop(t)
		info := filepath.Join(srv[1].DataDir, "relay-log.info")
		b, err := os.ReadFile(info)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		replaced := false
		for i, l := range lines {
			if strings.Contains(l, "relay-bin.0") {
				lines[i], replaced = "./relay-bin.000099", true // purged long ago
				break
			}
		}
		if !replaced {
			t.Fatalf("no relay log named in relay-log.info: %q", b)
		}
		if err := os.WriteFile(info, []byte(strings.Join(lines, "\n")), 0o640); err != nil {
			t.Fatal(err)
		}
		srv[1].StartAs(t, testAccounts.Operator.User, testAccounts.Operator.Password, "--init-rpl-role=SLAVE")
		row++
		mustExec(fmt.Sprintf("INSERT INTO stale.t VALUES (%d)", row))
		op[1] = openOperator(t, srv[1])
	}
	replicatesAgain := func(how string) {
		t.Helper()
		testenv.Eventually(t, 10*time.Second, how+": the replica replicates again from its source and applied every row", func() error {
			st := status(ctx, t, op[1])
			if st.Replica == nil || !st.Replica.IORunning || !st.Replica.SQLRunning ||
				st.Replica.SourceHost != src.Host || st.Replica.SourcePort != src.Port {
				return fmt.Errorf("replica status %+v", st.Replica)
			}
			return appliedAll(ctx, t, op)
		})
	}
	mustExec("SET GLOBAL rpl_semi_sync_master_enabled = OFF") // no acknowledgement to wait for

	staleRelayLogInfo()
	must(t, op[1].StartReplication(ctx))
	replicatesAgain("StartReplication")

	staleRelayLogInfo()
	must(t, op[1].ConfigureReplication(ctx, src))
	replicatesAgain("ConfigureReplication")
}

// appliedAll is nil once op[1] executed everything op[0] did.
func appliedAll(ctx context.Context, t *testing.T, op []Instance) error {
	src, rep := status(ctx, t, op[0]).Executed, status(ctx, t, op[1]).Executed
	if rep == nil || !rep.Contains(src) {
		return fmt.Errorf("replica at %v, source at %v", rep, src)
	}
	return nil
}
