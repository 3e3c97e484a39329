package localnode

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
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

func TestTerminationMessage(t *testing.T) {
	dir := t.TempDir()
	spec := &corev1.Container{Name: "verify", TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError}
	if err := os.WriteFile(filepath.Join(dir, "verify.log"), []byte("progress\ndolphin-verify: boom\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := terminationMessage(dir, spec, 1); got != "progress\ndolphin-verify: boom" {
		t.Fatalf("failure without a message file: %q, want the log's end", got)
	}
	if got := terminationMessage(dir, spec, 0); got != "" {
		t.Fatalf("success without a message file: %q, want nothing", got)
	}
	if err := os.WriteFile(terminationFile(dir, "verify"), []byte("dolphin-verify: ok gtid=0-1-5"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, code := range []int32{0, 1} {
		if got := terminationMessage(dir, spec, code); got != "dolphin-verify: ok gtid=0-1-5" {
			t.Fatalf("exit %d with a message file: %q", code, got)
		}
	}
}
