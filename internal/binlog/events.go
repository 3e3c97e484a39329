package binlog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// action is what one event of a binlog stream is to the archive.
type action int

const (
	// actIgnore: not part of any transaction and not needed to decode one (heartbeats,
	// Rotate, Gtid_list, Binlog_checkpoint, Stop): never written to a segment.
	actIgnore action = iota
	// actFormat: a Format_description event. The events after it are written in its format
	// (checksums included), so a segment holds exactly one, first.
	actFormat
	// actBegin: a GTID event, the first event of a transaction (splitter.gtid).
	actBegin
	// actPart: an event inside the transaction, neither its first nor its last.
	actPart
	// actEnd: the transaction's last event (Xid, COMMIT/ROLLBACK, XA PREPARE, or the one
	// statement of a standalone GTID group such as DDL).
	actEnd
)

// splitter finds transaction boundaries in a MariaDB binlog event stream. MariaDB writes
// every event group after a GTID event: a standalone group (DDL, flagged FL_STANDALONE) is
// the GTID and one statement; any other group ends with an Xid event, a COMMIT or ROLLBACK
// query (non-transactional engines) or an XA_PREPARE event.
type splitter struct {
	inTxn      bool
	standalone bool
	gtid       GTID
}

// classify returns what ev is, updating the splitter's state. Events that cannot occur where
// they are (a GTID inside a transaction, data outside one, a new format inside one) are
// errors: the stream is not what the archive can keep whole.
func (s *splitter) classify(ev *replication.BinlogEvent) (action, error) {
	t := ev.Header.EventType
	switch t {
	case replication.HEARTBEAT_EVENT:
		return actIgnore, nil
	case replication.FORMAT_DESCRIPTION_EVENT, replication.ROTATE_EVENT, replication.STOP_EVENT,
		replication.MARIADB_GTID_LIST_EVENT, replication.MARIADB_BINLOG_CHECKPOINT_EVENT:
		if s.inTxn {
			return 0, fmt.Errorf("%s event inside transaction %s: the stream broke a transaction", t, s.gtid)
		}
		if t == replication.FORMAT_DESCRIPTION_EVENT {
			return actFormat, nil
		}
		return actIgnore, nil
	case replication.MARIADB_GTID_EVENT:
		if s.inTxn {
			return 0, fmt.Errorf("GTID event inside transaction %s: the stream broke a transaction", s.gtid)
		}
		g, flags, err := gtidOf(ev)
		if err != nil {
			return 0, err
		}
		s.inTxn, s.standalone, s.gtid = true, flags&flStandalone != 0, g
		return actBegin, nil
	}
	if !s.inTxn {
		return 0, fmt.Errorf("%s event outside a GTID event group: the archive keeps only whole GTID transactions", t)
	}
	end := false
	switch t {
	case replication.XID_EVENT, replication.XA_PREPARE_LOG_EVENT:
		end = true
	case replication.QUERY_EVENT, replication.MARIADB_QUERY_COMPRESSED_EVENT:
		if s.standalone {
			end = true
		} else if q, ok := ev.Event.(*replication.QueryEvent); ok {
			stmt := strings.ToUpper(strings.TrimSpace(string(q.Query)))
			end = stmt == "COMMIT" || stmt == "ROLLBACK"
		}
	}
	if end {
		s.inTxn = false
		return actEnd, nil
	}
	return actPart, nil
}

// flStandalone marks a GTID event group without BEGIN/COMMIT: the GTID and one statement.
const flStandalone = 0x01

// gtidOf decodes a MariaDB GTID event from its raw bytes: after the 19-byte header, the
// sequence number (8 bytes), the domain (4) and the flags (1); the server id is the header's.
// go-mysql's decoded MariadbGTIDEvent is not used: the syncer keeps a pointer to its GTID
// in its own GTID set and changes it as later events arrive.
func gtidOf(ev *replication.BinlogEvent) (GTID, byte, error) {
	const header = replication.EventHeaderSize
	b := ev.RawData
	if len(b) < header+13 {
		return GTID{}, 0, fmt.Errorf("GTID event of %d bytes, too short", len(b))
	}
	body := b[header:]
	return GTID{
		Domain: binary.LittleEndian.Uint32(body[8:12]),
		Server: binary.LittleEndian.Uint32(b[5:9]),
		Seq:    binary.LittleEndian.Uint64(body[0:8]),
	}, body[12], nil
}

// eventTime is an event's timestamp: whole seconds, UTC.
func eventTime(ev *replication.BinlogEvent) time.Time {
	return time.Unix(int64(ev.Header.Timestamp), 0).UTC()
}

// noRows skips decoding row images: the archive keeps events as they are.
func noRows(*replication.RowsEvent, []byte) error { return nil }

// newParser returns a parser for MariaDB events that checks every event's CRC32 (when its
// format has checksums) and does not decode rows.
func newParser() *replication.BinlogParser {
	p := replication.NewBinlogParser()
	p.SetFlavor(mysql.MariaDBFlavor)
	p.SetVerifyChecksum(true)
	p.SetRowsEventDecodeFunc(noRows)
	p.SetTimestampStringLocation(time.UTC)
	return p
}

// txn is one transaction read back from a segment.
type txn struct {
	// GTID of the transaction.
	GTID GTID
	// Commit is the timestamp of its last event (whole seconds, UTC).
	Commit time.Time
}

// readTransactions decodes a segment's binlog file (magic, Format_description, whole
// transactions) and calls fn for each transaction in order. It fails on a damaged file: a
// bad magic or checksum, an event cut short, a transaction without its end.
func readTransactions(r io.Reader, fn func(txn) error) error {
	magic := make([]byte, len(replication.BinLogFileHeader))
	if _, err := io.ReadFull(r, magic); err != nil {
		return fmt.Errorf("reading the binlog magic: %w", err)
	}
	if !bytes.Equal(magic, replication.BinLogFileHeader) {
		return fmt.Errorf("not a binlog file: starts with %x, want %x", magic, replication.BinLogFileHeader)
	}
	p := newParser()
	var s splitter
	first := true
	err := p.ParseReader(r, func(ev *replication.BinlogEvent) error {
		a, err := s.classify(ev)
		if err != nil {
			return err
		}
		if first && a != actFormat {
			return fmt.Errorf("first event is %s, want a Format_description", ev.Header.EventType)
		}
		if !first && a == actFormat {
			return fmt.Errorf("a second Format_description event: a segment has one")
		}
		first = false
		if a == actEnd {
			return fn(txn{GTID: s.gtid, Commit: eventTime(ev)})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("decoding binlog events: %w", err)
	}
	if first {
		return fmt.Errorf("no Format_description event")
	}
	if s.inTxn {
		return fmt.Errorf("transaction %s has no end: the segment is cut short", s.gtid)
	}
	return nil
}
