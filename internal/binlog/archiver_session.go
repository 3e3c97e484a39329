package binlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// stream is one connection's worth of archiving: the archive's state, the transaction being
// read and the segment being written.
type stream struct {
	a     *Archiver
	log   logr.Logger
	ep    Endpoint
	addr  string
	st    archiveState // what is committed
	split splitter

	fd     []byte // the Format_description event the next segment starts with
	source Source

	seg      *openSegment
	skipping bool  // the transaction being read is archived already
	dropped  int64 // transactions dropped as archived already
	txns     int64 // transactions received on this connection
}

// openSegment is a segment being written.
type openSegment struct {
	w          *segmentWriter
	number     int64
	start, pos Position
	opened     time.Time // when its first transaction arrived
	txns       int64
	first      time.Time
	last       time.Time
	max        time.Time
	source     Source
}

// session loads the archive's state, connects to the source and archives until an error
// (or ctx ends). progressed reports whether the connection was useful (it carried a
// transaction, or lasted a while), so that the next reconnect starts with a short backoff.
func (a *Archiver) session(ctx context.Context, log logr.Logger) (progressed bool, err error) {
	began := time.Now()
	s := &stream{a: a, log: log}
	defer func() {
		s.abort()
		progressed = s.txns > 0 || time.Since(began) > 2*maxBackoff
	}()
	st, err := loadState(ctx, a.opts.Store, a.opts.Prefix, a.opts.Start)
	if err != nil {
		return false, err
	}
	s.st = st
	a.setStatus(func(x *Status) {
		x.Position, x.Epoch, x.Segment = st.pos.String(), st.epoch, st.next-1
		if st.last != nil && x.LastCommit.IsZero() {
			x.LastCommit = st.last.LastCommit
		}
	})
	if s.ep, err = a.opts.Source(ctx); err != nil {
		return false, fmt.Errorf("finding the server to archive from: %w", err)
	}
	s.addr = net.JoinHostPort(s.ep.Host, strconv.Itoa(s.ep.Port))
	if s.ep.Port <= 0 || s.ep.Port > 65535 {
		return false, fmt.Errorf("source %s: port %d is not a TCP port", s.addr, s.ep.Port)
	}
	syncer := replication.NewBinlogSyncer(a.syncerConfig(s.ep, log))
	defer a.closeSyncer(syncer)
	gset, err := mysql.ParseMariadbGTIDSet(st.pos.String())
	if err != nil {
		return false, fmt.Errorf("GTID position %q: %w", st.pos, err)
	}
	streamer, err := syncer.StartSyncGTID(gset)
	if err != nil {
		return false, fmt.Errorf("starting a binlog stream from %s after %q: %w", s.addr, st.pos, classify(err))
	}
	log.Info("streaming the binlog", "source", s.addr, "after", st.pos.String(), "segment", segmentName(st.epoch, st.next))
	connected := false
	for {
		if s.seg != nil && !s.split.inTxn && !time.Now().Before(s.seg.opened.Add(a.opts.SegmentMaxAge)) {
			if err := s.closeSegment(ctx); err != nil {
				return false, err
			}
		}
		wctx, cancel := ctx, context.CancelFunc(func() {})
		if s.seg != nil && !s.split.inTxn {
			wctx, cancel = context.WithDeadline(ctx, s.seg.opened.Add(a.opts.SegmentMaxAge))
		}
		ev, err := streamer.GetEvent(wctx)
		timedOut := wctx.Err() != nil && ctx.Err() == nil
		cancel()
		if err != nil && timedOut {
			continue // the segment is due: closed at the top of the loop
		}
		if err != nil {
			return false, fmt.Errorf("reading the binlog stream from %s after %q: %w", s.addr, s.position(), classify(err))
		}
		if !connected {
			connected = true
			a.setStatus(func(x *Status) { x.Connected, x.Source, x.ConnectedSince = true, s.addr, time.Now().UTC() })
		}
		if err := s.handle(ctx, ev); err != nil {
			return false, fmt.Errorf("archiving from %s: %w", s.addr, err)
		}
	}
}

// syncerConfig is go-mysql's configuration: parsed events without row decoding (raw mode
// tracks no GTIDs), Annotate_rows included, CRC32 checked, no semi-sync, and no reconnect of
// its own (it repeats or duplicates transactions): Run reconnects.
func (a *Archiver) syncerConfig(ep Endpoint, log logr.Logger) replication.BinlogSyncerConfig {
	return replication.BinlogSyncerConfig{
		ServerID:                a.opts.ServerID,
		Flavor:                  mysql.MariaDBFlavor,
		Host:                    ep.Host,
		Port:                    uint16(ep.Port),
		User:                    ep.User,
		Password:                ep.Password,
		TLSConfig:               ep.TLS,
		SemiSyncEnabled:         false,
		RawModeEnabled:          false,
		DisableRetrySync:        true,
		HeartbeatPeriod:         heartbeatPeriod,
		ReadTimeout:             readTimeout,
		VerifyChecksum:          true,
		DumpCommandFlag:         replication.BINLOG_SEND_ANNOTATE_ROWS_EVENT,
		RowsEventDecodeFunc:     noRows,
		TimestampStringLocation: time.UTC,
		EventCacheCount:         1024,
		Logger:                  slog.New(quietHandler{logr.ToSlogHandler(log.WithName("go-mysql").V(1))}),
		Option: func(c *client.Conn) error {
			if !ep.ReplicaOnly {
				return nil
			}
			r, err := c.Execute("SELECT @@read_only")
			if err != nil {
				return fmt.Errorf("reading the source's read_only: %w", err)
			}
			if ro, err := r.GetInt(0, 0); err != nil || ro != 1 {
				return ErrSourceIsPrimary
			}
			return nil
		},
	}
}

// closeSyncer closes a connection in the background: the library's Close can block for long
// in its KILL connection when the source is hung. Run waits (bounded) for it at its end.
func (a *Archiver) closeSyncer(syncer *replication.BinlogSyncer) {
	a.closers.Add(1)
	go func() {
		defer a.closers.Done()
		syncer.Close()
	}()
}

// classify wraps MySQL error 1236 (the source cannot stream from the position) in
// ErrHistoryMismatch, saying what to change.
func classify(err error) error {
	var me *mysql.MyError
	if errors.As(err, &me) && me.Code == mysql.ER_MASTER_FATAL_ERROR_READING_BINLOG {
		return fmt.Errorf("%w: %w; point Source at a server whose binary log holds the archived position, or archive into another Prefix from a new base backup",
			ErrHistoryMismatch, err)
	}
	return err
}

// position is where the stream stands: the open segment's end, or the committed position.
func (s *stream) position() Position {
	if s.seg != nil {
		return s.seg.pos
	}
	return s.st.pos
}

// handle takes one event of the stream into the archive.
func (s *stream) handle(ctx context.Context, ev *replication.BinlogEvent) error {
	act, err := s.split.classify(ev)
	if l := s.log.V(2); l.Enabled() {
		l.Info("event", "type", ev.Header.EventType.String(), "serverId", ev.Header.ServerID, "size", ev.Header.EventSize,
			"logPos", ev.Header.LogPos, "flags", ev.Header.Flags, "action", int(act), "error", err)
	}
	if err != nil {
		return err
	}
	switch act {
	case actIgnore:
		return nil
	case actFormat:
		// Events are written in their file's format: a new format starts a new segment.
		if err := s.closeSegment(ctx); err != nil {
			return err
		}
		s.fd = slices.Clone(ev.RawData)
		s.source = Source{Host: s.ep.Host, Port: s.ep.Port, ServerID: ev.Header.ServerID}
		if fde, ok := ev.Event.(*replication.FormatDescriptionEvent); ok {
			s.source.ServerVersion = fde.ServerVersion
		}
		s.a.setStatus(func(x *Status) { x.SourceServerID = ev.Header.ServerID })
		return nil
	case actBegin:
		s.txns++
		g := s.split.gtid
		if s.position().Contains(g) {
			s.skipping = true
			s.dropped++
			s.log.V(1).Info("dropping a transaction archived already", "gtid", g.String(), "archived", s.position().String())
			return nil
		}
		s.skipping = false
		if s.seg == nil {
			if err := s.openSegment(ctx); err != nil {
				return err
			}
		}
		return s.seg.w.write(ev.RawData)
	case actPart:
		if s.skipping {
			return nil
		}
		return s.seg.w.write(ev.RawData)
	}
	// actEnd
	if s.skipping {
		s.skipping = false
		return nil
	}
	if err := s.seg.w.write(ev.RawData); err != nil {
		return err
	}
	seg := s.seg
	if err := seg.pos.Advance(s.split.gtid); err != nil {
		return err // not reached: Contains was checked at the GTID event
	}
	t := eventTime(ev)
	if seg.txns == 0 {
		seg.first = t
	}
	seg.txns++
	seg.last = t
	if t.After(seg.max) {
		seg.max = t
	}
	if seg.w.raw >= s.a.opts.SegmentMaxBytes || !time.Now().Before(seg.opened.Add(s.a.opts.SegmentMaxAge)) {
		return s.closeSegment(ctx)
	}
	return nil
}

// openSegment starts the next segment at the committed position.
func (s *stream) openSegment(ctx context.Context) error {
	if s.fd == nil {
		return errors.New("a transaction before any Format_description event")
	}
	opts := &s.a.opts
	if err := s.checkUnwritten(ctx); err != nil {
		return err
	}
	key := opts.Prefix + objectKey(s.st.epoch, s.st.next)
	w, err := createSegment(ctx, opts.Store, key, s.fd)
	if err != nil {
		return fmt.Errorf("creating segment %s: %w", objectstore.Locate(opts.Store, key), err)
	}
	s.seg = &openSegment{w: w, number: s.st.next, start: s.st.pos, pos: s.st.pos, opened: time.Now(), source: s.source}
	return nil
}

// checkUnwritten refuses to write segment st.next when its manifest exists: another
// archiver writes into the same prefix, or a commit whose reply was lost succeeded.
func (s *stream) checkUnwritten(ctx context.Context) error {
	opts := &s.a.opts
	key := opts.Prefix + manifestKey(s.st.epoch, s.st.next)
	_, err := opts.Store.Stat(ctx, key)
	if err == nil {
		return fmt.Errorf("segment %s is committed already (%s): is another archiver writing into %s? (one archiver per prefix)",
			segmentName(s.st.epoch, s.st.next), objectstore.Locate(opts.Store, key), objectstore.Locate(opts.Store, opts.Prefix))
	}
	if !errors.Is(err, objectstore.ErrNotFound) {
		return fmt.Errorf("checking %s: %w", objectstore.Locate(opts.Store, key), err)
	}
	return nil
}

// closeSegment commits the open segment, if any, then its manifest.
func (s *stream) closeSegment(ctx context.Context) error {
	seg := s.seg
	if seg == nil {
		return nil
	}
	s.seg = nil
	opts := &s.a.opts
	okey := opts.Prefix + objectKey(s.st.epoch, seg.number)
	stored, sum, err := seg.w.commit()
	if err != nil {
		return fmt.Errorf("committing segment %s: %w", objectstore.Locate(opts.Store, okey), err)
	}
	m := &Manifest{
		Format: ManifestFormat, Epoch: s.st.epoch, Number: seg.number, Object: objectKey(s.st.epoch, seg.number),
		Start: seg.start.String(), End: seg.pos.String(),
		FirstCommit: seg.first, LastCommit: seg.last, MaxCommit: seg.max, Transactions: seg.txns,
		RawBytes: seg.w.raw, StoredBytes: stored, SHA256: sum, Compression: CompressionZstd,
		Source: seg.source, ArchiverVersion: ArchiverVersion, Written: time.Now().UTC(),
	}
	if err := m.check(); err != nil {
		return fmt.Errorf("segment %s: %w", m.Name(), err)
	}
	if err := s.checkUnwritten(ctx); err != nil {
		return err
	}
	if err := writeManifest(ctx, opts.Store, opts.Prefix, m); err != nil {
		return fmt.Errorf("writing the manifest of segment %s: %w", objectstore.Locate(opts.Store, okey), err)
	}
	s.st = archiveState{epoch: m.Epoch, next: m.Number + 1, pos: m.end, last: m}
	now := time.Now().UTC()
	s.a.setStatus(func(x *Status) {
		x.Position, x.Epoch, x.Segment, x.LastCommit, x.LastUpload = m.End, m.Epoch, m.Number, m.LastCommit, now
	})
	s.log.V(1).Info("segment committed", "segment", m.Name(), "end", m.End, "transactions", m.Transactions,
		"rawBytes", m.RawBytes, "storedBytes", m.StoredBytes, "dropped", s.dropped)
	return nil
}

// abort discards the open segment.
func (s *stream) abort() {
	if s.seg != nil {
		s.seg.w.abort()
		s.seg = nil
	}
}

// quietHandler passes go-mysql's log records on at Info level at most: its errors are about
// connections the archiver reports itself.
type quietHandler struct{ h slog.Handler }

func (q quietHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return q.h.Enabled(ctx, min(l, slog.LevelInfo))
}

func (q quietHandler) Handle(ctx context.Context, r slog.Record) error {
	r.Level = min(r.Level, slog.LevelInfo)
	return q.h.Handle(ctx, r)
}

func (q quietHandler) WithAttrs(as []slog.Attr) slog.Handler { return quietHandler{q.h.WithAttrs(as)} }
func (q quietHandler) WithGroup(name string) slog.Handler    { return quietHandler{q.h.WithGroup(name)} }
