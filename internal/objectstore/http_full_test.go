package objectstore_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// fullHint is what a full store's error says to do.
const fullHint = "enlarge the volume (PVC) or keep fewer backups"

// smallVolume mounts a 1 MiB tmpfs on a new temporary directory, unmounted when the test
// ends. The test is skipped only when mounting is not permitted (not root, or no
// CAP_SYS_ADMIN).
func smallVolume(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	// syscall.Mount rather than mount(8), so that EPERM is told apart from other failures.
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		if errors.Is(err, syscall.EPERM) {
			t.Skipf("mounting a 1 MiB tmpfs on %s is not permitted here (%v): run the test as root to check a full volume", dir, err)
		}
		t.Fatalf("mounting a 1 MiB tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
	return dir
}

// fillUp writes 4 MiB to key, into a store with 1 MiB of room, and returns the error of Write
// or Commit (the upload is aborted after a failed Write).
func fillUp(t *testing.T, st objectstore.Store, key string) error {
	t.Helper()
	up, err := st.Create(t.Context(), key)
	if err != nil {
		return err
	}
	if err := writeChunks(up, randomBytes(4<<20)); err != nil {
		if aerr := up.Abort(); aerr != nil {
			t.Errorf("Abort after the failed Write: %v", aerr)
		}
		return err
	}
	_, err = up.Commit()
	return err
}

func checkFull(t *testing.T, err error) {
	t.Helper()
	t.Logf("writing 4 MiB into 1 MiB: %v", err)
	if !errors.Is(err, objectstore.ErrStoreFull) || !strings.Contains(err.Error(), fullHint) {
		t.Fatalf("writing 4 MiB into 1 MiB: %v; want ErrStoreFull saying %q", err, fullHint)
	}
}

// TestHTTPDirectoryFull: a directory store on a full volume fails with ErrStoreFull and says
// what to do; the failed upload leaves no file and an older object is untouched.
func TestHTTPDirectoryFull(t *testing.T) {
	dir := smallVolume(t)
	st, err := objectstore.NewDirectory(dir)
	if err != nil {
		t.Fatal(err)
	}
	old := randomBytes(100 << 10)
	httpPut(t, st, "old/backup", old)
	checkFull(t, fillUp(t, st, "new/backup"))
	if objects, temps := walk(t, dir); len(temps) != 0 || !slices.Equal(objects, []string{"old/backup"}) {
		t.Errorf("left on the volume: objects %q, temporary files %q", objects, temps)
	}
	if got := httpGet(t, st, "old/backup"); !bytes.Equal(got, old) {
		t.Error("the older object changed")
	}
	// Room is back once the upload is gone.
	httpPut(t, st, "after", randomBytes(100<<10))
}

// TestHTTPStoreServerFull: the same through a store server: the client's error wraps
// ErrStoreFull and carries the server's advice, and the server leaves nothing.
func TestHTTPStoreServerFull(t *testing.T) {
	s := startHTTPServer(t, smallVolume(t))
	st := s.client(t, nil)
	old := randomBytes(100 << 10)
	httpPut(t, st, "old/backup", old)
	err := fillUp(t, st, "new/backup")
	checkFull(t, err)
	if !strings.Contains(err.Error(), st.Describe()) || !strings.Contains(err.Error(), "507 Insufficient Storage") {
		t.Errorf("the error does not name the store server and its answer: %v", err)
	}
	s.assertNothingLeft(t, "old/backup")
	if got := httpGet(t, st, "old/backup"); !bytes.Equal(got, old) {
		t.Error("the older object changed")
	}

	// Writing on after the server has answered: Write returns the answer (the client does
	// not stream the rest of a backup for nothing).
	up, err := st.Create(t.Context(), "new/backup")
	if err != nil {
		t.Fatal(err)
	}
	chunk := randomBytes(1 << 20)
	deadline := time.Now().Add(30 * time.Second)
	for err == nil && time.Now().Before(deadline) {
		_, err = up.Write(chunk)
	}
	_ = up.Abort()
	checkFull(t, err)
	s.assertNothingLeft(t, "old/backup")
	httpPut(t, st, "after", randomBytes(100<<10))
}
