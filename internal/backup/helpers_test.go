package backup

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// recordingStore wraps a Store and records the keys of committed uploads, in order.
type recordingStore struct {
	objectstore.Store
	mu        sync.Mutex
	commits   []string
	failAfter int64  // when > 0, uploads fail once they were given this many bytes
	failKey   string // when set, the Commit of this key fails (after storing the object)
}

func (s *recordingStore) Create(ctx context.Context, key string) (objectstore.Upload, error) {
	up, err := s.Store.Create(ctx, key)
	if err != nil {
		return nil, err
	}
	return &recordingUpload{Upload: up, s: s, key: key}, nil
}

func (s *recordingStore) committed() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.commits)
}

type recordingUpload struct {
	objectstore.Upload
	s   *recordingStore
	key string
	n   int64
}

var errInjected = errors.New("injected upload failure")

func (u *recordingUpload) Write(p []byte) (int, error) {
	if u.s.failAfter > 0 && u.n+int64(len(p)) > u.s.failAfter {
		return 0, errInjected
	}
	n, err := u.Upload.Write(p)
	u.n += int64(n)
	return n, err
}

func (u *recordingUpload) Commit() (objectstore.ObjectInfo, error) {
	info, err := u.Upload.Commit()
	if err == nil && u.key == u.s.failKey {
		return objectstore.ObjectInfo{}, errInjected // as if the reply was lost
	}
	if err == nil {
		u.s.mu.Lock()
		u.s.commits = append(u.s.commits, u.key)
		u.s.mu.Unlock()
	}
	return info, err
}

func newStore(t *testing.T) (objectstore.Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := objectstore.NewDirectory(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s, dir
}

// storeFiles lists every file under a directory store's root, hidden ones included.
func storeFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

// copyFile copies a stored object to another key of the same directory store.
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o640); err != nil {
		t.Fatal(err)
	}
}

func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}
