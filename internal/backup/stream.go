package backup

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"
)

// Compression settings. Memory is bounded by the window and the number of blocks in flight,
// whatever the size of the backup: about zstdConcurrency × (window + block) when
// compressing, one window when decoding.
const (
	zstdConcurrency = 2
	zstdWindow      = 8 << 20
	// zstdMaxWindow is the largest window Restore accepts, so that a damaged or hostile frame
	// header cannot make it allocate more.
	zstdMaxWindow = 64 << 20
	// copyBuffer is the size of the buffer between a tool's pipe and the codec.
	copyBuffer = 1 << 20
)

func newEncoder(w io.Writer) (*zstd.Encoder, error) {
	return zstd.NewWriter(w,
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderConcurrency(zstdConcurrency),
		zstd.WithWindowSize(zstdWindow),
		zstd.WithEncoderCRC(true))
}

// newDecoder decodes synchronously (concurrency 1): it reads r only from the goroutine that
// reads the decoder, and zstd decodes faster than mbstream writes anyway.
func newDecoder(r io.Reader) (*zstd.Decoder, error) {
	return zstd.NewReader(r,
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxWindow(zstdMaxWindow),
		zstd.WithDecoderLowmem(true))
}

// digest counts and hashes the bytes that pass through it.
type digest struct {
	h hash.Hash
	n int64
}

func newDigest() *digest { return &digest{h: sha256.New()} }

func (d *digest) add(p []byte) { d.h.Write(p); d.n += int64(len(p)) }

// sum is the hex sha256 of what passed so far.
func (d *digest) sum() string { return hex.EncodeToString(d.h.Sum(nil)) }

// storeWriter is what the encoder writes to: the upload (or Stream's writer), with a count
// and (when d is set) a digest of what it accepted, and a progress callback. It remembers the
// first write error, so that a sink failure is told from the tool's.
type storeWriter struct {
	w        io.Writer
	d        *digest // optional
	progress func(int64)
	n        int64

	mu  sync.Mutex
	err error
}

func (s *storeWriter) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	if s.d != nil {
		s.d.add(p[:n])
	}
	s.n += int64(n)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		s.mu.Lock()
		if s.err == nil {
			s.err = err
		}
		s.mu.Unlock()
		return n, err
	}
	if s.progress != nil {
		s.progress(s.n)
	}
	return n, nil
}

func (s *storeWriter) failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// digestReader hashes and counts what is read through it, reports each read's size to
// progress (when set) and remembers the first read error other than io.EOF, so that a
// failing store is told from a damaged stream.
type digestReader struct {
	r        io.Reader
	d        *digest
	progress func(int64)
	err      error
}

func (r *digestReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.d.add(p[:n])
	if n > 0 && r.progress != nil {
		r.progress(int64(n))
	}
	if err != nil && err != io.EOF && r.err == nil {
		r.err = err
	}
	return n, err
}

// countWriter counts the raw bytes of the tool's stream; it opens gate (when set) before the
// first byte.
type countWriter struct {
	w    io.Writer
	n    int64
	gate *gateWriter
}

func (c *countWriter) Write(p []byte) (int, error) {
	if c.gate != nil && len(p) > 0 && !c.gate.open.Load() {
		c.gate.open.Store(true)
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// gateWriter passes writes to w once opened and drops them before, so that the frame the
// encoder writes when it is closed without data does not reach the sink: a tool that wrote
// nothing leaves the sink untouched (a clone then fails with an error, not a stream).
type gateWriter struct {
	w    io.Writer
	open atomic.Bool
}

func (g *gateWriter) Write(p []byte) (int, error) {
	if !g.open.Load() {
		return len(p), nil
	}
	return g.w.Write(p)
}
