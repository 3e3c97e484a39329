package binlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// replicate makes replica follow source with GTID from its current position.
func replicate(t *testing.T, replica, source *server) {
	t.Helper()
	replica.exec(fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='%s', MASTER_PORT=%d, MASTER_USER='%s', MASTER_PASSWORD='%s', MASTER_USE_GTID=slave_pos",
		source.inst.Host, source.inst.Port, archUser, strings.ReplaceAll(archPassword, "'", "''")), "START SLAVE")
	want := source.pos()
	waitFor(t, replica.inst.Name+" caught up", func() (bool, string) {
		got := replica.pos()
		return got.Covers(want), fmt.Sprintf("at %s, want %s", got, want)
	})
}

func keyedRows(s *server, from, to int, v string) {
	for id := from; id <= to; id++ {
		s.exec(fmt.Sprintf("INSERT INTO app.k (id, v) VALUES (%d, '%s')", id, v))
	}
}

// TestServerKeepAndReplayDivergedPrimary: the sequence that lost acknowledged writes before
// issue 30 — a primary commits writes no replica received, the replica is promoted and
// writes on, the old primary is to be re-cloned. Keep copies exactly the old primary's
// writes the new one lacks from the old primary's binary log files; ReplayKept puts them on
// the new primary as its own transactions, replicated like any write; a copy that conflicts
// with what the new primary wrote stops at the conflict and says what was applied.
func TestServerKeepAndReplayDivergedPrimary(t *testing.T) {
	srvs := startServers(t, 3)
	oldP, newP, other := srvs[0], srvs[1], srvs[2]
	oldP.exec("CREATE DATABASE app", "CREATE TABLE app.k (id BIGINT PRIMARY KEY, v VARCHAR(64) NOT NULL)")
	replicate(t, newP, oldP)
	replicate(t, other, newP)
	keyedRows(oldP, 1, 20, "both")
	waitFor(t, "the replicas hold the common history", func() (bool, string) {
		return other.pos().Covers(oldP.pos()), other.pos().String()
	})
	common := oldP.pos()

	// The replica is cut off; the old primary acknowledges 10 writes alone (one of them
	// conflicts with a row the new primary will write).
	newP.exec("STOP SLAVE")
	keyedRows(oldP, 1001, 1009, "old primary alone")
	keyedRows(oldP, 2005, 2005, "old primary alone, conflicting")
	diverged := oldP.pos()
	newP.exec("RESET SLAVE ALL")
	keyedRows(newP, 2001, 2010, "new primary")

	store, _ := newStore(t)
	state, err := ParseServerState(newP.str("SELECT @@gtid_binlog_state"))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := Keep(ctx30(t), KeepOptions{
		BinlogIndex: filepath.Join(oldP.inst.DataDir, "binlog.index"), Primary: state,
		Store: store, Prefix: "kept/", Name: "db-0-x", Instance: "db-0", PrimaryName: "db-1", Reason: "test",
	})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := common.Last(0)
	d, _ := diverged.Last(0)
	wantGTIDs := fmt.Sprintf("0-%d-%d..%d", oldP.inst.ServerID(), c.Seq+1, d.Seq)
	if cp.Transactions != 10 || cp.GTIDs != wantGTIDs || cp.ServerID != oldP.inst.ServerID() {
		t.Fatalf("kept %d transactions %s from server %d, want 10: %s from %d", cp.Transactions, cp.GTIDs, cp.ServerID, wantGTIDs, oldP.inst.ServerID())
	}
	t.Logf("kept %s (%d raw bytes) beyond the new primary's state %s", cp.GTIDs, cp.RawBytes, cp.PrimaryState)
	// The same files with the last transaction cut short, as a crash mid-write leaves them:
	// while the server may run that is a file being written; stopped, the cut transaction was
	// never committed and the other nine are kept.
	torn := t.TempDir()
	files, err := readIndex(filepath.Join(oldP.inst.DataDir, "binlog.index"))
	if err != nil {
		t.Fatal(err)
	}
	var index []string
	for i, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if i == len(files)-1 {
			b = b[:len(b)-10] // into the last transaction's Xid event
		}
		to := filepath.Join(torn, filepath.Base(f))
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatal(err)
		}
		index = append(index, to)
	}
	if err := os.WriteFile(filepath.Join(torn, "binlog.index"), []byte(strings.Join(index, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tornOpts := KeepOptions{BinlogIndex: filepath.Join(torn, "binlog.index"), Primary: state, Store: store, Prefix: "torn/", Name: "t"}
	if _, err := Keep(ctx30(t), tornOpts); !errors.Is(err, ErrBinlogBeingWritten) {
		t.Fatalf("a torn tail while the server may run: %v, want %v", err, ErrBinlogBeingWritten)
	}
	tornOpts.ServerStopped = true
	if tc, err := Keep(ctx30(t), tornOpts); err != nil || tc.Transactions != 9 || tc.GTIDs != fmt.Sprintf("0-%d-%d..%d", oldP.inst.ServerID(), c.Seq+1, d.Seq-1) {
		t.Fatalf("a torn tail of a stopped server: %+v, %v; want the nine committed transactions", tc, err)
	}

	list, err := ListKept(ctx30(t), store, "kept/")
	if err != nil || len(list) != 1 || list[0].Name != "db-0-x" {
		t.Fatalf("ListKept: %v, %+v", err, list)
	}

	// Replay: the tenth transaction's id exists on the new primary: nine are applied, the
	// error says so.
	opts := KeptReplayOptions{Store: store, Prefix: "kept/", Name: "db-0-x", MySQLArgs: newP.mysqlArgs(), TmpDir: t.TempDir()}
	res, err := ReplayKept(ctx30(t), opts)
	if err == nil || !strings.Contains(err.Error(), "Duplicate entry '2005'") || !strings.Contains(err.Error(), "are committed") {
		t.Fatalf("a conflicting replay: %v, want a duplicate-key error saying what is committed", err)
	}
	t.Logf("conflicting replay: %v", err)
	if got := newP.idList("SELECT id FROM app.k WHERE v = 'old primary alone' ORDER BY id"); !slices.Equal(got, []int64{1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008, 1009}) {
		t.Fatalf("after the stopped replay the new primary holds %v of the old primary's rows", got)
	}
	if res == nil || res.Before == res.After {
		t.Fatalf("result %+v: want the positions before and after", res)
	}

	// The person resolves the conflict (here: the new primary's row goes) and replays the
	// rest: the transactions after the last one applied.
	newP.exec("DELETE FROM app.k WHERE id = 2005")
	if want := fmt.Sprintf("0-%d-%d", oldP.inst.ServerID(), d.Seq); res.FailedAt != want || !strings.Contains(err.Error(), fmt.Sprintf("--after 0-%d-%d", oldP.inst.ServerID(), d.Seq-1)) {
		t.Fatalf("the stopped replay names %q as failed (want %s) and says %v", res.FailedAt, want, err)
	}
	opts.After = fmt.Sprintf("0-%d-%d", oldP.inst.ServerID(), d.Seq-1)
	res, err = ReplayKept(ctx30(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	after, _ := Parse(res.After)
	last, _ := after.Last(0)
	if last.Server != newP.inst.ServerID() {
		t.Fatalf("replayed transactions took GTID %s: want the new primary's server id %d", last, newP.inst.ServerID())
	}
	waitFor(t, "the replica of the new primary holds the replayed rows", func() (bool, string) {
		return other.pos().Covers(after), other.pos().String()
	})
	for _, s := range []*server{newP, other} {
		got := s.idList("SELECT id FROM app.k WHERE v LIKE 'old primary alone%' ORDER BY id")
		if !slices.Equal(got, []int64{1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008, 1009, 2005}) {
			t.Fatalf("%s holds %v of the old primary's acknowledged rows", s.inst.Name, got)
		}
	}
	if n := newP.str("SELECT COUNT(*) FROM app.k"); n != "39" {
		t.Fatalf("the new primary has %s rows, want 20 common + 10 kept + 9 of its own", n)
	}
}

// TestServerKeepRefusesPurgedBinlogs: when the old primary's binary logs that held
// transactions the new primary lacks are purged, Keep writes nothing and says so.
func TestServerKeepRefusesPurgedBinlogs(t *testing.T) {
	srvs := startServers(t, 2)
	oldP, newP := srvs[0], srvs[1]
	oldP.exec("CREATE DATABASE app", "CREATE TABLE app.k (id BIGINT PRIMARY KEY, v VARCHAR(64) NOT NULL)")
	replicate(t, newP, oldP)
	newP.exec("STOP SLAVE", "RESET SLAVE ALL")
	keyedRows(oldP, 1, 3, "alone")
	oldP.exec("FLUSH BINARY LOGS")
	keyedRows(oldP, 4, 5, "alone")
	// A purge skips a file a dump thread still reads: the stopped replica's may linger.
	waitFor(t, "the older binary log purged", func() (bool, string) {
		oldP.exec("PURGE BINARY LOGS BEFORE NOW() + INTERVAL 1 DAY")
		n := oldP.str("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
		files, err := readIndex(filepath.Join(oldP.inst.DataDir, "binlog.index"))
		return err == nil && len(files) == 1, fmt.Sprintf("%d files listed (%v), %s dump threads", len(files), err, n)
	})
	store, dir := newStore(t)
	state, err := ParseServerState(newP.str("SELECT @@gtid_binlog_state"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Keep(ctx30(t), KeepOptions{BinlogIndex: filepath.Join(oldP.inst.DataDir, "binlog.index"), Primary: state,
		Store: store, Name: "x", Now: time.Now()})
	if err == nil || !strings.Contains(err.Error(), ErrBinlogsPurged.Error()) {
		t.Fatalf("Keep over purged binary logs: %v, want %v", err, ErrBinlogsPurged)
	}
	t.Logf("refused: %v", err)
	if l, _ := ListKept(ctx30(t), store, ""); len(l) != 0 {
		t.Fatalf("a copy was written: %+v in %s", l, dir)
	}
}
