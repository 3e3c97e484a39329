package chaos

import (
	"context"
	"database/sql"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
)

// switchDialer is a primary Service whose endpoint the test moves: every new connection goes
// to the server at target.
var switchTarget atomic.Value

func init() {
	mysql.RegisterDialContext("chaosswitch", func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", switchTarget.Load().(string))
	})
}

// startTwoServers starts two independent servers (no replication between them) with the
// checker's schema on each.
func startTwoServers(t *testing.T) (*dbtest.Cluster, *sql.DB) {
	t.Helper()
	c := dbtest.Start(t, dbtest.Options{Instances: 2})
	for _, in := range c.Instances {
		db, err := sql.Open("mysql", in.RootDSN(""))
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range append([]string{"CREATE DATABASE chaos"}, Schema("chaos")...) {
			if _, err := db.Exec(q); err != nil {
				t.Fatal(err)
			}
		}
		db.Close()
	}
	switchTarget.Store(c.Instances[0].Addr())
	db, err := sql.Open("mysql", "root@chaosswitch(service)/?timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return c, db
}

// killClients ends every client session on a server, so that the checker's clients reconnect.
func killClients(t *testing.T, in *dbtest.Instance) {
	t.Helper()
	db, err := sql.Open("mysql", in.RootDSN(""))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query("SELECT ID FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND USER = 'root' AND COMMAND <> 'Daemon'")
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	for _, id := range ids {
		_, _ = db.Exec("KILL ?", id)
	}
}

func waitAcks(t *testing.T, c *Checker, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for len(c.Acks()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d writes acknowledged (last error %v)", len(c.Acks()), c.LastError())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A healthy server: everything acknowledged is there, no stale read, no split brain, and the
// outage of a "fault" that changed nothing is short.
func TestServerCheckerHealthy(t *testing.T) {
	cl, db := startTwoServers(t)
	c := Start(db, Options{})
	waitAcks(t, c, 100)
	fault := time.Now()
	c.Mark("kill-sessions", fault)
	killClients(t, cl.Instances[0]) // every client reconnects to the same server
	waitAcks(t, c, len(c.Acks())+100)
	outage := c.Outage(fault, time.Now())
	final, _ := sql.Open("mysql", cl.Instances[0].RootDSN(""))
	defer final.Close()
	v, err := c.Finish(context.Background(), final)
	if err != nil {
		t.Fatal(err)
	}
	writes, reads, incs := c.Counts()
	if len(v.Lost) != 0 || len(v.StaleReads) != 0 || len(v.SplitBrain) != 0 || reads == 0 || incs == 0 {
		t.Fatalf("verdict %+v, reads %d, increments %d", v, reads, incs)
	}
	if outage > time.Second {
		t.Errorf("outage of a session kill %s", outage)
	}
	t.Logf("%d writes, %d reads, %d increments; outage of a session kill %s", writes, reads, incs, outage.Round(time.Millisecond))
}

// The checker must see what it is there to see: the Service moved to a server that never had
// the acknowledged writes (lost writes, stale reads), and moved back and forth within one
// window (split brain).
func TestServerCheckerDetectsLossStaleReadsAndSplitBrain(t *testing.T) {
	cl, db := startTwoServers(t)
	a, b := cl.Instances[0], cl.Instances[1]
	c := Start(db, Options{})
	waitAcks(t, c, 100)
	c.Mark("failover", time.Now())
	switchTarget.Store(b.Addr()) // a "failover" to a server without A's writes
	killClients(t, a)
	waitAcks(t, c, len(c.Acks())+100)
	switchTarget.Store(a.Addr()) // and back, within the same window: both accepted writes
	killClients(t, b)
	waitAcks(t, c, len(c.Acks())+100)
	final, _ := sql.Open("mysql", b.RootDSN(""))
	defer final.Close()
	v, err := c.Finish(context.Background(), final)
	if err != nil {
		t.Fatal(err)
	}
	if v.Lost["failover"] == 0 || v.Lost[""] == 0 {
		t.Errorf("lost writes %v: want some before the fault (B never had A's) and after it (A's again)", v.Lost)
	}
	if v.StaleReads["failover"] == 0 {
		t.Errorf("stale reads %v: want some after the fault (B's counter was behind A's)", v.StaleReads)
	}
	if v.SplitBrain["failover"] != 1 || len(v.SplitBrain) != 1 {
		t.Errorf("split brain %v, want failover: 1 (A, then B, then A again after one fault)", v.SplitBrain)
	}
	// Every lost write was acknowledged by A (B is the final server), and the runs account
	// for every lost write.
	var aID uint32
	adb, _ := sql.Open("mysql", a.RootDSN(""))
	defer adb.Close()
	if err := adb.QueryRow("SELECT @@server_id").Scan(&aID); err != nil {
		t.Fatal(err)
	}
	lost, inRuns := 0, 0
	for _, n := range v.Lost {
		lost += n
	}
	for _, r := range v.LostRuns {
		inRuns += r.Lost
		if r.ServerID != aID || r.Lost > int(r.LastSeq-r.FirstSeq+1) || r.FirstAck.After(r.LastAck) {
			t.Errorf("lost run %s: want writes acknowledged by A (server %d)", r, aID)
		}
	}
	if inRuns != lost {
		t.Errorf("the lost runs hold %d writes, the verdict counts %d", inRuns, lost)
	}
	t.Logf("verdict %+v", v)
}
