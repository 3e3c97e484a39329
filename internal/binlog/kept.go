package binlog

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// A kept copy holds the transactions a server has and a primary lacks, taken from the
// server's own binary log files before its data directory is discarded (a re-clone), so that
// nothing a client was told is committed is thrown away without a copy (docs/design/0044).
// It is a binlog file of whole transactions (compressed, like an archive segment) and a JSON
// manifest (KeptCopy) written after it: a copy without its manifest does not exist.

// KeptFormat is the version of the KeptCopy manifest this code writes.
const KeptFormat = 1

// Suffixes of a kept copy's objects: <prefix><name>.binlog.zst and <prefix><name>.json.
const (
	keptObjectSuffix   = ".binlog.zst"
	keptManifestSuffix = ".json"
)

// ErrBinlogsPurged is wrapped by Keep's error when the server's oldest binary log starts
// after transactions the primary lacks: they were purged and no copy of them can be made.
var ErrBinlogsPurged = errors.New("the binary logs that held transactions the primary lacks were purged")

// ErrBinlogBeingWritten is wrapped by Keep's error when the last binary log ends inside a
// transaction: the server is writing it. Try again.
var ErrBinlogBeingWritten = errors.New("the server is writing its binary log; try again")

// KeptCopy is the manifest of a kept copy.
type KeptCopy struct {
	Format int `json:"format"`
	// Name identifies the copy: "<instance>-<UTC time>".
	Name string `json:"name"`
	// Instance is the server the transactions were taken from; ServerID its server_id.
	Instance string `json:"instance"`
	ServerID uint32 `json:"serverId"`
	// Primary is the server the instance diverged from, PrimaryState its @@gtid_binlog_state
	// when the copy was made.
	Primary      string `json:"primary"`
	PrimaryState string `json:"primaryState"`
	// Reason is why the instance's data was about to be discarded.
	Reason string `json:"reason,omitempty"`
	// GTIDs are the kept transactions, as runs: "0-1-91..100,0-3-7".
	GTIDs string `json:"gtids"`
	// Transactions is how many whole transactions the copy holds.
	Transactions int64 `json:"transactions"`
	// FirstCommit and LastCommit are the commit times of the first and last (whole seconds).
	FirstCommit time.Time `json:"firstCommit"`
	LastCommit  time.Time `json:"lastCommit"`
	// Object is the binlog file's key relative to the prefix; RawBytes its size,
	// StoredBytes and SHA256 those of the stored (zstd) object.
	Object      string `json:"object"`
	RawBytes    int64  `json:"rawBytes"`
	StoredBytes int64  `json:"storedBytes"`
	SHA256      string `json:"sha256"`
	Compression string `json:"compression"`
	// Created is when the copy was made.
	Created time.Time `json:"created"`
}

// KeepOptions configures Keep.
type KeepOptions struct {
	// BinlogIndex is the server's binary log index file (e.g. <datadir>/binlog.index). The
	// files it lists are read directly: the server may be running, stopped or crashed.
	BinlogIndex string
	// Primary is the primary's @@gtid_binlog_state.
	Primary ServerState
	// Store and Prefix receive the copy: <Prefix><Name>.binlog.zst, then <Prefix><Name>.json.
	Store  objectstore.Store
	Prefix string
	// Name of the copy; Instance, PrimaryName and Reason go into the manifest.
	Name, Instance, PrimaryName, Reason string
	// Now is the manifest's creation time; time.Now when zero.
	Now time.Time
	// ServerStopped says the server does not run: a transaction cut short at the end of the
	// newest file was never committed (its commit is the binary log write) and is left out,
	// instead of ErrBinlogBeingWritten.
	ServerStopped bool
}

// Keep writes a copy of the transactions in the server's binary logs that the primary lacks
// (see divergence for the rule). It reads every listed file once to find where the two
// histories part, then again the files that hold transactions beyond the primary. It
// returns a manifest with Transactions 0 and writes nothing when there is nothing to keep.
// The error wraps ErrBinlogsPurged when transactions the primary lacks lie before the oldest
// binary log, ErrBinlogBeingWritten when the newest ends inside a transaction.
func Keep(ctx context.Context, opts KeepOptions) (*KeptCopy, error) {
	if opts.Store == nil || opts.Name == "" || opts.BinlogIndex == "" {
		return nil, errors.New("keeping transactions: Store, Name and BinlogIndex are required")
	}
	files, err := readIndex(opts.BinlogIndex)
	if err != nil {
		return nil, err
	}
	div := newDivergence(opts.Primary)
	candidates := make([]bool, len(files))
	var start []GTID // the oldest file's Gtid_list: the state before it
	var split splitter
	for i, f := range files {
		split = splitter{}
		err := scanFile(ctx, f, i == len(files)-1, func(ev *replication.BinlogEvent) error {
			if _, err := split.classify(ev); err != nil {
				return err
			}
			switch ev.Header.EventType {
			case replication.MARIADB_GTID_LIST_EVENT:
				list, err := gtidList(ev)
				if err != nil {
					return err
				}
				for _, g := range list {
					div.see(g)
				}
				if i == 0 {
					start = list
				}
			case replication.MARIADB_GTID_EVENT:
				g, _, err := gtidOf(ev)
				if err != nil {
					return err
				}
				div.see(g)
				if !div.heldByLine(g) {
					candidates[i] = true
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", f, err)
		}
		if split.inTxn && i < len(files)-1 {
			return nil, fmt.Errorf("%s ends inside transaction %s: the file is damaged", filepath.Base(f), split.gtid)
		}
	}
	var torn *GTID // a transaction cut short at the end of the newest file
	if split.inTxn {
		if !opts.ServerStopped {
			return nil, fmt.Errorf("%s ends inside transaction %s: %w", filepath.Base(files[len(files)-1]), split.gtid, ErrBinlogBeingWritten)
		}
		g := split.gtid
		torn = &g
	}
	var lost gtidRanges
	for _, g := range start {
		if !div.held(g) {
			lost.add(g)
		}
	}
	if len(lost.runs) > 0 {
		return nil, fmt.Errorf("%w: the oldest, %s, starts after %s, which the primary (%s) does not hold",
			ErrBinlogsPurged, filepath.Base(files[0]), lost.String(), opts.Primary)
	}
	return writeKept(ctx, opts, files, candidates, div, torn)
}

// writeKept is Keep's second pass.
func writeKept(ctx context.Context, opts KeepOptions, files []string, candidates []bool, div *divergence, torn *GTID) (*KeptCopy, error) {
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	m := &KeptCopy{
		Format: KeptFormat, Name: opts.Name, Instance: opts.Instance, Primary: opts.PrimaryName,
		PrimaryState: opts.Primary.String(), Reason: opts.Reason, Object: opts.Name + keptObjectSuffix,
		Compression: "zstd", Created: now.UTC(),
	}
	var (
		w      *segmentWriter
		ranges gtidRanges
		fd     []byte
		split  splitter
		keep   bool
	)
	defer func() {
		if w != nil {
			w.abort()
		}
	}()
	for i, f := range files {
		if !candidates[i] {
			continue
		}
		split = splitter{}
		err := scanFile(ctx, f, i == len(files)-1, func(ev *replication.BinlogEvent) error {
			a, err := split.classify(ev)
			if err != nil {
				return err
			}
			switch a {
			case actFormat:
				if fd == nil {
					fd = ev.RawData
					m.ServerID = ev.Header.ServerID
				}
				return nil
			case actIgnore:
				return nil
			case actBegin:
				keep = !div.held(split.gtid) && (torn == nil || split.gtid != *torn || i < len(files)-1)
				if !keep {
					return nil
				}
				if w == nil {
					if w, err = createSegment(ctx, opts.Store, opts.Prefix+m.Object, fd); err != nil {
						return fmt.Errorf("creating the copy: %w", err)
					}
				}
				ranges.add(split.gtid)
				m.Transactions++
			}
			if !keep {
				return nil
			}
			if err := w.write(ev.RawData); err != nil {
				return fmt.Errorf("writing the copy: %w", err)
			}
			if a == actEnd {
				t := eventTime(ev)
				if m.FirstCommit.IsZero() {
					m.FirstCommit = t
				}
				m.LastCommit = t
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", f, err)
		}
		if split.inTxn && !(torn != nil && i == len(files)-1 && split.gtid == *torn) {
			// Written since the first pass (the server runs): the copy would end mid-way.
			return nil, fmt.Errorf("%s ends inside transaction %s: %w", filepath.Base(f), split.gtid, ErrBinlogBeingWritten)
		}
	}
	if w == nil {
		return m, nil
	}
	m.RawBytes = w.raw
	stored, sum, err := w.commit()
	w = nil
	if err != nil {
		return nil, fmt.Errorf("storing the copy: %w", err)
	}
	m.StoredBytes, m.SHA256, m.GTIDs = stored, sum, ranges.String()
	if err := writeJSON(ctx, opts.Store, opts.Prefix+opts.Name+keptManifestSuffix, m); err != nil {
		return nil, fmt.Errorf("storing the copy's manifest: %w", err)
	}
	return m, nil
}

// readIndex lists the binary log files of an index file, oldest first; relative entries are
// relative to the index's directory.
func readIndex(index string) ([]string, error) {
	b, err := os.ReadFile(index)
	if err != nil {
		return nil, fmt.Errorf("reading the binary log index: %w", err)
	}
	var files []string
	for line := range strings.SplitSeq(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if !filepath.IsAbs(line) {
			line = filepath.Join(filepath.Dir(index), line)
		}
		files = append(files, line)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("the binary log index %s lists no file", index)
	}
	return files, nil
}

// scanFile calls fn for each whole event of a binary log file, checksums checked. An event
// cut short at the end of the newest file (last) is one being written: reading stops before
// it. Anywhere else it is damage.
func scanFile(ctx context.Context, path string, last bool, fn func(*replication.BinlogEvent) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	head := make([]byte, len(replication.BinLogFileHeader))
	if _, err := io.ReadFull(r, head); err != nil {
		return fmt.Errorf("reading the binary log magic: %w", err)
	}
	if !bytes.Equal(head, replication.BinLogFileHeader) {
		return fmt.Errorf("not a binary log file: starts with %x", head)
	}
	p := newParser()
	for n := 0; ; n++ {
		if n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		header := make([]byte, replication.EventHeaderSize)
		if k, err := io.ReadFull(r, header); err == io.EOF {
			return nil
		} else if err != nil {
			if last {
				return nil
			}
			return fmt.Errorf("event header cut short after %d bytes: %w", k, err)
		}
		size := binary.LittleEndian.Uint32(header[9:13])
		if size < replication.EventHeaderSize || size > 1<<30+1<<20 {
			return fmt.Errorf("event of impossible size %d", size)
		}
		raw := make([]byte, size)
		copy(raw, header)
		if _, err := io.ReadFull(r, raw[replication.EventHeaderSize:]); err != nil {
			if last {
				return nil
			}
			return fmt.Errorf("event cut short: %w", err)
		}
		ev, err := p.Parse(raw)
		if err != nil {
			return fmt.Errorf("decoding an event: %w", err)
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
}

// gtidList decodes a Gtid_list event: the binary log state before the file's transactions.
func gtidList(ev *replication.BinlogEvent) ([]GTID, error) {
	e, ok := ev.Event.(*replication.MariadbGTIDListEvent)
	if !ok {
		return nil, fmt.Errorf("a Gtid_list event decoded as %T", ev.Event)
	}
	out := make([]GTID, 0, len(e.GTIDs))
	for _, g := range e.GTIDs {
		out = append(out, GTID{Domain: g.DomainID, Server: g.ServerID, Seq: g.SequenceNumber})
	}
	return out, nil
}

// writeJSON stores v as indented JSON under key.
func writeJSON(ctx context.Context, store objectstore.Store, key string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	up, err := store.Create(ctx, key)
	if err != nil {
		return err
	}
	if _, err := up.Write(append(b, '\n')); err != nil {
		return errors.Join(err, up.Abort())
	}
	_, err = up.Commit()
	return err
}
