package binlog

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/klauspost/compress/zstd"

	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// Compression settings: a segment is at most a few tens of MiB, written by one goroutine.
const (
	zstdWindow    = 8 << 20
	zstdMaxWindow = 64 << 20 // the largest window a reader accepts
	maxManifest   = 1 << 20  // the largest manifest read
)

// Listing is what ListSegments found: the committed segments in order, and the reasons they
// do not form one replayable history.
type Listing struct {
	// Segments are the manifests in order of epoch and number.
	Segments []*Manifest
	// Problems are gaps (wrapping ErrGap: a segment whose Start is not the previous End) and
	// segments whose object is missing or of another size than recorded (ErrCorrupt). The
	// archive is whole when there are none.
	Problems []error

	damaged map[string]error // by segment name: its ErrCorrupt problem
}

// Err joins the problems; nil when the archive is whole.
func (l *Listing) Err() error { return errors.Join(l.Problems...) }

// Last returns the newest segment's manifest, or nil.
func (l *Listing) Last() *Manifest {
	if len(l.Segments) == 0 {
		return nil
	}
	return l.Segments[len(l.Segments)-1]
}

// Range describes the archived range for messages: "GTID <start> to <end>, commits <t0> to
// <t1> (N segments)", or "nothing archived".
func (l *Listing) Range() string {
	if len(l.Segments) == 0 {
		return "nothing archived"
	}
	first, last := l.Segments[0], l.Last()
	return fmt.Sprintf("GTID position %q to %q, commits %s to %s (%d segments)", first.Start, last.End,
		first.FirstCommit.Format("2006-01-02T15:04:05Z"), last.LastCommit.Format("2006-01-02T15:04:05Z"), len(l.Segments))
}

// ListSegments reads every manifest under prefix and returns them in order. Segment objects
// without a manifest are ignored (they were never committed); gaps and missing objects are
// reported in the Listing's Problems rather than as an error. The error is for a store that
// cannot be listed or a manifest that cannot be read or makes no sense (ErrCorrupt).
func ListSegments(ctx context.Context, store objectstore.Store, prefix string) (*Listing, error) {
	prefix = normPrefix(prefix)
	objs, err := store.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("listing the binlog archive %s: %w", objectstore.Locate(store, prefix), err)
	}
	sizes := map[string]int64{}
	var keys []string
	for _, o := range objs {
		rel := strings.TrimPrefix(o.Key, prefix)
		sizes[rel] = o.Size
		if _, _, ok := parseManifestKey(rel); ok {
			keys = append(keys, rel)
		}
	}
	l := &Listing{}
	for _, rel := range keys {
		m, err := readManifest(ctx, store, prefix+rel)
		if err != nil {
			return nil, err
		}
		if e, n, _ := parseManifestKey(rel); e != m.Epoch || n != m.Number {
			return nil, fmt.Errorf("binlog archive manifest %s: %w: it describes segment %s (moved or copied by hand? put it back under its own name)",
				objectstore.Locate(store, prefix+rel), ErrCorrupt, m.Name())
		}
		l.Segments = append(l.Segments, m)
	}
	slices.SortFunc(l.Segments, func(a, b *Manifest) int {
		return cmp.Or(cmp.Compare(a.Epoch, b.Epoch), cmp.Compare(a.Number, b.Number))
	})
	l.damaged = map[string]error{}
	for i, m := range l.Segments {
		size, ok := sizes[m.Object]
		var damage error
		switch {
		case !ok:
			damage = fmt.Errorf("segment %s: %w: its object %s is missing", m.Name(), ErrCorrupt, objectstore.Locate(store, prefix+m.Object))
		case size != m.StoredBytes:
			damage = fmt.Errorf("segment %s: %w: its object %s has %d bytes, the manifest says %d",
				m.Name(), ErrCorrupt, objectstore.Locate(store, prefix+m.Object), size, m.StoredBytes)
		}
		if damage != nil {
			l.damaged[m.Name()] = damage
			l.Problems = append(l.Problems, damage)
		}
		if i > 0 {
			if prev := l.Segments[i-1]; !m.start.Equal(prev.end) {
				l.Problems = append(l.Problems, fmt.Errorf("%w between segment %s (ends at %q) and segment %s (starts at %q)",
					ErrGap, prev.Name(), prev.End, m.Name(), m.Start))
			}
		}
	}
	return l, nil
}

// readManifest reads and checks the manifest at key (relative to the store).
func readManifest(ctx context.Context, store objectstore.Store, key string) (*Manifest, error) {
	where := objectstore.Locate(store, key)
	rc, err := store.Open(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("reading binlog archive manifest %s: %w", where, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxManifest+1))
	if err != nil {
		return nil, fmt.Errorf("reading binlog archive manifest %s: %w", where, err)
	}
	if len(b) > maxManifest {
		return nil, fmt.Errorf("binlog archive manifest %s: %w: larger than %d bytes", where, ErrCorrupt, maxManifest)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("binlog archive manifest %s: %w: %w", where, ErrCorrupt, err)
	}
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("binlog archive manifest %s: %w: %w", where, ErrCorrupt, err)
	}
	return &m, nil
}

// writeManifest stores m as indented JSON under prefix + its manifest key.
func writeManifest(ctx context.Context, store objectstore.Store, prefix string, m *Manifest) error {
	return writeJSON(ctx, store, prefix+manifestKey(m.Epoch, m.Number), m)
}

// segmentWriter streams one segment into the store: raw events → zstd → sha256 → upload.
// Nothing is visible until commit; abort leaves nothing.
type segmentWriter struct {
	up  objectstore.Upload
	enc *zstd.Encoder
	out *objectstore.DigestWriter
	raw int64
}

// createSegment starts the object key with the binlog magic and the Format_description
// event fd.
func createSegment(ctx context.Context, store objectstore.Store, key string, fd []byte) (*segmentWriter, error) {
	up, err := store.Create(ctx, key)
	if err != nil {
		return nil, err
	}
	out := objectstore.NewDigestWriter(up)
	enc, err := zstd.NewWriter(out, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
		zstd.WithWindowSize(zstdWindow), zstd.WithEncoderCRC(true))
	if err != nil {
		return nil, errors.Join(err, up.Abort())
	}
	w := &segmentWriter{up: up, enc: enc, out: out}
	if err := w.write(magic()); err != nil {
		w.abort()
		return nil, err
	}
	if err := w.write(fd); err != nil {
		w.abort()
		return nil, err
	}
	return w, nil
}

func magic() []byte { return []byte{0xfe, 0x62, 0x69, 0x6e} }

// write adds raw bytes (whole events) to the segment.
func (w *segmentWriter) write(p []byte) error {
	n, err := w.enc.Write(p)
	w.raw += int64(n)
	return err
}

// commit finishes the object; it returns the stored size and sha256.
func (w *segmentWriter) commit() (int64, string, error) {
	if err := w.enc.Close(); err != nil {
		return 0, "", errors.Join(err, w.up.Abort())
	}
	if _, err := w.up.Commit(); err != nil {
		return 0, "", err
	}
	return w.out.Digest.Size(), w.out.Digest.SHA256(), nil
}

// abort discards the segment.
func (w *segmentWriter) abort() {
	w.enc.Close()
	_ = w.up.Abort()
}

// fetchSegment downloads m's object into path+".zst" while checking its size and sha256
// against the manifest, then decompresses it into path. A mismatch, or data that does not
// decompress, is an error wrapping ErrCorrupt that names the object. The compressed copy is
// always removed, path on any error.
func fetchSegment(ctx context.Context, store objectstore.Store, prefix string, m *Manifest, path string) error {
	if err := fetchObject(ctx, store, prefix+m.Object, m.StoredBytes, m.SHA256, m.RawBytes, path); err != nil {
		return fmt.Errorf("segment %s: %w", m.Name(), err)
	}
	return nil
}

// fetchObject is fetchSegment for any zstd object whose stored size, sha256 and raw size are
// known.
func fetchObject(ctx context.Context, store objectstore.Store, key string, stored int64, sha string, raw int64, path string) (err error) {
	where := objectstore.Locate(store, key)
	zpath := path + ".zst"
	defer os.Remove(zpath)
	defer func() {
		if err != nil {
			os.Remove(path)
		}
	}()
	if err := download(ctx, store, key, zpath, stored, sha); err != nil {
		return err
	}
	zf, err := os.Open(zpath)
	if err != nil {
		return err
	}
	defer zf.Close()
	dec, err := zstd.NewReader(zf, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(zstdMaxWindow), zstd.WithDecoderLowmem(true))
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrCorrupt, where, err)
	}
	defer dec.Close()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("%w (TmpDir must be writable and empty of segment files)", err)
	}
	n, err := io.Copy(f, dec)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) && pe.Path == path {
			return fmt.Errorf("writing %s: %w", path, err)
		}
		return fmt.Errorf("%w: %s matches its sha256 but does not decompress: %w", ErrCorrupt, where, err)
	}
	if n != raw {
		return fmt.Errorf("%w: %s decompresses to %d bytes, the manifest says %d", ErrCorrupt, where, n, raw)
	}
	return nil
}

// download copies the object key into the new file path and checks its size and sha256.
func download(ctx context.Context, store objectstore.Store, key, path string, stored int64, sha string) (err error) {
	where := objectstore.Locate(store, key)
	rc, err := store.Open(ctx, key)
	if err != nil {
		return fmt.Errorf("opening %s: %w", where, err)
	}
	defer rc.Close()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("%w (TmpDir must be writable and empty of segment files)", err)
	}
	in := objectstore.NewDigestReader(rc, nil)
	_, err = io.Copy(f, in)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if in.Err() != nil {
		return fmt.Errorf("reading %s: %w", where, in.Err())
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if sum := in.Digest.SHA256(); in.Digest.Size() != stored || sum != sha {
		return fmt.Errorf("%w: %s has %d bytes with sha256 %s, the manifest says %d bytes with sha256 %s",
			ErrCorrupt, where, in.Digest.Size(), sum, stored, sha)
	}
	return nil
}
