package backup

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
)

// TestServerTakeFailures makes Take fail in each way it can, against a real server, and
// checks that it leaves nothing: no manifest, no data object, no temporary file in the store
// or in TmpDir.
func TestServerTakeFailures(t *testing.T) {
	c := dbtest.Start(t, dbtest.Options{Instances: 1})
	inst := c.Instances[0]
	base := TakeOptions{
		Prefix: "ns/c/fail/", Name: "fail", SourceInstance: inst.Name, SourceRole: "primary",
		Socket: filepath.Join(inst.Dir, "mysqld.sock"), User: "root",
		DataDir: inst.DataDir, DefaultsFile: inst.ConfigFile, ExtraArgs: []string{"--log-copy-interval=100"},
	}
	nothingLeft := func(t *testing.T, root, tmp string) {
		t.Helper()
		if files := storeFiles(t, root); len(files) != 0 {
			t.Errorf("the store holds %q", files)
		}
		if ents := dirEntries(t, tmp); len(ents) != 0 {
			t.Errorf("TmpDir holds %q", ents)
		}
	}

	t.Run("wrong password", func(t *testing.T) {
		store, root := newStore(t)
		opts := base
		opts.Password, opts.TmpDir = "wrong", t.TempDir()
		_, err := Take(t.Context(), opts, store)
		// The first login is Take's own (serialApply), before the tool's.
		if err == nil || !strings.Contains(err.Error(), "Access denied for user 'root'@'localhost'") {
			t.Fatalf("Take: %v, want the server's Access denied", err)
		}
		t.Logf("error: %v", err)
		nothingLeft(t, root, opts.TmpDir)
	})

	t.Run("cancelled while streaming", func(t *testing.T) {
		store, root := newStore(t)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		opts := base
		opts.TmpDir = t.TempDir()
		opts.Progress = func(int64) { cancel() }
		_, err := Take(ctx, opts, store)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Take: %v, want context.Canceled", err)
		}
		nothingLeft(t, root, opts.TmpDir)
	})

	t.Run("upload fails", func(t *testing.T) {
		store, root := newStore(t)
		opts := base
		opts.TmpDir = t.TempDir()
		_, err := Take(t.Context(), opts, &recordingStore{Store: store, failAfter: 256 << 10})
		if !errors.Is(err, errInjected) || !strings.Contains(err.Error(), "uploading ns/c/fail/"+DataObjectKey) {
			t.Fatalf("Take: %v, want the upload's error", err)
		}
		nothingLeft(t, root, opts.TmpDir)
	})

	t.Run("tool exits non-zero", func(t *testing.T) {
		store, root := newStore(t)
		opts := base
		opts.TmpDir = t.TempDir()
		opts.ExtraArgs = []string{"--no-such-option"}
		_, err := Take(t.Context(), opts, store)
		if err == nil || !strings.Contains(err.Error(), "mariadb-backup failed: exit status") || !strings.Contains(err.Error(), "no-such-option") {
			t.Fatalf("Take: %v, want the tool's failure", err)
		}
		t.Logf("error: %v", err)
		nothingLeft(t, root, opts.TmpDir)
	})

	t.Run("existing backup", func(t *testing.T) {
		store, root := newStore(t)
		opts := base
		opts.TmpDir = t.TempDir()
		os.MkdirAll(filepath.Join(root, "ns/c/fail"), 0o750)
		os.WriteFile(filepath.Join(root, "ns/c/fail", ManifestKey), []byte("{}"), 0o640)
		if _, err := Take(t.Context(), opts, store); err == nil || !strings.Contains(err.Error(), "exists already") {
			t.Fatalf("Take over an existing backup: %v", err)
		}
	})

	t.Run("from a primary", func(t *testing.T) {
		// Not a failure: the position of a primary, no replica position.
		store, _ := newStore(t)
		opts := base
		opts.TmpDir = t.TempDir()
		m, err := Take(t.Context(), opts, store)
		if err != nil {
			t.Fatal(err)
		}
		if m.ReplicaGTIDPosition != "" || m.BinlogFile == "" {
			t.Errorf("primary backup: replica position %q, binlog file %q", m.ReplicaGTIDPosition, m.BinlogFile)
		}
	})
}
