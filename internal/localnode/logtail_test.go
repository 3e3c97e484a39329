package localnode

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLogTail(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "c.log")
	var b strings.Builder
	for i := range 200 {
		b.WriteString("line ")
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString("\n")
	}
	b.WriteString("dolphin-restore: object data.mbstream.zst: sha256 mismatch\n")
	if err := os.WriteFile(f, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	got := logTail(f)
	lines := strings.Split(got, "\n")
	if len(got) > logTailBytes || len(lines) > logTailLines {
		t.Fatalf("tail of %d bytes, %d lines: over the kubelet's limits", len(got), len(lines))
	}
	if last := lines[len(lines)-1]; last != "dolphin-restore: object data.mbstream.zst: sha256 mismatch" {
		t.Fatalf("last line %q", last)
	}
	if logTail(filepath.Join(dir, "missing.log")) != "" {
		t.Fatal("a missing log gave a message")
	}
}
