package podcmd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCopyBinary(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	dest := filepath.Join(dir, "dolphin")
	// An older binary is replaced, not written into (it may be running).
	if err := os.WriteFile(dest, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	oldInode, _ := os.Stat(dest)

	out, err := run(t, "copy-binary", dest)
	if err != nil {
		t.Fatalf("dolphin copy-binary: %v", err)
	}
	if !strings.Contains(out, dest) {
		t.Errorf("copy-binary printed %q, want the destination", out)
	}
	check := func(path string) {
		t.Helper()
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s has %d bytes, want the %d of the running executable", path, len(got), len(want))
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o755 {
			t.Errorf("%s has mode %s, want 0755", path, fi.Mode().Perm())
		}
	}
	check(dest)
	if fi, _ := os.Stat(dest); os.SameFile(fi, oldInode) {
		t.Error("the old file was written in place, want it replaced by a rename")
	}

	// A directory as DEST: the copy is DEST/dolphin. No temporary file is left behind.
	sub := filepath.Join(dir, "bin")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "copy-binary", sub); err != nil {
		t.Fatal(err)
	}
	check(filepath.Join(sub, "dolphin"))
	for _, d := range []string{dir, sub} {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if strings.Contains(e.Name(), ".tmp-") {
				t.Errorf("temporary file %s left in %s", e.Name(), d)
			}
		}
	}

	if _, err := run(t, "copy-binary", filepath.Join(dir, "missing", "dolphin")); err == nil {
		t.Error("copy-binary into a missing directory succeeded")
	}
	if _, err := run(t, "copy-binary"); err == nil {
		t.Error("copy-binary without DEST succeeded")
	}
}
