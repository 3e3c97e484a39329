package seed

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dolphin-operator/dolphin/internal/restore"
)

// TestSeedHonoursReseed: a data directory the operator marked for re-seeding loses its
// markers, so the seeding that follows treats what is left as leftovers to remove; without
// the mark nothing changes.
func TestSeedHonoursReseed(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{restore.InitializedMarker, restore.RestoredMarker, "ibdata1"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var log []string
	logf := func(format string, args ...any) { log = append(log, format) }
	if err := HonourReseed(context.Background(), dir, logf); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, restore.InitializedMarker)); err != nil || len(log) != 0 {
		t.Fatalf("without a reseed mark: initialised marker %v, log %v; want it kept and nothing logged", err, log)
	}
	if err := os.WriteFile(filepath.Join(dir, restore.ReseedMarker), []byte("errant\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := HonourReseed(context.Background(), dir, logf); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{restore.InitializedMarker, restore.RestoredMarker} {
		if _, err := os.Stat(filepath.Join(dir, m)); err == nil {
			t.Fatalf("%s kept on a directory marked for re-seeding: the old data would be used", m)
		}
	}
	if len(log) != 1 || !strings.Contains(log[0], "discard") {
		t.Fatalf("log %v", log)
	}
}
