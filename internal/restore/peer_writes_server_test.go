package restore

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestServerCloneUnderWrites clones a replica while the primary commits one row per
// transaction as fast as it can, and checks that the clone holds exactly what its GTID
// position says — as many rows as transactions up to it — and that replication from there
// neither repeats nor skips one. mariadb-backup's recorded position can be one transaction
// behind the data on a replica under writes (see dataPosition); before the fix-up read the
// data's mysql.gtid_slave_pos this failed about once in three runs on a loaded machine.
func TestServerCloneUnderWrites(t *testing.T) {
	pc := startPeers(t)
	pc.serveAgent(t, streamClone(pc.replica))
	p := openDB(t, tcpDSN(pc.primary, "root", ""))
	execAll(t, p, "CREATE TABLE app.w (id BIGINT AUTO_INCREMENT PRIMARY KEY, at DATETIME(6) NOT NULL)")
	waitReplicated(t, pc.primary, pc.replica, "")
	base := domainSeq(t, str(t, p, "SELECT @@gtid_binlog_pos"), 0)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writes atomic.Int64
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := p.Exec("INSERT INTO app.w (at) VALUES (NOW(6))"); err != nil {
				t.Errorf("writer: %v", err)
				return
			}
			writes.Add(1)
		}
	})
	time.Sleep(200 * time.Millisecond)
	inst := target(t)
	res, err := FromPeer(t.Context(), pc.peerOptions(t, inst))
	time.Sleep(100 * time.Millisecond) // writes after the clone's position, whatever the timing
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("FromPeer: %v", err)
	}
	total := writes.Load()
	inClone := int64(domainSeq(t, res.GTIDPosition, 0) - base)
	t.Logf("%d writes, %d of them up to the clone's position %s", total, inClone, res.GTIDPosition)
	if inClone <= 0 || inClone >= total {
		t.Errorf("the clone's position %s is not inside the writes (%d after seq %d)", res.GTIDPosition, total, base)
	}

	inst.StartAs(t, "root", newRootPw)
	root := openDB(t, socketDSN(inst, "root", newRootPw))
	if n := count(t, root, "app.w"); int64(n) != inClone {
		t.Errorf("the clone's app.w has %d rows, its position %s says %d", n, res.GTIDPosition, inClone)
	}
	for _, v := range []string{"gtid_binlog_pos", "gtid_slave_pos"} {
		if got := str(t, root, "SELECT @@"+v); !SameGTIDPosition(got, res.GTIDPosition) {
			t.Errorf("the clone's @@%s is %q, its position %q", v, got, res.GTIDPosition)
		}
	}
	execAll(t, root, fmt.Sprintf("CHANGE MASTER TO MASTER_HOST = '%s', MASTER_PORT = %d, MASTER_USER = 'root', MASTER_USE_GTID = slave_pos",
		pc.primary.Host, pc.primary.Port), "START SLAVE")
	waitReplicated(t, pc.primary, inst, newRootPw)
	if n := count(t, root, "app.w"); int64(n) != total {
		t.Errorf("after replication the clone's app.w has %d rows, the primary committed %d", n, total)
	}
	if got, want := checksum(t, root, "app.w"), checksum(t, p, "app.w"); got != want {
		t.Errorf("after replication app.w's checksum is %s, the primary's %s", got, want)
	}
}

// domainSeq returns the sequence number of domain d in a GTID position.
func domainSeq(t *testing.T, pos string, d uint64) uint64 {
	t.Helper()
	for _, g := range gtidSet(pos) {
		p := strings.Split(g, "-")
		if len(p) == 3 && p[0] == strconv.FormatUint(d, 10) {
			n, err := strconv.ParseUint(p[2], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no domain %d in %q", d, pos)
	return 0
}
