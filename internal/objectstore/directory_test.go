package objectstore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func newDir(t *testing.T) (Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := NewDirectory(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s, dir
}

func put(t *testing.T, s Store, key, data string) ObjectInfo {
	t.Helper()
	up, err := s.Create(t.Context(), key)
	if err != nil {
		t.Fatalf("Create(%q): %v", key, err)
	}
	if _, err := io.WriteString(up, data); err != nil {
		t.Fatalf("Write(%q): %v", key, err)
	}
	info, err := up.Commit()
	if err != nil {
		t.Fatalf("Commit(%q): %v", key, err)
	}
	return info
}

func read(t *testing.T, s Store, key string) string {
	t.Helper()
	rc, err := s.Open(t.Context(), key)
	if err != nil {
		t.Fatalf("Open(%q): %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading %q: %v", key, err)
	}
	return string(b)
}

// files lists every file under dir, hidden ones included, relative to dir.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDirectoryCommitMakesObjectVisible(t *testing.T) {
	s, dir := newDir(t)
	if got, want := s.Describe(), "file://"+dir+"/"; got != want {
		t.Errorf("Describe() = %q, want %q", got, want)
	}
	up, err := s.Create(t.Context(), "ns/cluster/b1/data.mbstream.zst")
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB, more than the buffer
	if _, err := up.Write(big); err != nil {
		t.Fatal(err)
	}
	// Not visible before Commit: only a hidden temporary file exists.
	if _, err := s.Stat(t.Context(), "ns/cluster/b1/data.mbstream.zst"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Stat before Commit: %v, want ErrNotFound", err)
	}
	if l, err := s.List(t.Context(), ""); err != nil || len(l) != 0 {
		t.Fatalf("List before Commit: %v %v, want nothing", l, err)
	}
	fs := files(t, dir)
	if len(fs) != 1 || !strings.HasPrefix(filepath.Base(fs[0]), tempPrefix) || filepath.Dir(fs[0]) != "ns/cluster/b1" {
		t.Fatalf("files before Commit: %v, want one temporary file next to the key", fs)
	}
	info, err := up.Commit()
	if err != nil {
		t.Fatal(err)
	}
	if info.Key != "ns/cluster/b1/data.mbstream.zst" || info.Size != int64(len(big)) || info.Modified.IsZero() {
		t.Errorf("Commit() = %+v", info)
	}
	if got := read(t, s, info.Key); got != string(big) {
		t.Errorf("read back %d bytes, want %d", len(got), len(big))
	}
	if fs := files(t, dir); !slices.Equal(fs, []string{"ns/cluster/b1/data.mbstream.zst"}) {
		t.Errorf("files after Commit: %v", fs)
	}
	st, err := s.Stat(t.Context(), info.Key)
	if err != nil || st.Size != info.Size {
		t.Errorf("Stat = %+v, %v", st, err)
	}
	if err := up.Abort(); err != nil {
		t.Errorf("Abort after Commit: %v", err)
	}
	if _, err := s.Stat(t.Context(), info.Key); err != nil {
		t.Errorf("Abort after Commit removed the object: %v", err)
	}
	if _, err := up.Commit(); err == nil {
		t.Error("a second Commit succeeded")
	}
}

func TestDirectoryAbortLeavesNothing(t *testing.T) {
	s, dir := newDir(t)
	put(t, s, "b/data", "old")
	up, err := s.Create(t.Context(), "b/data")
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(up, "new half")
	if err := up.Abort(); err != nil {
		t.Fatal(err)
	}
	if got := read(t, s, "b/data"); got != "old" {
		t.Errorf("after an aborted overwrite: %q, want the old object", got)
	}
	if fs := files(t, dir); !slices.Equal(fs, []string{"b/data"}) {
		t.Errorf("files after Abort: %v", fs)
	}
	if _, err := up.Write([]byte("x")); err == nil {
		t.Error("Write after Abort succeeded")
	}
}

func TestDirectoryCancelledUploadFails(t *testing.T) {
	s, dir := newDir(t)
	ctx, cancel := context.WithCancel(t.Context())
	up, err := s.Create(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(up, "abc")
	cancel()
	if _, err := up.Write([]byte("x")); !errors.Is(err, context.Canceled) {
		t.Errorf("Write after cancel: %v", err)
	}
	if _, err := up.Commit(); !errors.Is(err, context.Canceled) {
		t.Errorf("Commit after cancel: %v", err)
	}
	if fs := files(t, dir); len(fs) != 0 {
		t.Errorf("files after a cancelled upload: %v", fs)
	}
}

func TestDirectoryListInKeyOrder(t *testing.T) {
	s, _ := newDir(t)
	// '/' sorts after '-' and '.', so walking directories in name order is not key order.
	for _, k := range []string{"a/b", "a-c", "a.d/x", "a/a/z", "b", "ns/c1/b2/manifest.json", "ns/c1/b2/data", "ns/c10/x"} {
		put(t, s, k, k)
	}
	up, _ := s.Create(t.Context(), "a/pending") // a temporary file, never listed
	defer up.Abort()
	keys := func(prefix string) []string {
		l, err := s.List(t.Context(), prefix)
		if err != nil {
			t.Fatalf("List(%q): %v", prefix, err)
		}
		var out []string
		for _, o := range l {
			if o.Size != int64(len(o.Key)) {
				t.Errorf("%s: size %d", o.Key, o.Size)
			}
			out = append(out, o.Key)
		}
		return out
	}
	for prefix, want := range map[string][]string{
		"":          {"a-c", "a.d/x", "a/a/z", "a/b", "b", "ns/c1/b2/data", "ns/c1/b2/manifest.json", "ns/c10/x"},
		"a":         {"a-c", "a.d/x", "a/a/z", "a/b"},
		"a/":        {"a/a/z", "a/b"},
		"ns/c1/":    {"ns/c1/b2/data", "ns/c1/b2/manifest.json"},
		"ns/c1":     {"ns/c1/b2/data", "ns/c1/b2/manifest.json", "ns/c10/x"},
		"ns/c1/b2/": {"ns/c1/b2/data", "ns/c1/b2/manifest.json"},
		"nothing/":  nil,
		"b/":        nil, // b is an object, not a directory
	} {
		if got := keys(prefix); !slices.Equal(got, want) {
			t.Errorf("List(%q) = %q, want %q", prefix, got, want)
		}
	}
}

func TestDirectoryRejectsEscapingKeys(t *testing.T) {
	s, dir := newDir(t)
	outside := filepath.Join(filepath.Dir(dir), filepath.Base(dir)+"-outside")
	for _, k := range []string{"", "..", "../x", "a/../../x", "/etc/passwd", "a//b", "a/./b", "a/", tempPrefix + "x", "a/" + tempPrefix + "x", "a\x00b"} {
		if _, err := s.Create(t.Context(), k); err == nil {
			t.Errorf("Create(%q) succeeded", k)
		}
		if _, err := s.Open(t.Context(), k); err == nil || errors.Is(err, ErrNotFound) {
			t.Errorf("Open(%q): %v, want an invalid-key error", k, err)
		}
		if _, err := s.Stat(t.Context(), k); err == nil {
			t.Errorf("Stat(%q) succeeded", k)
		}
		if err := s.Delete(t.Context(), k); err == nil {
			t.Errorf("Delete(%q) succeeded", k)
		}
	}
	for _, p := range []string{"../", "/", "a/../"} {
		if _, err := s.List(t.Context(), p); err == nil {
			t.Errorf("List(%q) succeeded", p)
		}
	}
	// A symbolic link inside the directory does not lead out of it.
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(outside) })
	os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644)
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(t.Context(), "link/secret"); err == nil {
		t.Error("Open through a symlink out of the directory succeeded")
	}
	if _, err := s.Create(t.Context(), "link/new"); err == nil {
		t.Error("Create through a symlink out of the directory succeeded")
	}
	if _, err := os.Stat(filepath.Join(outside, "new")); err == nil {
		t.Error("a file was written outside the directory")
	}
}

func TestDirectoryNotFoundAndDelete(t *testing.T) {
	s, dir := newDir(t)
	if _, err := s.Open(t.Context(), "no/such"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open: %v, want ErrNotFound", err)
	}
	if _, err := s.Stat(t.Context(), "no/such"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Stat: %v, want ErrNotFound", err)
	}
	put(t, s, "ns/c/b1/data", "d")
	put(t, s, "ns/c/b1/manifest.json", "m")
	put(t, s, "ns/c/b2/data", "d")
	if _, err := s.Open(t.Context(), "ns/c"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open of a directory: %v, want ErrNotFound", err)
	}
	if err := s.Delete(t.Context(), "ns/c/b1/data", "ns/c/b1/manifest.json", "ns/c/b1/never"); err != nil {
		t.Fatal(err)
	}
	if fs := files(t, dir); !slices.Equal(fs, []string{"ns/c/b2/data"}) {
		t.Errorf("files after Delete: %v", fs)
	}
	if _, err := os.Stat(filepath.Join(dir, "ns/c/b1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the emptied directory is still there: %v", err)
	}
	if err := s.Delete(t.Context(), "ns/c/b2/data"); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("the store's directory still holds %v", ents)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("the store's own directory was removed: %v", err)
	}
}

func TestNewDirectoryNeedsADirectory(t *testing.T) {
	dir := t.TempDir()
	if _, err := NewDirectory(filepath.Join(dir, "missing")); err == nil {
		t.Error("NewDirectory of a missing directory succeeded")
	}
	f := filepath.Join(dir, "file")
	os.WriteFile(f, nil, 0o644)
	if _, err := NewDirectory(f); err == nil {
		t.Error("NewDirectory of a file succeeded")
	}
	if _, err := NewDirectory(""); err == nil {
		t.Error("NewDirectory(\"\") succeeded")
	}
	s, err := NewDirectory(dir + "/./")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Describe(); got != "file://"+dir+"/" {
		t.Errorf("NewDirectory(%q/./).Describe() = %q", dir, got)
	}
}
