package objectstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
)

// mkdirs creates dir and its missing parents inside r and returns the ones it created,
// outermost first.
func mkdirs(r *os.Root, dir string) ([]string, error) {
	if dir == "." {
		return nil, nil
	}
	var created []string
	cur := ""
	for _, e := range strings.Split(dir, "/") {
		cur = path.Join(cur, e)
		err := r.Mkdir(cur, 0o750)
		switch {
		case err == nil:
			created = append(created, cur)
		case errors.Is(err, fs.ErrExist):
			st, statErr := r.Stat(cur)
			if statErr != nil {
				return created, statErr
			}
			if !st.IsDir() {
				return created, fmt.Errorf("%s is a file, not a directory", cur)
			}
		default:
			return created, err
		}
	}
	return created, nil
}

// storeFull wraps err with ErrStoreFull and what to do when it says that the file system is
// full (ENOSPC) or a quota is reached (EDQUOT); other errors are returned as they are.
func storeFull(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("%w: %w: enlarge the volume (PVC) or keep fewer backups", err, ErrStoreFull)
	}
	return err
}

// depth is the number of elements of a cleaned relative directory path; "." has none.
func depth(dir string) int {
	if dir == "." {
		return 0
	}
	return strings.Count(dir, "/") + 1
}

// syncDir fsyncs the directory dir inside r, so that entries created or renamed in it last.
func syncDir(r *os.Root, dir string) error {
	f, err := r.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

type dirUpload struct {
	ctx     context.Context
	store   *directory
	root    *os.Root
	key     string
	tmp     string
	f       *os.File
	w       *bufio.Writer
	created []string // directories Create made, whose parents Commit fsyncs
	done    bool
}

// Write buffers p towards the temporary file. It fails once the Create context is done.
func (u *dirUpload) Write(p []byte) (int, error) {
	if u.done {
		return 0, fmt.Errorf("%s: write to %s after Commit or Abort", u.store.Describe(), u.key)
	}
	if err := u.ctx.Err(); err != nil {
		return 0, fmt.Errorf("%s: writing %s: %w", u.store.Describe(), u.key, err)
	}
	n, err := u.w.Write(p)
	if err != nil {
		return n, fmt.Errorf("%s: writing %s: %w", u.store.Describe(), u.key, storeFull(err))
	}
	return n, nil
}

// Commit flushes and fsyncs the file, renames it onto the key and fsyncs the directories
// whose entries changed. On failure the temporary file is removed and no object appears.
func (u *dirUpload) Commit() (ObjectInfo, error) {
	if u.done {
		return ObjectInfo{}, fmt.Errorf("%s: %s committed or aborted already", u.store.Describe(), u.key)
	}
	info, err := u.commit()
	if err != nil {
		_ = u.Abort()
		return ObjectInfo{}, fmt.Errorf("%s: committing %s: %w", u.store.Describe(), u.key, storeFull(err))
	}
	return info, nil
}

func (u *dirUpload) commit() (ObjectInfo, error) {
	if err := u.ctx.Err(); err != nil {
		return ObjectInfo{}, err
	}
	if err := u.w.Flush(); err != nil {
		return ObjectInfo{}, err
	}
	if err := u.f.Sync(); err != nil {
		return ObjectInfo{}, err
	}
	st, err := u.f.Stat()
	if err != nil {
		return ObjectInfo{}, err
	}
	if err := u.f.Close(); err != nil {
		return ObjectInfo{}, err
	}
	if err := u.root.Rename(u.tmp, u.key); err != nil {
		return ObjectInfo{}, err
	}
	u.done = true
	defer u.root.Close()
	dirs := []string{path.Dir(u.key)}
	for _, c := range u.created {
		dirs = append(dirs, path.Dir(c))
	}
	for _, dir := range dirs {
		if err := syncDir(u.root, dir); err != nil {
			return ObjectInfo{}, fmt.Errorf("fsync of directory %s: %w", dir, err)
		}
	}
	return ObjectInfo{Key: u.key, Size: st.Size(), Modified: st.ModTime()}, nil
}

// Abort removes the temporary file. After a successful Commit it does nothing.
func (u *dirUpload) Abort() error {
	if u.done {
		return nil
	}
	u.done = true
	defer u.root.Close()
	_ = u.f.Close()
	if err := u.root.Remove(u.tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: aborting %s: %w", u.store.Describe(), u.key, err)
	}
	return nil
}
