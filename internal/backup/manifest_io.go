package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// DataObjectKey is the key, inside a backup's prefix, of the compressed mbstream that
// mariadb-backup produced.
const DataObjectKey = "data.mbstream.zst"

// CompressionZstd is the only Compression written and read.
const CompressionZstd = "zstd"

// ErrIncomplete is wrapped by the errors of ReadManifest, Verify and Restore when a backup
// has no manifest: it never completed (or is being written), whatever objects it holds.
var ErrIncomplete = errors.New("no manifest: the backup never completed")

// ErrCorrupt is wrapped by the errors of Verify and Restore when a stored object does not
// match the manifest (size or sha256), is missing, or the manifest itself is unusable.
var ErrCorrupt = errors.New("backup is corrupt")

// ErrRedoLogCopy is wrapped by the error of a mariadb-backup run that fell behind copying
// the server's redo log ("Was only able to copy log from X to Y, not Z"). Under write load
// mariadb-backup 10.11 can read a block the server is still writing and stall on it even
// when the log is far from full (MDEV-39468, fixed in later releases), so a new attempt
// usually succeeds; Take makes up to takeAttempts.
var ErrRedoLogCopy = errors.New("mariadb-backup could not copy the redo log up to the backup's end")

// maxManifestSize bounds how much of a manifest object is read.
const maxManifestSize = 4 << 20

// normPrefix makes a backup prefix end in '/' unless it is empty.
func normPrefix(prefix string) string {
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		return prefix + "/"
	}
	return prefix
}

// ReadManifest reads and checks the manifest of the backup under prefix (a trailing '/' is
// added when missing). When there is none the error wraps ErrIncomplete; when it cannot be
// parsed or describes no usable backup, ErrCorrupt.
func ReadManifest(ctx context.Context, store objectstore.Store, prefix string) (*Manifest, error) {
	prefix = normPrefix(prefix)
	key := prefix + ManifestKey
	rc, err := store.Open(ctx, key)
	if errors.Is(err, objectstore.ErrNotFound) {
		return nil, fmt.Errorf("backup %s: %w", objectstore.Locate(store, prefix), ErrIncomplete)
	}
	if err != nil {
		return nil, fmt.Errorf("backup %s: reading the manifest: %w", objectstore.Locate(store, prefix), err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxManifestSize+1))
	if err != nil {
		return nil, fmt.Errorf("backup %s: reading the manifest: %w", objectstore.Locate(store, prefix), err)
	}
	if len(b) > maxManifestSize {
		return nil, fmt.Errorf("backup %s: %w: manifest is larger than %d bytes", objectstore.Locate(store, prefix), ErrCorrupt, maxManifestSize)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("backup %s: %w: manifest: %w", objectstore.Locate(store, prefix), ErrCorrupt, err)
	}
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("backup %s: %w: manifest: %w", objectstore.Locate(store, prefix), ErrCorrupt, err)
	}
	return &m, nil
}

// check refuses a manifest this code cannot restore.
func (m *Manifest) check() error {
	if m.Format < 1 || m.Format > ManifestFormat {
		return fmt.Errorf("format %d, this version reads 1 to %d", m.Format, ManifestFormat)
	}
	if m.Compression != CompressionZstd {
		return fmt.Errorf("compression %q, want %q", m.Compression, CompressionZstd)
	}
	if len(m.Objects) == 0 {
		return errors.New("no objects")
	}
	seen := map[string]bool{}
	for _, o := range m.Objects {
		switch {
		case o.Key == "" || o.Key == ManifestKey || strings.HasPrefix(o.Key, "/") || strings.Contains(o.Key, ".."):
			return fmt.Errorf("object key %q", o.Key)
		case seen[o.Key]:
			return fmt.Errorf("object %q listed twice", o.Key)
		case o.Size <= 0 || len(o.SHA256) != 64:
			return fmt.Errorf("object %q: size %d, sha256 %q", o.Key, o.Size, o.SHA256)
		}
		seen[o.Key] = true
	}
	if m.Flavor == FlavorMySQL {
		if m.GTIDPosition == "" {
			return nil
		}
		return checkMySQLGTIDSet(m.GTIDPosition)
	}
	if _, err := normalizeGTID(m.GTIDPosition); err != nil {
		return err
	}
	return nil
}

// writeManifest stores m as indented JSON under prefix+ManifestKey.
func writeManifest(ctx context.Context, store objectstore.Store, prefix string, m *Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	up, err := store.Create(ctx, prefix+ManifestKey)
	if err != nil {
		return err
	}
	if _, err := up.Write(b); err != nil {
		return errors.Join(err, up.Abort())
	}
	if _, err := up.Commit(); err != nil {
		return err
	}
	return nil
}
