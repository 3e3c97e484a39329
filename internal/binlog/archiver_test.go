package binlog

import (
	"context"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// Synthetic events for the stream's rules: only the header fields, the GTID event's raw body
// and the decoded Query/Format_description are looked at; other raw bytes are opaque.

var evTime = uint32(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Unix())

func ev(t replication.EventType, e replication.Event) *replication.BinlogEvent {
	raw := make([]byte, replication.EventHeaderSize+8)
	raw[4] = byte(t)
	binary.LittleEndian.PutUint32(raw[5:9], 1)
	return &replication.BinlogEvent{Header: &replication.EventHeader{EventType: t, ServerID: 1, Timestamp: evTime}, RawData: raw, Event: e}
}

func fdEv() *replication.BinlogEvent {
	return ev(replication.FORMAT_DESCRIPTION_EVENT, &replication.FormatDescriptionEvent{ServerVersion: "10.11.14-MariaDB"})
}

func gtidEv(g string, standalone bool) *replication.BinlogEvent {
	x, err := ParseGTID(g)
	if err != nil {
		panic(err)
	}
	raw := make([]byte, replication.EventHeaderSize+13+4)
	raw[4] = byte(replication.MARIADB_GTID_EVENT)
	binary.LittleEndian.PutUint32(raw[5:9], x.Server)
	body := raw[replication.EventHeaderSize:]
	binary.LittleEndian.PutUint64(body[0:8], x.Seq)
	binary.LittleEndian.PutUint32(body[8:12], x.Domain)
	if standalone {
		body[12] = flStandalone
	}
	return &replication.BinlogEvent{
		Header:  &replication.EventHeader{EventType: replication.MARIADB_GTID_EVENT, ServerID: x.Server, Timestamp: evTime},
		RawData: raw, Event: &replication.MariadbGTIDEvent{},
	}
}

func queryEv(q string) *replication.BinlogEvent {
	return ev(replication.QUERY_EVENT, &replication.QueryEvent{Query: []byte(q)})
}

func rowsEv() *replication.BinlogEvent {
	return ev(replication.WRITE_ROWS_EVENTv1, &replication.RowsEvent{})
}
func xidEv() *replication.BinlogEvent { return ev(replication.XID_EVENT, &replication.XIDEvent{}) }

// txnEvs is a row transaction: GTID, Table_map, rows, Xid.
func txnEvs(g string) []*replication.BinlogEvent {
	return []*replication.BinlogEvent{gtidEv(g, false), ev(replication.TABLE_MAP_EVENT, &replication.TableMapEvent{}), rowsEv(), xidEv()}
}

// newTestStream is a stream over a directory store, at position pos with the next segment
// numbered next, as after a connect.
func newTestStream(t *testing.T, pos string, next int64, maxBytes int64) (*stream, objectstore.Store) {
	t.Helper()
	store, _ := newStore(t)
	a, err := NewArchiver(ArchiverOptions{
		Source: func(context.Context) (Endpoint, error) { return Endpoint{}, nil }, Store: store, ServerID: 9,
		SegmentMaxBytes: maxBytes, SegmentMaxAge: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &stream{a: a, ep: Endpoint{Host: "h", Port: 3306}, st: archiveState{epoch: 1, next: next, pos: MustParse(pos)}}, store
}

func feed(t *testing.T, s *stream, evs ...*replication.BinlogEvent) {
	t.Helper()
	for _, e := range evs {
		if err := s.handle(t.Context(), e); err != nil {
			t.Fatalf("handle(%s): %v", e.Header.EventType, err)
		}
	}
}

func listing(t *testing.T, store objectstore.Store) *Listing {
	t.Helper()
	l, err := ListSegments(t.Context(), store, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	return l
}

func TestStreamCommitsWholeTransactionsOnly(t *testing.T) {
	s, store := newTestStream(t, "", 1, 0)
	feed(t, s, fdEv(), gtidEv("0-1-1", true), queryEv("CREATE DATABASE app"))
	feed(t, s, txnEvs("0-1-2")...)
	feed(t, s, gtidEv("0-1-3", false), queryEv("INSERT INTO t VALUES (1)"), queryEv("COMMIT"))
	if err := s.closeSegment(t.Context()); err != nil {
		t.Fatal(err)
	}
	// A transaction cut short (the connection broke): nothing of it is kept.
	feed(t, s, gtidEv("0-1-4", false), rowsEv())
	s.abort()
	l := listing(t, store)
	if len(l.Segments) != 1 {
		t.Fatalf("segments %+v", l.Segments)
	}
	m := l.Segments[0]
	if m.Start != "" || m.End != "0-1-3" || m.Transactions != 3 || m.Source.Host != "h" || m.Source.ServerVersion != "10.11.14-MariaDB" ||
		!m.FirstCommit.Equal(time.Unix(int64(evTime), 0)) {
		t.Errorf("manifest %+v", m)
	}
	objs, _ := store.List(t.Context(), "")
	if len(objs) != 2 {
		t.Errorf("store holds %v; want one segment and its manifest", objs)
	}
}

func TestStreamDropsArchivedTransactions(t *testing.T) {
	s, store := newTestStream(t, "0-1-5", 3, 0)
	feed(t, s, fdEv())
	feed(t, s, txnEvs("0-1-4")...)
	feed(t, s, txnEvs("0-1-5")...)
	feed(t, s, txnEvs("0-1-6")...)
	feed(t, s, txnEvs("0-1-6")...) // repeated by a reconnect
	feed(t, s, txnEvs("0-2-7")...) // another server continues the domain (a failover)
	if err := s.closeSegment(t.Context()); err != nil {
		t.Fatal(err)
	}
	m := listing(t, store).Segments[0]
	if m.Number != 3 || m.Start != "0-1-5" || m.End != "0-2-7" || m.Transactions != 2 || s.dropped != 3 {
		t.Errorf("manifest %s %q..%q with %d transactions, %d dropped", m.Name(), m.Start, m.End, m.Transactions, s.dropped)
	}
}

func TestStreamSegmentPerFormatAndSize(t *testing.T) {
	s, store := newTestStream(t, "0-1-1", 1, 0)
	feed(t, s, fdEv())
	feed(t, s, txnEvs("0-1-2")...)
	feed(t, s, fdEv()) // the source rotated its binary log
	feed(t, s, txnEvs("0-1-3")...)
	s.a.opts.SegmentMaxBytes = 1 // every transaction fills a segment
	feed(t, s, txnEvs("0-1-4")...)
	feed(t, s, txnEvs("0-1-5")...)
	l := listing(t, store)
	var got []string
	for _, m := range l.Segments {
		got = append(got, m.Start+".."+m.End)
	}
	if strings.Join(got, " ") != "0-1-1..0-1-2 0-1-2..0-1-4 0-1-4..0-1-5" {
		t.Errorf("segments %v", got)
	}
	if s.seg != nil {
		t.Errorf("a segment is still open")
	}
}

func TestStreamRefusesBrokenStreams(t *testing.T) {
	for _, tc := range []struct {
		name string
		evs  []*replication.BinlogEvent
		err  string
	}{
		{"rows outside a transaction", []*replication.BinlogEvent{fdEv(), rowsEv()}, "outside a GTID event group"},
		{"a GTID inside a transaction", []*replication.BinlogEvent{fdEv(), gtidEv("0-1-2", false), rowsEv(), gtidEv("0-1-3", false)}, "GTID event inside transaction 0-1-2"},
		{"a format inside a transaction", []*replication.BinlogEvent{fdEv(), gtidEv("0-1-2", false), fdEv()}, "inside transaction 0-1-2"},
		{"a transaction before any format", []*replication.BinlogEvent{gtidEv("0-1-2", false)}, "before any Format_description"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestStream(t, "0-1-1", 1, 0)
			var err error
			for _, e := range tc.evs {
				if err = s.handle(t.Context(), e); err != nil {
					break
				}
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %v, want %q", err, tc.err)
			}
			s.abort()
		})
	}
}

func TestStreamRefusesCommittedNumber(t *testing.T) {
	s, store := newTestStream(t, "0-1-1", 1, 0)
	feed(t, s, fdEv())
	feed(t, s, txnEvs("0-1-2")...)
	if err := s.closeSegment(t.Context()); err != nil {
		t.Fatal(err)
	}
	// A second archiver with a stale state, writing into the same prefix.
	s2 := &stream{a: s.a, st: archiveState{epoch: 1, next: 1, pos: MustParse("0-1-1")}}
	feed(t, s2, fdEv())
	err := s2.handle(t.Context(), gtidEv("0-1-2", false))
	if err == nil || !strings.Contains(err.Error(), "committed already") {
		t.Errorf("error %v, want a refusal to write segment 1 again", err)
	}
	if m := listing(t, store).Segments[0]; m.End != "0-1-2" {
		t.Errorf("segment 1 changed: %+v", m)
	}
}

func TestSplitterEnds(t *testing.T) {
	for _, tc := range []struct {
		name string
		evs  []*replication.BinlogEvent
		want []action
	}{
		{"xid", txnEvs("0-1-1"), []action{actBegin, actPart, actPart, actEnd}},
		{"commit query", []*replication.BinlogEvent{gtidEv("0-1-1", false), queryEv("INSERT"), queryEv(" commit ")}, []action{actBegin, actPart, actEnd}},
		{"rollback query", []*replication.BinlogEvent{gtidEv("0-1-1", false), queryEv("INSERT"), queryEv("ROLLBACK")}, []action{actBegin, actPart, actEnd}},
		{"standalone", []*replication.BinlogEvent{gtidEv("0-1-1", true), queryEv("CREATE TABLE t (a INT)")}, []action{actBegin, actEnd}},
		{"xa prepare", []*replication.BinlogEvent{gtidEv("0-1-1", false), rowsEv(), ev(replication.XA_PREPARE_LOG_EVENT, &replication.GenericEvent{})}, []action{actBegin, actPart, actEnd}},
		{"ignored", []*replication.BinlogEvent{ev(replication.HEARTBEAT_EVENT, nil), ev(replication.ROTATE_EVENT, nil), ev(replication.MARIADB_GTID_LIST_EVENT, nil), ev(replication.MARIADB_BINLOG_CHECKPOINT_EVENT, nil), fdEv()}, []action{actIgnore, actIgnore, actIgnore, actIgnore, actFormat}},
	} {
		var s splitter
		for i, e := range tc.evs {
			got, err := s.classify(e)
			if err != nil || got != tc.want[i] {
				t.Errorf("%s: event %d (%s): %v, %v; want %v", tc.name, i, e.Header.EventType, got, err, tc.want[i])
			}
		}
		if s.inTxn {
			t.Errorf("%s: still inside a transaction", tc.name)
		}
	}
}
