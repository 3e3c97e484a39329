package backup

import (
	"io"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"

	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// Compression settings. The encoder cuts the stream into sections of 4 × zstdWindow (2 MiB)
// that zstdConcurrency goroutines compress at the same time, each section starting with the
// last 64 KiB of the previous one as history (klauspost's concurrent blocks): one frame, as
// before, but using every core instead of about one. Memory is bounded by the sections in
// flight, whatever the size of the backup: about 20 MB when compressing, one window when
// decoding. A larger window gains next to nothing at the fastest level (0.04% smaller on the
// bench's data with 8 MiB) and makes every section 4 windows long.
const (
	zstdConcurrency = 2
	zstdWindow      = 512 << 10
	// zstdMaxWindow is the largest window Restore accepts, so that a damaged or hostile frame
	// header cannot make it allocate more. Backups taken with an 8 MiB window (before the
	// concurrent encoder) restore as well.
	zstdMaxWindow = 64 << 20
	// copyBuffer is the size of the buffer between the decoder and a tool's pipe (restore);
	// the encoder reads the backup tool's pipe into its own sections (Encoder.ReadFrom).
	copyBuffer = 1 << 20
)

// newEncoder returns the encoder of backup streams: fastest level, content checksum (the
// frame's xxhash, checked on decoding), concurrent sections.
func newEncoder(w io.Writer) (*zstd.Encoder, error) {
	return zstd.NewWriter(w, encoderOptions()...)
}

// encoderOptions are newEncoder's settings (BenchmarkBackupPipeline prices alternatives).
func encoderOptions() []zstd.EOption {
	return []zstd.EOption{
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderConcurrency(zstdConcurrency),
		zstd.WithWindowSize(zstdWindow),
		zstd.WithConcurrentBlocks(true),
		zstd.WithEncoderCRC(true),
	}
}

// newDecoder decodes synchronously (concurrency 1): it reads r only from the goroutine that
// reads the decoder, and zstd decodes faster than mbstream writes anyway.
func newDecoder(r io.Reader) (*zstd.Decoder, error) {
	return zstd.NewReader(r,
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxWindow(zstdMaxWindow),
		zstd.WithDecoderLowmem(true))
}

// storeWriter is what the encoder writes to: the upload (or Stream's writer), with a count
// and (when d is set) a digest of what it accepted, and a progress callback. It remembers the
// first write error, so that a sink failure is told from the tool's.
type storeWriter struct {
	w        io.Writer
	d        *objectstore.Digest // optional
	progress func(int64)
	n        int64

	mu  sync.Mutex
	err error
}

func (s *storeWriter) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	if s.d != nil {
		_, _ = s.d.Write(p[:n])
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

// countReader counts the raw bytes of the tool's stream; it opens gate (when set) before
// passing on the first byte.
type countReader struct {
	r    io.Reader
	n    int64
	gate *gateWriter
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 && c.gate != nil && !c.gate.open.Load() {
		c.gate.open.Store(true)
	}
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
