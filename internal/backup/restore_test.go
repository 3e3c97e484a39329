package backup

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// These tests restore synthetic backups: an mbstream made by `mbstream -c` from a few files,
// compressed like Take does, and a stand-in for `mariadb-backup --prepare`. They need the
// mbstream binary (hack/install-mariadb.sh installs it) but no server.

func needMBStream(t *testing.T) string {
	t.Helper()
	p, err := findTool("", "mbstream")
	if err != nil {
		t.Skipf("mbstream is not installed: %v", err)
	}
	return p
}

// fakeTool writes a shell script standing in for mariadb-backup.
func fakeTool(t *testing.T, script string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fake-mariadb-backup")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

const prepareOK = `echo "[00] 2026-12-01 11:17:13 completed OK!" >&2`

// syntheticBackup stores files as one compressed mbstream under prefix, with a manifest.
func syntheticBackup(t *testing.T, store objectstore.Store, prefix string, files map[string][]byte, gtid string) *Manifest {
	t.Helper()
	mbstream := needMBStream(t)
	src := t.TempDir()
	var names []string
	for name, b := range files {
		if err := os.MkdirAll(filepath.Join(src, filepath.Dir(name)), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, name), b, 0o640); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	stream, err := exec.Command(mbstream, append([]string{"-c", "-C", src}, names...)...).Output()
	if err != nil {
		t.Fatalf("mbstream -c: %v", err)
	}
	up, err := store.Create(t.Context(), prefix+DataObjectKey)
	if err != nil {
		t.Fatal(err)
	}
	d := objectstore.NewDigest()
	enc, err := newEncoder(&storeWriter{w: up, d: d})
	if err != nil {
		t.Fatal(err)
	}
	enc.Write(stream)
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := up.Commit(); err != nil {
		t.Fatal(err)
	}
	m := &Manifest{Format: ManifestFormat, Name: "synthetic", Flavor: "mariadb", Compression: CompressionZstd,
		GTIDPosition: gtid, BinlogFile: "binlog.000001", BinlogPosition: 172524, // as in syntheticFiles
		Objects: []Object{{Key: DataObjectKey, Size: d.Size(), SHA256: d.SHA256(), RawSize: int64(len(stream))}}}
	if err := writeManifest(t.Context(), store, prefix, m); err != nil {
		t.Fatal(err)
	}
	return m
}

func syntheticFiles() map[string][]byte {
	big := make([]byte, 3<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte(r.IntN(16)) // compressible, but not trivially
	}
	return map[string][]byte{
		"xtrabackup_binlog_info": []byte("binlog.000001\t172524\t0-1-3,1-2-7\n"),
		"app/t.ibd":              big,
		"ibdata1":                bytes.Repeat([]byte("ibdata"), 1000),
	}
}

func TestRestoreSynthetic(t *testing.T) {
	store, _ := newStore(t)
	files := syntheticFiles()
	syntheticBackup(t, store, "ns/c/b1/", files, "1-2-7,0-1-3")
	target := filepath.Join(t.TempDir(), "restored", "data") // missing: created
	var progress int64
	m, err := Restore(t.Context(), store, "ns/c/b1", RestoreOptions{
		TargetDir: target, Tool: fakeTool(t, prepareOK), VerifyFirst: true,
		Progress: func(n int64) { progress = n },
	})
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "synthetic" || progress != m.StoredBytes() {
		t.Errorf("manifest %q, progress %d, stored %d", m.Name, progress, m.StoredBytes())
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(target, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes, %v; want %d bytes", name, len(got), err, len(want))
		}
	}
	// A non-empty target is refused and left alone.
	if _, err := Restore(t.Context(), store, "ns/c/b1/", RestoreOptions{TargetDir: target, Tool: fakeTool(t, prepareOK)}); err == nil ||
		!strings.Contains(err.Error(), "not empty") {
		t.Errorf("restore into a non-empty directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(target, "app/t.ibd")); err != nil {
		t.Errorf("the refused restore touched the target: %v", err)
	}
}

func TestRestoreCorruptObject(t *testing.T) {
	store, dir := newStore(t)
	m := syntheticBackup(t, store, "b/", syntheticFiles(), "0-1-3,1-2-7")
	testenv.FlipByte(t, filepath.Join(dir, "b", DataObjectKey))
	target := t.TempDir()
	_, err := Restore(t.Context(), store, "b/", RestoreOptions{TargetDir: target, Tool: fakeTool(t, prepareOK)})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Restore of a corrupt object: %v, want ErrCorrupt", err)
	}
	for _, want := range []string{"b/" + DataObjectKey, m.Objects[0].SHA256} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if ents := dirEntries(t, target); len(ents) != 0 {
		t.Errorf("target after a corrupt restore holds %v", ents)
	}
	if _, err := Verify(t.Context(), store, "b/"); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), m.Objects[0].SHA256) {
		t.Errorf("Verify of a corrupt object: %v", err)
	}
}

func TestRestoreTruncatedObject(t *testing.T) {
	store, dir := newStore(t)
	syntheticBackup(t, store, "b/", syntheticFiles(), "0-1-3,1-2-7")
	p := filepath.Join(dir, "b", DataObjectKey)
	st, _ := os.Stat(p)
	os.Truncate(p, st.Size()/3)
	target := t.TempDir()
	_, err := Restore(t.Context(), store, "b/", RestoreOptions{TargetDir: target, Tool: fakeTool(t, prepareOK)})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "the manifest says") {
		t.Fatalf("Restore of a truncated object: %v, want ErrCorrupt", err)
	}
	if ents := dirEntries(t, target); len(ents) != 0 {
		t.Errorf("target after a failed restore holds %v", ents)
	}
}

func TestRestoreChecksPositionAndPrepare(t *testing.T) {
	store, _ := newStore(t)
	syntheticBackup(t, store, "wrong-gtid/", syntheticFiles(), "0-1-4")
	target := t.TempDir()
	_, err := Restore(t.Context(), store, "wrong-gtid/", RestoreOptions{TargetDir: target, Tool: fakeTool(t, prepareOK)})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), `GTID position "0-1-3,1-2-7", ahead of the manifest's "0-1-4" in domain 1 (seq 7)`) {
		t.Errorf("Restore with a GTID that disagrees: %v", err)
	}
	if ents := dirEntries(t, target); len(ents) != 0 {
		t.Errorf("target holds %v", ents)
	}
	m := syntheticBackup(t, store, "wrong-coordinates/", syntheticFiles(), "0-1-3,1-2-7")
	m.BinlogPosition = 4
	if err := writeManifest(t.Context(), store, "wrong-coordinates/", m); err != nil {
		t.Fatal(err)
	}
	_, err = Restore(t.Context(), store, "wrong-coordinates/", RestoreOptions{TargetDir: target, Tool: fakeTool(t, prepareOK)})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "is at binary log binlog.000001:172524, the manifest says binlog.000001:4") {
		t.Errorf("Restore with binary log coordinates that disagree: %v", err)
	}
	// The tool's GTID (in the binlog info file) lags the data on a replica under writes; the
	// manifest holds the exact position (see exactPosition), which may be further.
	syntheticBackup(t, store, "manifest-further/", syntheticFiles(), "0-1-4,1-2-7")
	further := t.TempDir()
	if _, err := Restore(t.Context(), store, "manifest-further/", RestoreOptions{TargetDir: further, Tool: fakeTool(t, prepareOK)}); err != nil {
		t.Errorf("Restore of a backup whose manifest is one transaction further than its binlog info file: %v", err)
	}

	syntheticBackup(t, store, "ok/", syntheticFiles(), "0-1-3,1-2-7")
	failing := fakeTool(t, `echo "[00] InnoDB: Error: log file too small" >&2; exit 3`)
	_, err = Restore(t.Context(), store, "ok/", RestoreOptions{TargetDir: target, Tool: failing, UseMemory: "64M"})
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "log file too small") {
		t.Errorf("Restore with a failing prepare: %v", err)
	}
	silent := fakeTool(t, `exit 0`)
	_, err = Restore(t.Context(), store, "ok/", RestoreOptions{TargetDir: target, Tool: silent})
	if err == nil || !strings.Contains(err.Error(), "completed OK!") {
		t.Errorf("Restore with a prepare that does not say completed OK: %v", err)
	}
	if ents := dirEntries(t, target); len(ents) != 0 {
		t.Errorf("target holds %v", ents)
	}
	// The arguments given to prepare.
	args := filepath.Join(t.TempDir(), "args")
	echo := fakeTool(t, `echo "$@" > `+args+"\n"+prepareOK)
	if _, err := Restore(t.Context(), store, "ok/", RestoreOptions{TargetDir: target, Tool: echo, UseMemory: "64M",
		DefaultsFile: "/etc/x.cnf", ExtraArgs: []string{"--parallel=2"}}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(args)
	if got, want := strings.TrimSpace(string(b)), "--defaults-file=/etc/x.cnf --prepare --target-dir="+target+" --use-memory=64M --parallel=2"; got != want {
		t.Errorf("prepare args %q, want %q", got, want)
	}
}

func TestIncompleteAndMissing(t *testing.T) {
	store, dir := newStore(t)
	syntheticBackup(t, store, "b/", syntheticFiles(), "0-1-3,1-2-7")
	copyFile(t, filepath.Join(dir, "b", DataObjectKey), filepath.Join(dir, "nomanifest", DataObjectKey))
	for name, f := range map[string]func() error{
		"ReadManifest": func() error { _, err := ReadManifest(t.Context(), store, "nomanifest/"); return err },
		"Verify":       func() error { _, err := Verify(t.Context(), store, "nomanifest"); return err },
		"Restore": func() error {
			_, err := Restore(t.Context(), store, "nomanifest/", RestoreOptions{TargetDir: t.TempDir(), Tool: fakeTool(t, prepareOK)})
			return err
		},
	} {
		if err := f(); !errors.Is(err, ErrIncomplete) || !strings.Contains(err.Error(), "no manifest: the backup never completed") {
			t.Errorf("%s without a manifest: %v, want ErrIncomplete", name, err)
		}
	}
	// A manifest whose object is gone.
	if err := store.Delete(t.Context(), "b/"+DataObjectKey); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(t.Context(), store, "b/"); !errors.Is(err, ErrCorrupt) || !errors.Is(err, objectstore.ErrNotFound) {
		t.Errorf("Verify with a missing object: %v", err)
	}
	// An unreadable manifest.
	os.WriteFile(filepath.Join(dir, "b", ManifestKey), []byte(`{"format": 1, "objects": [`), 0o640)
	if _, err := ReadManifest(t.Context(), store, "b/"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("ReadManifest of broken JSON: %v", err)
	}
}

func TestManifestCheck(t *testing.T) {
	good := func() *Manifest {
		return &Manifest{Format: 1, Compression: "zstd", GTIDPosition: "0-1-3",
			Objects: []Object{{Key: DataObjectKey, Size: 10, SHA256: strings.Repeat("a", 64)}}}
	}
	if err := good().check(); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(*Manifest){
		"future format":  func(m *Manifest) { m.Format = ManifestFormat + 1 },
		"no format":      func(m *Manifest) { m.Format = 0 },
		"compression":    func(m *Manifest) { m.Compression = "gzip" },
		"no objects":     func(m *Manifest) { m.Objects = nil },
		"escaping key":   func(m *Manifest) { m.Objects[0].Key = "../x" },
		"manifest key":   func(m *Manifest) { m.Objects[0].Key = ManifestKey },
		"twice":          func(m *Manifest) { m.Objects = append(m.Objects, m.Objects[0]) },
		"no sha256":      func(m *Manifest) { m.Objects[0].SHA256 = "" },
		"empty object":   func(m *Manifest) { m.Objects[0].Size = 0 },
		"GTID not MySQL": func(m *Manifest) { m.GTIDPosition = "3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5" },
	} {
		m := good()
		edit(m)
		if err := m.check(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestRestoreCancelled(t *testing.T) {
	store, _ := newStore(t)
	syntheticBackup(t, store, "b/", syntheticFiles(), "0-1-3,1-2-7")
	ctx, cancel := context.WithCancel(t.Context())
	target := t.TempDir()
	_, err := Restore(ctx, store, "b/", RestoreOptions{TargetDir: target, Tool: fakeTool(t, prepareOK),
		Progress: func(int64) { cancel() }})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Restore: %v", err)
	}
	if ents := dirEntries(t, target); len(ents) != 0 {
		t.Errorf("target after a cancelled restore holds %v", ents)
	}
}
