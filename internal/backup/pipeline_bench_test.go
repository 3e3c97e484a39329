package backup

import (
	"bytes"
	"crypto/md5"
	"crypto/sha256"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// pipelineSampleEnv names a file holding a raw mariadb-backup stream for
// BenchmarkBackupPipeline; TestBenchBackup writes one there when it is set.
const pipelineSampleEnv = "DOLPHIN_BENCH_BACKUP_KEEP_STREAM"

// BenchmarkBackupPipeline prices each step of the agent's backup pipeline on a real stream in
// one process (no pipe, no HTTP, no S3 server): the encoder at Dolphin's settings and at the
// alternatives worth knowing, and the digests computed on its output (sha256 of the object,
// MD5 of every part for Content-MD5, CRC32C as S3's cheaper checksum would). MB/s is raw
// stream bytes per second for every step, so that the steps' costs add up; ratio is
// raw/compressed. Run:
//
//	DOLPHIN_BENCH_BACKUP_KEEP_STREAM=/tmp/s make bench-backup   # once, writes the sample
//	DOLPHIN_BENCH_BACKUP_KEEP_STREAM=/tmp/s go test -run '^$' -bench BackupPipeline -benchtime 2x ./internal/backup/
func BenchmarkBackupPipeline(b *testing.B) {
	path := os.Getenv(pipelineSampleEnv)
	if path == "" {
		b.Skipf("set %s to a raw mariadb-backup stream (TestBenchBackup writes one there when it is set)", pipelineSampleEnv)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	var out bytes.Buffer
	out.Grow(len(raw))
	encodeAll(b, raw, nil, &out)
	compressed := out.Bytes()

	encoders := []struct {
		name string
		opts []zstd.EOption // added to Dolphin's
	}{
		{"dolphin", nil},
		{"concurrency=1", []zstd.EOption{zstd.WithEncoderConcurrency(1)}},
		{"no-content-checksum", []zstd.EOption{zstd.WithEncoderCRC(false)}},
		{"no-entropy", []zstd.EOption{zstd.WithNoEntropyCompression(true)}},
		{"level=default", []zstd.EOption{zstd.WithEncoderLevel(zstd.SpeedDefault)}},
	}
	for _, e := range encoders {
		b.Run("encode/"+e.name, func(b *testing.B) {
			var out countWriter
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				out = countWriter{}
				encodeAll(b, raw, e.opts, &out)
			}
			b.ReportMetric(float64(len(raw))/float64(out.n), "ratio")
		})
	}
	digests := []struct {
		name string
		h    func() hash.Hash
		part int // the digest restarts every part bytes (0: one digest of everything)
	}{
		{"sha256-object", sha256.New, 0},
		{"md5-per-16MiB-part", md5.New, 16 << 20},
		{"crc32c-per-16MiB-part", func() hash.Hash { return crc32.New(crc32.MakeTable(crc32.Castagnoli)) }, 16 << 20},
	}
	for _, d := range digests {
		b.Run("digest/"+d.name, func(b *testing.B) {
			b.SetBytes(int64(len(raw))) // per raw byte, to add up with the encoder's figure
			for b.Loop() {
				h := d.h()
				for off := 0; off < len(compressed); {
					end := len(compressed)
					if d.part > 0 {
						end = min(end, off+d.part)
						h.Reset()
					}
					h.Write(compressed[off:end])
					off = end
				}
				_ = h.Sum(nil)
			}
		})
	}
}

// encodeAll compresses raw as Stream does (Encoder.ReadFrom a reader that gives pipe-sized
// reads) with Dolphin's encoder settings plus extra, into w.
func encodeAll(b *testing.B, raw []byte, extra []zstd.EOption, w io.Writer) {
	b.Helper()
	enc, err := zstd.NewWriter(w, append(encoderOptions(), extra...)...)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := enc.ReadFrom(&pipeReader{raw: raw}); err != nil {
		b.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		b.Fatal(err)
	}
}

// countWriter counts what is written to it and keeps nothing (a growing buffer would cost
// more than the encoder).
type countWriter struct{ n int }

func (c *countWriter) Write(p []byte) (int, error) { c.n += len(p); return len(p), nil }

// pipeReader hands out raw in reads of at most 64 KiB, a pipe's capacity.
type pipeReader struct{ raw []byte }

func (r *pipeReader) Read(p []byte) (int, error) {
	if len(r.raw) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), 64<<10)], r.raw)
	r.raw = r.raw[n:]
	return n, nil
}
