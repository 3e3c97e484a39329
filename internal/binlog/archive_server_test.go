package binlog

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestServerArchiveWhileWriting archives a server while a writer commits one row per
// transaction, with a DDL, a transaction larger than a segment and a binlog rotation in the
// middle; the archiver is stopped half-way and a new one continues. The union of the segments
// is every transaction exactly once, in order and contiguous, and each segment is a valid
// binlog file matching its manifest.
func TestServerArchiveWhileWriting(t *testing.T) {
	src := startServers(t, 1)[0]
	began := time.Now().UTC().Truncate(time.Second)
	createApp(src)
	store, _ := newStore(t)
	var ep atomic.Pointer[Endpoint]
	e := src.endpoint()
	ep.Store(&e)
	opts := ArchiverOptions{Store: store, Prefix: "c1/binlog", SegmentMaxBytes: 32 << 10, SegmentMaxAge: 500 * time.Millisecond}

	w := startWriter(t, src)
	a1, stop1 := runArchiver(t, opts, &ep)
	waitFor(t, "three segments from the first archiver", func() (bool, string) {
		st := a1.Status()
		return st.Segment >= 3 && w.count() >= 300, fmt.Sprintf("status %+v, %d rows", st, w.count())
	})

	// A DDL (a standalone GTID group) and a transaction larger than SegmentMaxBytes.
	src.exec("CREATE TABLE app.big (id INT PRIMARY KEY, v VARCHAR(250) NOT NULL)",
		"INSERT INTO app.big SELECT seq, REPEAT(CHAR(65 + seq % 26), 250) FROM app.seq_1_to_2000")
	// A rotation: a new Format_description, so a segment starts exactly there.
	resume := w.pause()
	atFlush := src.pos()
	src.exec("FLUSH BINARY LOGS")
	resume()
	waitFor(t, "archived past the rotation", func() (bool, string) {
		p, _ := Parse(a1.Status().Position)
		return p.Covers(atFlush) && !p.Equal(atFlush), fmt.Sprintf("status %+v, rotated at %q", a1.Status(), atFlush)
	})

	stop1()
	stopped := a1.Status()
	t.Logf("first archiver stopped at %s (segment %d), writer at %d rows", stopped.Position, stopped.Segment, w.count())
	a2, _ := runArchiver(t, opts, &ep)
	waitFor(t, "three more segments from the second archiver", func() (bool, string) {
		st := a2.Status()
		return st.Segment >= stopped.Segment+3, fmt.Sprintf("status %+v", st)
	})
	acks := w.halt()
	end := src.pos()
	waitArchived(t, a2, end)

	l, txns := archivedTransactions(t, store, "c1/binlog")
	checkExactlyOnce(t, txns, end, src.inst.ServerID())
	for _, k := range acks {
		if !end.Contains(k.gtid) {
			t.Fatalf("acknowledged row %d (%s) is not in the source's position %q", k.id, k.gtid, end)
		}
	}
	if got := l.Last().End; got != end.String() {
		t.Errorf("the archive ends at %q, the source at %q", got, end)
	}
	var sawBig, sawFlush bool
	var total int64
	now := time.Now().UTC()
	for i, m := range l.Segments {
		total += m.Transactions
		if m.Epoch != 1 || m.Number != int64(i+1) {
			t.Errorf("segment %d is %s", i, m.Name())
		}
		if m.FirstCommit.Before(began) || m.LastCommit.After(now) || m.MaxCommit.Before(m.LastCommit) || m.FirstCommit.After(m.MaxCommit) {
			t.Errorf("segment %s commit times %v, %v, max %v (test ran %v to %v)", m.Name(), m.FirstCommit, m.LastCommit, m.MaxCommit, began, now)
		}
		if m.Source.Host != src.inst.Host || m.Source.ServerID != src.inst.ServerID() || !strings.Contains(m.Source.ServerVersion, "MariaDB") {
			t.Errorf("segment %s source %+v", m.Name(), m.Source)
		}
		if m.StoredBytes >= m.RawBytes || !strings.HasPrefix(m.ArchiverVersion, "dolphin ") {
			t.Errorf("segment %s: raw %d, stored %d, archiver %q", m.Name(), m.RawBytes, m.StoredBytes, m.ArchiverVersion)
		}
		sawBig = sawBig || m.RawBytes > 2000*250
		sawFlush = sawFlush || m.Start == atFlush.String()
	}
	if total != int64(len(txns)) {
		t.Errorf("manifests count %d transactions, the segments hold %d", total, len(txns))
	}
	if !sawBig {
		t.Error("no segment holds the 500 kB transaction whole")
	}
	if !sawFlush {
		t.Errorf("no segment starts at the rotation's position %q", atFlush)
	}
	t.Logf("%d segments, %d transactions, %d rows acknowledged, %d failed statements", len(l.Segments), len(txns), len(acks), w.failed.Load())
}

// TestServerSegmentClosedWhenIdle writes one transaction and nothing after it: the segment
// holding it is still committed, within about SegmentMaxAge.
func TestServerSegmentClosedWhenIdle(t *testing.T) {
	src := startServers(t, 1)[0]
	store, _ := newStore(t)
	var ep atomic.Pointer[Endpoint]
	e := src.endpoint()
	ep.Store(&e)
	a, _ := runArchiver(t, ArchiverOptions{Store: store, SegmentMaxAge: time.Second}, &ep)
	waitFor(t, "connected", func() (bool, string) { return a.Status().Connected, fmt.Sprintf("%+v", a.Status()) })

	src.exec("CREATE DATABASE app")
	wrote := time.Now()
	want := src.pos()
	waitFor(t, "the segment committed", func() (bool, string) {
		l, err := ListSegments(t.Context(), store, "")
		if err != nil {
			t.Fatal(err)
		}
		return len(l.Segments) == 1, fmt.Sprintf("%d segments, status %+v", len(l.Segments), a.Status())
	})
	took := time.Since(wrote)
	t.Logf("segment committed %v after the write (SegmentMaxAge 1s)", took.Round(time.Millisecond))
	if took > 15*time.Second {
		t.Errorf("the idle segment took %v to be committed, want about SegmentMaxAge", took)
	}
	l, txns := archivedTransactions(t, store, "")
	if len(txns) != 1 || l.Segments[0].End != want.String() || l.Segments[0].Start != "" {
		t.Errorf("segments %+v, transactions %+v, want one, ending at %q", l.Segments[0], txns, want)
	}
	// The manifest is visible in the store a moment before the archiver records the commit in
	// its status, so the status is waited for rather than read once.
	waitFor(t, "the status to report the committed segment", func() (bool, string) {
		st := a.Status()
		return st.Position == want.String() && !st.LastUpload.IsZero() && !st.LastCommit.IsZero(), fmt.Sprintf("%+v", st)
	})
}
