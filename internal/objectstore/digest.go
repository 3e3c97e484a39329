package objectstore

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
)

// Digest counts and hashes (sha256) the bytes written to it: the size and checksum a manifest
// records for an object, and what reading the object back is compared with.
type Digest struct {
	h hash.Hash
	n int64
}

// NewDigest returns an empty Digest.
func NewDigest() *Digest { return &Digest{h: sha256.New()} }

// Write adds p; it never fails.
func (d *Digest) Write(p []byte) (int, error) {
	d.h.Write(p)
	d.n += int64(len(p))
	return len(p), nil
}

// Size is the number of bytes written so far.
func (d *Digest) Size() int64 { return d.n }

// SHA256 is the hex sha256 of the bytes written so far.
func (d *Digest) SHA256() string { return hex.EncodeToString(d.h.Sum(nil)) }

// DigestWriter writes to W and adds to Digest what W accepted.
type DigestWriter struct {
	W      io.Writer
	Digest *Digest
}

// NewDigestWriter returns a DigestWriter to w with a new Digest.
func NewDigestWriter(w io.Writer) *DigestWriter { return &DigestWriter{W: w, Digest: NewDigest()} }

func (w *DigestWriter) Write(p []byte) (int, error) {
	n, err := w.W.Write(p)
	_, _ = w.Digest.Write(p[:n])
	return n, err
}

// DigestReader reads from R, adds what it read to Digest, reports each read's size to
// Progress (when set), and remembers the first read error other than io.EOF (Err), so that a
// failing store is told from damaged content.
type DigestReader struct {
	R        io.Reader
	Digest   *Digest
	Progress func(int64)
	err      error
}

// NewDigestReader returns a DigestReader of r with a new Digest.
func NewDigestReader(r io.Reader, progress func(int64)) *DigestReader {
	return &DigestReader{R: r, Digest: NewDigest(), Progress: progress}
}

func (r *DigestReader) Read(p []byte) (int, error) {
	n, err := r.R.Read(p)
	_, _ = r.Digest.Write(p[:n])
	if n > 0 && r.Progress != nil {
		r.Progress(int64(n))
	}
	if err != nil && err != io.EOF && r.err == nil {
		r.err = err
	}
	return n, err
}

// Err is the first error other than io.EOF that reading R returned.
func (r *DigestReader) Err() error { return r.err }
