package agent

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// recheckEvery is how often a watched file is re-read even when its modification time and
// size look unchanged (a rewrite within the file system's timestamp granularity).
const recheckEvery = time.Minute

// fileStamp identifies a version of a file cheaply: its modification time, size and (where
// the platform has one) inode, which tells a file renamed over the old one (a Kubernetes
// Secret update) even within the file system's timestamp granularity.
type fileStamp struct {
	mod   time.Time
	size  int64
	inode uint64
}

// reloading is a value parsed from files and parsed again when one of them changes. Kubernetes
// updates a mounted Secret by swapping a symlink, which os.Stat follows, so a rotated Secret
// shows up as a new stamp. When a new version does not parse (e.g. a certificate whose key
// has not been written yet), the last good value is kept and the files are retried next time.
type reloading[T any] struct {
	paths []string
	parse func(contents [][]byte) (T, error)
	log   logr.Logger
	now   func() time.Time

	mu        sync.Mutex
	value     T
	stamps    []fileStamp
	checkedAt time.Time
}

// newReloading loads the files once; an error here means there is no value to start with.
func newReloading[T any](log logr.Logger, parse func([][]byte) (T, error), paths ...string) (*reloading[T], error) {
	r := &reloading[T]{paths: paths, parse: parse, log: log, now: time.Now}
	stamps, err := r.stat()
	if err != nil {
		return nil, err
	}
	if err := r.load(stamps); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *reloading[T]) stat() ([]fileStamp, error) {
	stamps := make([]fileStamp, len(r.paths))
	for i, p := range r.paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", p, err)
		}
		stamps[i] = fileStamp{fi.ModTime(), fi.Size(), inode(fi)}
	}
	return stamps, nil
}

// load reads and parses the files; on success it becomes the value. Called with mu held or
// before r is shared.
func (r *reloading[T]) load(stamps []fileStamp) error {
	contents := make([][]byte, len(r.paths))
	for i, p := range r.paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("reading %s: %w", p, err)
		}
		contents[i] = b
	}
	v, err := r.parse(contents)
	if err != nil {
		return err
	}
	r.value, r.stamps, r.checkedAt = v, stamps, r.now()
	return nil
}

// get returns the current value, re-reading the files first when they changed.
func (r *reloading[T]) get() T {
	r.mu.Lock()
	defer r.mu.Unlock()
	stamps, err := r.stat()
	if err != nil {
		r.log.Error(err, "Keeping the last good version", "files", r.paths)
		return r.value
	}
	changed := !equalStamps(stamps, r.stamps)
	if changed || r.now().Sub(r.checkedAt) >= recheckEvery {
		if err := r.load(stamps); err != nil {
			r.log.Error(err, "Keeping the last good version", "files", r.paths)
		} else if changed {
			r.log.Info("Reloaded", "files", r.paths)
		}
	}
	return r.value
}

func equalStamps(a, b []fileStamp) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].mod.Equal(b[i].mod) || a[i].size != b[i].size || a[i].inode != b[i].inode {
			return false
		}
	}
	return true
}

// tokenDigest is the SHA-256 of a bearer token: comparing digests takes the same time whatever
// the lengths of the tokens compared.
type tokenDigest [sha256.Size]byte

// parseToken reads a token file: the token with surrounding white space (a trailing newline)
// removed; an empty token is an error.
func parseToken(contents [][]byte) (tokenDigest, error) {
	tok := bytes.TrimSpace(contents[0])
	if len(tok) == 0 {
		return tokenDigest{}, errors.New("the token file is empty")
	}
	return sha256.Sum256(tok), nil
}

// matches compares the presented token with the expected one in constant time.
func (d tokenDigest) matches(presented string) bool {
	p := sha256.Sum256([]byte(presented))
	return subtle.ConstantTimeCompare(d[:], p[:]) == 1
}

// parseKeyPair parses a PEM certificate (chain) and its key.
func parseKeyPair(contents [][]byte) (*tls.Certificate, error) {
	c, err := tls.X509KeyPair(contents[0], contents[1])
	if err != nil {
		return nil, fmt.Errorf("loading the TLS certificate: %w", err)
	}
	return &c, nil
}

// lazyToken is a token file loaded when first needed and reloaded as it changes: the
// scrapers' token may reach the mounted Secret after the agent started.
type lazyToken struct {
	path string
	log  logr.Logger

	mu sync.Mutex
	r  *reloading[tokenDigest]
}

// get returns the token's digest, or why there is none yet.
func (l *lazyToken) get() (tokenDigest, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.r == nil {
		r, err := newReloading(l.log, parseToken, l.path)
		if err != nil {
			return tokenDigest{}, err
		}
		l.r = r
	}
	return l.r.get(), nil
}
