package restore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// validOptions restores into dir from a directory store that does not exist.
func validOptions(dir string) Options {
	return Options{
		Store: objectstore.Config{Directory: filepath.Join(dir, "no-store")}, Path: "ns/c/b/",
		DataDir: filepath.Join(dir, "data"), DefaultsFile: "/nonexistent/my.cnf",
		OperatorUser: "dolphin", OperatorPassword: "op", RootPassword: "root", TmpDir: dir,
	}
}

func TestRestoreRefusesMySQLAndMissingOptions(t *testing.T) {
	dir := t.TempDir()
	o := validOptions(dir)
	o.Flavor = FlavorMySQL
	_, err := IntoDataDir(t.Context(), o)
	if !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "MySQL") {
		t.Errorf("flavor mysql: %v, want ErrNotSupported", err)
	}
	o = validOptions(dir)
	o.Path, o.OperatorPassword, o.RootPassword = "", "", ""
	_, err = IntoDataDir(t.Context(), o)
	if err == nil || !strings.Contains(err.Error(), "missing the backup's path, the operator password and the root password") {
		t.Errorf("missing options: %v", err)
	}
	if _, err := IntoDataDir(t.Context(), Options{}); err == nil {
		t.Error("no data directory: no error")
	}
	if _, err := os.Stat(o.DataDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused restore created the data directory: %v", err)
	}
}

func TestRestoreSkipsInitializedDataDir(t *testing.T) {
	dir := t.TempDir()
	o := validOptions(dir)
	if err := os.MkdirAll(o.DataDir, 0o750); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{InitializedMarker, "ibdata1"} {
		if err := os.WriteFile(filepath.Join(o.DataDir, f), []byte("x"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	// Whatever the options say (a MySQL flavor, no store): an initialised instance restarts.
	o.Flavor, o.Store, o.Path = FlavorMySQL, objectstore.Config{}, ""
	res, err := IntoDataDir(t.Context(), o)
	if err != nil || !res.Skipped {
		t.Fatalf("IntoDataDir = %+v, %v; want Skipped", res, err)
	}
	if ents, _ := os.ReadDir(o.DataDir); len(ents) != 2 {
		t.Errorf("data directory holds %v", ents)
	}
}

func TestRestoreFinishesAfterRestoredMarker(t *testing.T) {
	dir := t.TempDir()
	o := validOptions(dir)
	if err := os.MkdirAll(o.DataDir, 0o750); err != nil {
		t.Fatal(err)
	}
	m := &backup.Manifest{Name: "b", GTIDPosition: "0-1-5"}
	if err := writeDurably(filepath.Join(o.DataDir, RestoredMarker),
		[]byte(`{"path":"ns/c/b/","name":"b","gtidPosition":"0-1-5","restoredAt":"2026-01-02T03:04:05Z","manifest":{"name":"b","gtidPosition":"0-1-5"}}`)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(o.DataDir, "ibdata1"), []byte("restored"), 0o640); err != nil {
		t.Fatal(err)
	}
	// The store does not exist: nothing is read from it.
	res, err := IntoDataDir(t.Context(), o)
	if err != nil || res.Skipped || res.GTIDPosition != "0-1-5" || res.Manifest == nil || res.Manifest.Name != m.Name {
		t.Fatalf("IntoDataDir = %+v, %v", res, err)
	}
	if _, err := os.Stat(filepath.Join(o.DataDir, InitializedMarker)); err != nil {
		t.Errorf("no %s: %v", InitializedMarker, err)
	}
	if b, _ := os.ReadFile(filepath.Join(o.DataDir, "ibdata1")); string(b) != "restored" {
		t.Errorf("the restored data was touched: %q", b)
	}
}

func TestRestoreLeftoversKeepLostAndFound(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"lost+found/x", "ibdata1", "mysql/user.frm", StagingDir + "/y", ".dolphin-other"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), nil, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := removeLeftovers(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := summarize(removed); got != ".dolphin-other, .dolphin-restore, ibdata1, mysql" {
		t.Errorf("removed %s", got)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 || ents[0].Name() != "lost+found" {
		t.Errorf("left %v", ents)
	}
}

func TestRestoreSameGTIDPosition(t *testing.T) {
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{"0-1-5,1-1-2", "1-1-2, 0-1-5", true},
		{"", "", true},
		{"0-1-5", "0-1-6", false},
		{"0-1-5", "0-1-5,1-1-1", false},
	} {
		if got := SameGTIDPosition(c.a, c.b); got != c.same {
			t.Errorf("SameGTIDPosition(%q, %q) = %v", c.a, c.b, got)
		}
	}
}
