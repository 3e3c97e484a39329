package binlog

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// ResolveTime returns the GTID position after the last archived transaction committed at or
// before t: the archive's transactions are taken in order up to the first one that committed
// after t. Commit times are read from the segments' events (a transaction's last event), not
// left to mariadb-binlog's --stop-datetime, so the answer is a GTID position that Replay can
// land on exactly and check.
//
// MariaDB records commit times in whole seconds: a transaction stamped 14:03:27 counts as
// committed at 14:03:27.000, so it is included for any t from that second on. Segments whose
// transactions all committed at or before t are not downloaded; the others are, with their
// sha256 checked.
//
// A t before the first archived commit or after the last one is outside the archive: the
// error wraps ErrOutsideArchive and names the archived range (for the latest position,
// replay with To "").
func ResolveTime(ctx context.Context, store objectstore.Store, prefix string, t time.Time) (string, error) {
	prefix = normPrefix(prefix)
	l, err := ListSegments(ctx, store, prefix)
	if err != nil {
		return "", err
	}
	if len(l.Segments) == 0 {
		return "", fmt.Errorf("resolving %s: %w: nothing is archived in %s", t.UTC().Format(time.RFC3339Nano), ErrOutsideArchive, objectstore.Locate(store, prefix))
	}
	first, last := l.Segments[0], l.Last()
	latest := last.MaxCommit
	for _, m := range l.Segments {
		if m.MaxCommit.After(latest) {
			latest = m.MaxCommit
		}
	}
	if t.Before(first.FirstCommit) || t.After(latest) {
		return "", fmt.Errorf("resolving %s: %w: %s", t.UTC().Format(time.RFC3339Nano), ErrOutsideArchive, l.Range())
	}
	pos := first.start
	for i, m := range l.Segments {
		if i > 0 && !m.start.Equal(l.Segments[i-1].end) {
			return "", fmt.Errorf("resolving %s: %w between segment %s (ends at %q) and segment %s (starts at %q)",
				t.UTC().Format(time.RFC3339Nano), ErrGap, l.Segments[i-1].Name(), l.Segments[i-1].End, m.Name(), m.Start)
		}
		if !m.MaxCommit.After(t) {
			pos = m.end
			continue
		}
		txns, err := segmentTransactions(ctx, store, prefix, m)
		if err != nil {
			return "", fmt.Errorf("resolving %s: %w", t.UTC().Format(time.RFC3339Nano), err)
		}
		for _, x := range txns {
			if x.Commit.After(t) {
				return pos.String(), nil
			}
			if err := pos.Advance(x.GTID); err != nil {
				return "", fmt.Errorf("segment %s: %w: %w", m.Name(), ErrCorrupt, err)
			}
		}
		if !pos.Equal(m.end) {
			return "", fmt.Errorf("segment %s: %w: its transactions end at %q, the manifest says %q", m.Name(), ErrCorrupt, pos, m.End)
		}
	}
	return pos.String(), nil
}

// SegmentGTIDs returns the GTIDs of a segment's transactions, in order, read from the store
// under prefix (the archive's prefix, as given to ListSegments) with the object's size and
// sha256 and the events' checksums checked.
func SegmentGTIDs(ctx context.Context, store objectstore.Store, prefix string, m *Manifest) ([]GTID, error) {
	txns, err := segmentTransactions(ctx, store, normPrefix(prefix), m)
	if err != nil {
		return nil, err
	}
	out := make([]GTID, len(txns))
	for i, x := range txns {
		out[i] = x.GTID
	}
	return out, nil
}

// segmentTransactions reads a segment's transactions (GTID and commit time) from the store,
// checking the object's size and sha256 and the events' checksums.
func segmentTransactions(ctx context.Context, store objectstore.Store, prefix string, m *Manifest) ([]txn, error) {
	where := objectstore.Locate(store, prefix+m.Object)
	rc, err := store.Open(ctx, prefix+m.Object)
	if err != nil {
		return nil, fmt.Errorf("segment %s: opening %s: %w", m.Name(), where, err)
	}
	defer rc.Close()
	in := objectstore.NewDigestReader(rc, nil)
	dec, err := zstd.NewReader(in, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(zstdMaxWindow), zstd.WithDecoderLowmem(true))
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	var txns []txn
	readErr := readTransactions(dec, func(x txn) error { txns = append(txns, x); return nil })
	if in.Err() != nil {
		return nil, fmt.Errorf("segment %s: reading %s: %w", m.Name(), where, in.Err())
	}
	if _, err := io.Copy(io.Discard, in); err != nil {
		return nil, fmt.Errorf("segment %s: reading %s: %w", m.Name(), where, err)
	}
	if sum := in.Digest.SHA256(); in.Digest.Size() != m.StoredBytes || sum != m.SHA256 {
		return nil, fmt.Errorf("segment %s: %w: %s has %d bytes with sha256 %s, the manifest says %d bytes with sha256 %s",
			m.Name(), ErrCorrupt, where, in.Digest.Size(), sum, m.StoredBytes, m.SHA256)
	}
	if readErr != nil {
		return nil, fmt.Errorf("segment %s: %w: %s: %w", m.Name(), ErrCorrupt, where, readErr)
	}
	if int64(len(txns)) != m.Transactions {
		return nil, fmt.Errorf("segment %s: %w: %s holds %d transactions, the manifest says %d", m.Name(), ErrCorrupt, where, len(txns), m.Transactions)
	}
	return txns, nil
}
