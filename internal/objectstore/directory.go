package objectstore

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// tempPrefix starts the name of every file being written by a directory Upload. List never
// shows such files, and keys whose last element starts with it are refused.
const tempPrefix = ".upload-"

// dirWriteBuffer is how much a directory Upload buffers before writing to its file.
const dirWriteBuffer = 256 << 10

// directory is a Store over a local directory, typically a mounted volume. Every access goes
// through an os.Root, so neither a key nor a symbolic link inside the directory can reach a
// file outside it.
type directory struct {
	dir string // absolute, cleaned
}

// NewDirectory returns a Store whose objects are files under dir, a key's '/' separating
// sub-directories. dir must exist (it is a mounted volume; it is not created, so that a
// missing mount is an error rather than writes into the container's file system).
//
// An object is written to a hidden temporary file next to its final name and renamed onto it
// by Commit after an fsync of the file, then the directory is fsynced: an object is either
// absent or complete, even across a crash.
func NewDirectory(dir string) (Store, error) {
	if dir == "" {
		return nil, errors.New("directory store: no directory given")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("directory store %s: %w", dir, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("directory store: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("directory store: %s is not a directory", abs)
	}
	return &directory{dir: filepath.Clean(abs)}, nil
}

// Describe returns "file://<dir>/".
func (d *directory) Describe() string {
	return "file://" + strings.TrimSuffix(d.dir, "/") + "/"
}

func (d *directory) root() (*os.Root, error) {
	r, err := os.OpenRoot(d.dir)
	if err != nil {
		return nil, fmt.Errorf("directory store: %w", err)
	}
	return r, nil
}

// checkKey refuses keys that are empty, absolute, not in canonical form ("a//b", "a/./b",
// "a/", ".."), contain NUL, or name a temporary file.
func checkKey(key string) error {
	if err := checkPrefix(key); err != nil {
		return err
	}
	if key == "" || strings.HasSuffix(key, "/") {
		return fmt.Errorf("invalid object key %q: empty name", key)
	}
	if strings.HasPrefix(path.Base(key), tempPrefix) {
		return fmt.Errorf("invalid object key %q: names starting with %q are reserved for uploads", key, tempPrefix)
	}
	return nil
}

// checkPrefix is checkKey for a List prefix: the empty prefix and a trailing '/' are allowed.
func checkPrefix(prefix string) error {
	if strings.HasPrefix(prefix, "/") {
		return fmt.Errorf("invalid object key %q: absolute", prefix)
	}
	if strings.ContainsRune(prefix, 0) {
		return fmt.Errorf("invalid object key %q: contains NUL", prefix)
	}
	elems := strings.Split(prefix, "/")
	for i, e := range elems {
		last := i == len(elems)-1
		switch {
		case e == "" && !last:
			return fmt.Errorf("invalid object key %q: empty path element", prefix)
		case e == "." || e == "..":
			return fmt.Errorf("invalid object key %q: %q path element", prefix, e)
		}
	}
	return nil
}

// Create starts writing key to a hidden temporary file in key's directory, creating the
// directories it needs.
func (d *directory) Create(ctx context.Context, key string) (Upload, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r, err := d.root()
	if err != nil {
		return nil, err
	}
	parent := path.Dir(key)
	created, err := mkdirs(r, parent)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("%s: creating the directory of %s: %w", d.Describe(), key, storeFull(err))
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := path.Join(parent, tempPrefix+path.Base(key)+"-"+hex.EncodeToString(rnd[:]))
	f, err := r.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("%s: creating %s: %w", d.Describe(), key, storeFull(err))
	}
	return &dirUpload{
		ctx: ctx, store: d, root: r, key: key, tmp: tmp, f: f,
		w: bufio.NewWriterSize(f, dirWriteBuffer), created: created,
	}, nil
}

// Open reads key; the reader fails once ctx is done.
func (d *directory) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	r, err := d.root()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	f, err := r.Open(key)
	if err != nil {
		return nil, d.notFound(key, err)
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: %s is not a regular file: %w", d.Describe(), key, ErrNotFound)
	}
	return &ctxReader{ctx: ctx, f: f}, nil
}

func (d *directory) notFound(key string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %s: %w", d.Describe(), key, errors.Join(ErrNotFound, err))
	}
	return fmt.Errorf("%s: %s: %w", d.Describe(), key, err)
}

type ctxReader struct {
	ctx context.Context
	f   *os.File
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.f.Read(p)
}

func (c *ctxReader) Close() error { return c.f.Close() }

// Stat describes key.
func (d *directory) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	if err := checkKey(key); err != nil {
		return ObjectInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		return ObjectInfo{}, err
	}
	r, err := d.root()
	if err != nil {
		return ObjectInfo{}, err
	}
	defer r.Close()
	st, err := r.Stat(key)
	if err != nil {
		return ObjectInfo{}, d.notFound(key, err)
	}
	if !st.Mode().IsRegular() {
		return ObjectInfo{}, fmt.Errorf("%s: %s is not a regular file: %w", d.Describe(), key, ErrNotFound)
	}
	return ObjectInfo{Key: key, Size: st.Size(), Modified: st.ModTime()}, nil
}

// List walks the directories under prefix, skipping temporary files and anything but
// regular files, and returns the objects in key order.
func (d *directory) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	if err := checkPrefix(prefix); err != nil {
		return nil, err
	}
	r, err := d.root()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	start := "."
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		start = prefix[:i]
	}
	var out []ObjectInfo
	err = fs.WalkDir(r.FS(), start, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if p == start && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)) {
				return fs.SkipAll
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if e.IsDir() {
			// Skip directories that cannot hold a match.
			if p != start && !strings.HasPrefix(p+"/", prefix) && !strings.HasPrefix(prefix, p+"/") {
				return fs.SkipDir
			}
			return nil
		}
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), tempPrefix) || !strings.HasPrefix(p, prefix) {
			return nil
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // deleted meanwhile
		}
		if err != nil {
			return err
		}
		out = append(out, ObjectInfo{Key: p, Size: info.Size(), Modified: info.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: listing %q: %w", d.Describe(), prefix, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Delete removes the keys, then the directories the removals left empty, and fsyncs the
// directories that changed.
func (d *directory) Delete(ctx context.Context, keys ...string) error {
	for _, k := range keys {
		if err := checkKey(k); err != nil {
			return err
		}
	}
	r, err := d.root()
	if err != nil {
		return err
	}
	defer r.Close()
	dirs := map[string]bool{}
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := r.Remove(k); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s: deleting %s: %w", d.Describe(), k, err)
		}
		for dir := path.Dir(k); ; dir = path.Dir(dir) {
			dirs[dir] = true
			if dir == "." {
				break
			}
		}
	}
	// Deepest first, so that a parent is empty once its children are gone.
	order := make([]string, 0, len(dirs))
	for dir := range dirs {
		order = append(order, dir)
	}
	sort.Slice(order, func(i, j int) bool {
		if di, dj := depth(order[i]), depth(order[j]); di != dj {
			return di > dj
		}
		return order[i] < order[j]
	})
	for _, dir := range order {
		if dir != "." && r.Remove(dir) == nil {
			continue // removed: its parent is in the list and is synced
		}
		if err := syncDir(r, dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s: fsync of %s: %w", d.Describe(), dir, err)
		}
	}
	return nil
}
