package binlog

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestServerArchiverFollowsKilledSource kills the source (SIGKILL) under a writer and starts
// it again: the archiver records the failure, reconnects by itself and continues, and the
// archive holds every transaction of the source exactly once, with no gap — replayed onto a
// fresh server it gives the source's table.
func TestServerArchiverFollowsKilledSource(t *testing.T) {
	srvs := startServers(t, 2)
	src, target := srvs[0], srvs[1]
	createApp(src)
	store, _ := newStore(t)
	var ep atomic.Pointer[Endpoint]
	e := src.endpoint()
	ep.Store(&e)
	a, _ := runArchiver(t, ArchiverOptions{Store: store, SegmentMaxBytes: 16 << 10, SegmentMaxAge: 300 * time.Millisecond}, &ep)
	w := startWriter(t, src)
	waitFor(t, "archiving under the writer", func() (bool, string) {
		st := a.Status()
		return st.Segment >= 2 && w.count() >= 200, fmt.Sprintf("status %+v, %d rows", st, w.count())
	})

	killed := time.Now()
	src.inst.Kill(t)
	waitFor(t, "the archiver noticing", func() (bool, string) {
		st := a.Status()
		return !st.Connected && st.LastErrorTime.After(killed), fmt.Sprintf("status %+v", st)
	})
	t.Logf("archiver after the kill: %s", a.Status().LastError)
	before := w.count()
	restarting := time.Now() // the archiver may reconnect before Start returns
	src.inst.Start(t)
	src.exec("SET GLOBAL read_only = OFF")
	waitFor(t, "writes and archiving after the restart", func() (bool, string) {
		st := a.Status()
		return w.count() >= before+200 && st.Connected && st.ConnectedSince.After(restarting) && st.LastUpload.After(restarting),
			fmt.Sprintf("status %+v, %d rows (%d before the restart)", st, w.count(), before)
	})
	acks := w.halt()
	end := src.pos()
	waitArchived(t, a, end)

	l, txns := archivedTransactions(t, store, "")
	checkExactlyOnce(t, txns, end, src.inst.ServerID())
	for _, k := range acks {
		if !end.Contains(k.gtid) {
			t.Fatalf("acknowledged row %d (%s) is not in the source's position %q", k.id, k.gtid, end)
		}
	}
	t.Logf("%d segments, %d transactions, %d rows acknowledged, %d statements failed while the source was down",
		len(l.Segments), len(txns), len(acks), w.failed.Load())

	target.resetTo(Position{})
	if _, err := Replay(t.Context(), ReplayOptions{Store: store, MySQLArgs: target.mysqlArgs(), TmpDir: t.TempDir()}); err != nil {
		t.Fatalf("Replay: %v", err)
	}
	if a, b := target.checksum("app.w"), src.checksum("app.w"); a != b {
		t.Errorf("replayed app.w checksum %s, source %s", a, b)
	}
	if got, want := target.ids("app.w"), src.ids("app.w"); !slices.Equal(got, want) {
		t.Errorf("replayed %d rows, source has %d", len(got), len(want))
	}
}

// TestServerArchiverRefusesDivergedSource points the archiver at a server with another
// history in the same domain: it records ErrHistoryMismatch and keeps retrying, and writes
// nothing — no segment that does not continue the archived position. Pointed back at the
// original source, it continues without a gap.
func TestServerArchiverRefusesDivergedSource(t *testing.T) {
	srvs := startServers(t, 2)
	good, other := srvs[0], srvs[1]
	createApp(good)
	createApp(other)
	for range 10 {
		good.exec("INSERT INTO app.w (v, at) VALUES ('good', NOW(6))")
		other.exec("INSERT INTO app.w (v, at) VALUES ('other', NOW(6))")
	}
	for range 20 { // other's history is the longer one
		other.exec("INSERT INTO app.w (v, at) VALUES ('other', NOW(6))")
	}
	store, _ := newStore(t)
	var ep atomic.Pointer[Endpoint]
	e := good.endpoint()
	ep.Store(&e)
	a, _ := runArchiver(t, ArchiverOptions{Store: store, SegmentMaxAge: 300 * time.Millisecond}, &ep)
	waitArchived(t, a, good.pos())
	l0, _ := archivedTransactions(t, store, "")

	// Point Source at the other server and break the connection, as a failover would.
	switched := time.Now()
	o := other.endpoint()
	ep.Store(&o)
	good.exec(fmt.Sprintf("KILL %s", good.str("SELECT MAX(id) FROM information_schema.processlist WHERE user = '"+archUser+"'")))
	var first time.Time
	waitFor(t, "the refusal recorded", func() (bool, string) {
		st := a.Status()
		if strings.Contains(st.LastError, ErrHistoryMismatch.Error()) && st.LastErrorTime.After(switched) {
			first = st.LastErrorTime
			return true, ""
		}
		return false, fmt.Sprintf("status %+v", st)
	})
	t.Logf("archiver pointed at the other server: %s", a.Status().LastError)
	waitFor(t, "a retry", func() (bool, string) {
		st := a.Status()
		return st.LastErrorTime.After(first) && strings.Contains(st.LastError, ErrHistoryMismatch.Error()), fmt.Sprintf("status %+v", st)
	})
	l1, _ := archivedTransactions(t, store, "")
	if len(l1.Segments) != len(l0.Segments) || a.Status().Position != good.pos().String() {
		t.Fatalf("the archiver wrote while pointed at a diverged server: %d segments (had %d), position %q",
			len(l1.Segments), len(l0.Segments), a.Status().Position)
	}

	e = good.endpoint()
	ep.Store(&e)
	for range 10 {
		good.exec("INSERT INTO app.w (v, at) VALUES ('good again', NOW(6))")
	}
	end := good.pos()
	waitArchived(t, a, end)
	l, txns := archivedTransactions(t, store, "")
	checkExactlyOnce(t, txns, end, good.inst.ServerID())
	for _, m := range l.Segments {
		if m.Source.ServerID != good.inst.ServerID() {
			t.Errorf("segment %s was read from server %d", m.Name(), m.Source.ServerID)
		}
	}
}
