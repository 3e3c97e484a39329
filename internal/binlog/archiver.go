package binlog

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// Defaults of ArchiverOptions.
const (
	DefaultSegmentMaxBytes = 16 << 20
	DefaultSegmentMaxAge   = 3 * time.Second
)

// Reconnect backoff, and how the archiver notices a dead or hung source.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
	// heartbeatPeriod asks the source for a heartbeat event after this long without events;
	// readTimeout ends a connection that delivered nothing (not even a heartbeat) that long.
	heartbeatPeriod = time.Second
	readTimeout     = 6 * time.Second
	// closeWait bounds how long Run waits, when it returns, for connections to close (the
	// library's Close can hang in its KILL connection when the source is hung).
	closeWait = 15 * time.Second
)

// ErrHistoryMismatch is wrapped by the error the archiver records when the source refuses
// to stream from the archive's position (MySQL error 1236): the position is not in its binary
// log — purged, or the source's history diverged from the archived one. The archiver does not
// skip ahead or mix histories: it keeps retrying (the caller may point Source elsewhere).
var ErrHistoryMismatch = errors.New("the source cannot continue the archived history")

// Endpoint is where the archiver reads the binary log from.
type Endpoint struct {
	Host string
	Port int
	// User needs REPLICATION SLAVE (and nothing else).
	User     string
	Password string
	// TLS, when set, is used for the connection (the server's certificate verified by it);
	// nil: a plain connection.
	TLS *tls.Config
	// ReplicaOnly refuses to read from a server that is not read-only (a primary), checked on
	// the connection the stream then uses: through a Service, a connection can reach any
	// server behind it, and a primary's binary log can hold a tail no replica acknowledged.
	ReplicaOnly bool
}

// ErrSourceIsPrimary is returned by a session whose ReplicaOnly source turned out writable.
var ErrSourceIsPrimary = errors.New("the source is writable (a primary), and the archiver reads only from replicas")

// ArchiverOptions configures an Archiver.
type ArchiverOptions struct {
	// Source is called at every (re)connect for the server to read from, so that a failover
	// is followed by pointing it at another server.
	//
	// The archiver is never a semi-sync replica: it does not acknowledge transactions. Read
	// from a replica (with log_slave_updates), not from the primary: a primary's binary log
	// can hold a tail that no replica acknowledged and that a failover discards; a replica
	// has only what it received. The caller chooses.
	Source func(ctx context.Context) (Endpoint, error)
	// Store and Prefix are where the segments go (Prefix gets a trailing '/').
	Store  objectstore.Store
	Prefix string
	// ServerID registers the archiver with the source as a replica; it must differ from
	// every server's and replica's server_id.
	ServerID uint32
	// SegmentMaxBytes closes a segment once it holds this many raw bytes (at the end of a
	// transaction: a segment holds whole transactions); DefaultSegmentMaxBytes when 0.
	SegmentMaxBytes int64
	// SegmentMaxAge closes a segment this long after its first transaction arrived, also when
	// no more events come: the archive's RPO. DefaultSegmentMaxAge when 0.
	SegmentMaxAge time.Duration
	// Start is the GTID position to archive after when the store holds no segment yet (e.g.
	// the first base backup's position). Once there are segments, the archive continues after
	// the last one's end.
	Start string
	// Log receives what the archiver does; the zero Logger discards.
	Log logr.Logger
}

// Status is what an Archiver has done so far.
type Status struct {
	// Position is the archived GTID position: the end of the last committed segment.
	Position string `json:"position,omitempty"`
	// Epoch and Segment are the last committed segment's epoch and number (0 before one).
	Epoch   int   `json:"epoch,omitempty"`
	Segment int64 `json:"segment,omitempty"`
	// LastCommit is the commit time of the last archived transaction (whole seconds, UTC).
	LastCommit time.Time `json:"lastCommit,omitempty"`
	// LastUpload is when the last segment (and its manifest) was committed.
	LastUpload time.Time `json:"lastUpload,omitempty"`
	// Connected reports a running binlog stream from Source ("host:port") whose binary log
	// belongs to SourceServerID; ConnectedSince is when it started.
	Connected      bool      `json:"connected,omitempty"`
	Source         string    `json:"source,omitempty"`
	SourceServerID uint32    `json:"sourceServerID,omitempty"`
	ConnectedSince time.Time `json:"connectedSince,omitempty"`
	// LastError is the last failure (connecting, streaming, storing), at LastErrorTime. It is
	// kept after the archiver recovered: compare LastErrorTime with LastUpload.
	LastError     string    `json:"lastError,omitempty"`
	LastErrorTime time.Time `json:"lastErrorTime,omitempty"`
}

// Archiver copies a server's binary log into the store, continuously. Create it with
// NewArchiver and call Run.
type Archiver struct {
	opts    ArchiverOptions
	running atomic.Bool
	closers sync.WaitGroup

	mu     sync.Mutex
	status Status
}

// NewArchiver checks opts and returns an Archiver.
func NewArchiver(opts ArchiverOptions) (*Archiver, error) {
	var errs []error
	if opts.Source == nil {
		errs = append(errs, errors.New("Source is not set: give a function returning the server to read from"))
	}
	if opts.Store == nil {
		errs = append(errs, errors.New("Store is not set"))
	}
	if opts.ServerID == 0 {
		errs = append(errs, errors.New("ServerID is 0: choose one that no server or replica uses"))
	}
	if opts.SegmentMaxBytes < 0 || opts.SegmentMaxAge < 0 {
		errs = append(errs, fmt.Errorf("SegmentMaxBytes %d and SegmentMaxAge %v must not be negative", opts.SegmentMaxBytes, opts.SegmentMaxAge))
	}
	if _, err := Parse(opts.Start); err != nil {
		errs = append(errs, fmt.Errorf("Start: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("binlog archiver: %w", err)
	}
	opts.Prefix = normPrefix(opts.Prefix)
	opts.SegmentMaxBytes = cmp.Or(opts.SegmentMaxBytes, DefaultSegmentMaxBytes)
	opts.SegmentMaxAge = cmp.Or(opts.SegmentMaxAge, DefaultSegmentMaxAge)
	return &Archiver{opts: opts}, nil
}

// Status returns a copy of the archiver's status.
func (a *Archiver) Status() Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.status
}

func (a *Archiver) setStatus(f func(*Status)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f(&a.status)
}

// Run archives until ctx is done, then returns nil. It resumes after the last committed
// segment (or after Start), and after any failure — the source gone, a refused position,
// the store failing — it records the error in Status, discards the segment being written
// and reconnects with a backoff (100 ms doubling to 5 s), from the archived position again.
// Transactions at or before that position are dropped, so nothing is archived twice.
// A segment being written when ctx ends is discarded; the next Run reads it again from the
// source. Run refuses to run twice at once.
func (a *Archiver) Run(ctx context.Context) error {
	if !a.running.CompareAndSwap(false, true) {
		return errors.New("binlog archiver: Run is already running")
	}
	defer a.running.Store(false)
	defer a.waitClosers()
	log := a.opts.Log.WithValues("archive", objectstore.Locate(a.opts.Store, a.opts.Prefix))
	backoff := minBackoff
	for ctx.Err() == nil {
		progressed, err := a.session(ctx, log)
		a.setStatus(func(s *Status) { s.Connected = false })
		if ctx.Err() != nil {
			break
		}
		if err == nil {
			err = errors.New("the binlog stream ended")
		}
		a.setStatus(func(s *Status) { s.LastError, s.LastErrorTime = err.Error(), time.Now().UTC() })
		if progressed {
			backoff = minBackoff
		}
		log.Error(err, "binlog archiving interrupted, reconnecting", "after", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		backoff = min(2*backoff, maxBackoff)
	}
	return nil
}

// waitClosers waits a bounded time for connections that are being closed.
func (a *Archiver) waitClosers() {
	done := make(chan struct{})
	go func() { a.closers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(closeWait):
		a.opts.Log.Info("a binlog connection is still closing; not waiting for it", "waited", closeWait)
	}
}

// archiveState is where the archive continues: after its last committed segment.
type archiveState struct {
	epoch int
	next  int64 // number of the next segment
	pos   Position
	last  *Manifest // nil when the store holds no segment
}

// loadState finds the last committed segment under the prefix. Only its manifest is read.
func loadState(ctx context.Context, store objectstore.Store, prefix, start string) (archiveState, error) {
	objs, err := store.List(ctx, prefix)
	if err != nil {
		return archiveState{}, fmt.Errorf("listing the binlog archive %s: %w", objectstore.Locate(store, prefix), err)
	}
	var lastKey string
	var lastE int
	var lastN int64
	for _, o := range objs {
		rel := strings.TrimPrefix(o.Key, prefix)
		if e, n, ok := parseManifestKey(rel); ok && (e > lastE || (e == lastE && n > lastN)) {
			lastKey, lastE, lastN = rel, e, n
		}
	}
	if lastKey == "" {
		pos, err := Parse(start)
		if err != nil {
			return archiveState{}, err
		}
		return archiveState{epoch: 1, next: 1, pos: pos}, nil
	}
	m, err := readManifest(ctx, store, prefix+lastKey)
	if err != nil {
		return archiveState{}, fmt.Errorf("%w; the archiver continues after the last segment's manifest, so it must be readable", err)
	}
	if m.Epoch != lastE || m.Number != lastN {
		return archiveState{}, fmt.Errorf("binlog archive manifest %s: %w: it describes segment %s",
			objectstore.Locate(store, prefix+lastKey), ErrCorrupt, m.Name())
	}
	return archiveState{epoch: m.Epoch, next: m.Number + 1, pos: m.end, last: m}, nil
}
