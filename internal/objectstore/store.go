// Package objectstore is where backups go: an S3-compatible bucket or a directory (a mounted
// volume). Both are used through Store, which writes objects as streams of unknown length with
// bounded memory, so a backup of any size is never staged on disk or held in memory.
//
// Keys are relative to the store's prefix and use '/' as separator; a Store never reads or
// writes outside its prefix.
package objectstore

import (
	"context"
	"errors"
	"io"
	"time"
)

// ErrNotFound is returned (wrapped) by Open and Stat when the object does not exist.
var ErrNotFound = errors.New("object not found")

// ErrStoreFull is returned (wrapped) when an object cannot be written because the store has
// no room left: the volume of a directory store (or of a store server) is full or its quota
// is reached.
var ErrStoreFull = errors.New("the backup store is full")

// Store is one backup location.
type Store interface {
	// Create starts writing the object key. Nothing is visible under key until Commit
	// succeeds; Abort (or a failed Commit) leaves no object and no billable leftovers where
	// the backend allows (an aborted multipart upload).
	Create(ctx context.Context, key string) (Upload, error)
	// Open reads the object key; the error wraps ErrNotFound when there is none.
	Open(ctx context.Context, key string) (io.ReadCloser, error)
	// Stat describes the object key; the error wraps ErrNotFound when there is none.
	Stat(ctx context.Context, key string) (ObjectInfo, error)
	// List returns every object whose key starts with prefix, in key order.
	List(ctx context.Context, prefix string) ([]ObjectInfo, error)
	// Delete removes the objects; keys that do not exist are not an error.
	Delete(ctx context.Context, keys ...string) error
	// Describe names the location for messages and status, e.g. "s3://bucket/prefix/" or
	// "file:///backups/"; it never contains credentials.
	Describe() string
}

// Upload is an object being written. Write streams data; exactly one of Commit or Abort must
// be called. Memory use is bounded by the store's part size times its concurrency,
// whatever is written.
type Upload interface {
	io.Writer
	// Commit finishes the object and makes it visible under its key.
	Commit() (ObjectInfo, error)
	// Abort discards what was written.
	Abort() error
}

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	// Key is relative to the store's prefix.
	Key string
	// Size in bytes.
	Size int64
	// Modified is when the object was last written.
	Modified time.Time
}

// Locate names the object (or key prefix) key of s for messages, e.g.
// "s3://bucket/prefix/key at https://endpoint" or "file:///backups/key"; never credentials.
func Locate(s Store, key string) string {
	if l, ok := s.(interface{ locate(key string) string }); ok {
		return l.locate(key)
	}
	return s.Describe() + key
}
