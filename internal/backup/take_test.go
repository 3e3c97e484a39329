package backup

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// These tests run Take with a stand-in for mariadb-backup, a shell script that prints what
// the real one does and streams a given number of bytes, and without a server: the
// SELECT VERSION() fails and Take uses the version the tool printed.

// fakeBackupTool returns a script that streams `source` (a shell command) to stdout and
// records its arguments and the option file it was given in dir.
func fakeBackupTool(t *testing.T, dir, source string) string {
	t.Helper()
	return fakeTool(t, fmt.Sprintf(`if [ "$1" = "--version" ]; then
  echo "$0 based on MariaDB server 10.11.14-MariaDB debian-linux-gnu (x86_64)" >&2; exit 0
fi
echo "$@" > %[1]s/args
f="${1#*=}"; cp "$f" %[1]s/optionfile; stat -c %%a "$f" > %[1]s/mode
echo "[00] 2026-12-01 11:17:08 Using server version 10.11.14-MariaDB-fake" >&2
%[2]s
echo "[00] 2026-12-01 11:17:13 MySQL binlog position: filename 'binlog.000007', position '99', GTID of the last change '0-1-42,1-2-3'" >&2
echo "[00] 2026-12-01 11:17:13 MySQL slave binlog position: gtid_slave_pos '0-1-42'; master '' master_use_gtid = slave_pos" >&2
echo "[00] 2026-12-01 11:17:13 completed OK!" >&2`, dir, source))
}

func fakeOptions(t *testing.T, tool string) TakeOptions {
	return TakeOptions{Prefix: "ns/c/b", Name: "b", Socket: filepath.Join(t.TempDir(), "no.sock"), User: "dolphin-backup",
		Password: "pw#1 \"x\"", DataDir: "/var/lib/mysql", Tool: tool, TmpDir: t.TempDir(),
		positionAt: fixedPosition("0-1-42,1-2-3"), serialApplyHook: noServerApplier}
}

// noServerApplier stands in for serialApply where a fake tool has no server.
func noServerApplier(context.Context) (func(context.Context) error, error) {
	return func(context.Context) error { return nil }, nil
}

// fixedPosition stands in for the server's BINLOG_GTID_POS: it answers pos ("" is NULL)
// for the fake tool's coordinates binlog.000007:99.
func fixedPosition(pos string) positionFunc {
	return func(_ context.Context, file string, at uint64) (sql.NullString, string, error) {
		if file != "binlog.000007" || at != 99 {
			return sql.NullString{}, "fake", fmt.Errorf("asked for %s:%d, not the tool's binlog.000007:99", file, at)
		}
		return sql.NullString{String: pos, Valid: pos != ""}, "fake", nil
	}
}

func TestTakeWithFakeTool(t *testing.T) {
	rec := t.TempDir()
	tool := fakeBackupTool(t, rec, "head -c 3000000 /dev/urandom")
	dirStore, root := newStore(t)
	store := &recordingStore{Store: dirStore}
	opts := fakeOptions(t, tool)
	m, err := Take(t.Context(), opts, store)
	if err != nil {
		t.Fatal(err)
	}
	if m.GTIDPosition != "0-1-42,1-2-3" || m.ReplicaGTIDPosition != "0-1-42" || m.BinlogFile != "binlog.000007" ||
		m.BinlogPosition != 99 || m.ServerVersion != "10.11.14-MariaDB-fake" || m.Tool != "fake-mariadb-backup 10.11.14-MariaDB" {
		t.Errorf("manifest %+v", m)
	}
	if o := m.Objects[0]; o.RawSize != 3000000 || o.Size < 3000000 || o.Key != DataObjectKey {
		t.Errorf("object %+v", o)
	}
	if got := store.committed(); !slices.Equal(got, []string{"ns/c/b/" + DataObjectKey, "ns/c/b/" + ManifestKey}) {
		t.Errorf("commits %q", got)
	}
	if _, err := Verify(t.Context(), dirStore, "ns/c/b/"); err != nil {
		t.Error(err)
	}
	b, _ := os.ReadFile(filepath.Join(root, "ns/c/b", ManifestKey))
	if !strings.Contains(string(b), "\n  \"gtidPosition\": \"0-1-42,1-2-3\",\n") {
		t.Errorf("manifest.json is not indented JSON with the field names:\n%s", b)
	}

	// The password is in a 0600 option file, the first option, and nowhere on the command line.
	args, _ := os.ReadFile(filepath.Join(rec, "args"))
	mode, _ := os.ReadFile(filepath.Join(rec, "mode"))
	optFile, _ := os.ReadFile(filepath.Join(rec, "optionfile"))
	if !strings.HasPrefix(string(args), "--defaults-extra-file="+opts.TmpDir+"/") || strings.Contains(string(args), "pw#1") {
		t.Errorf("arguments %q", args)
	}
	for _, want := range []string{"--backup", "--stream=mbstream", "--slave-info", "--datadir=/var/lib/mysql",
		"--user=dolphin-backup", "--host=localhost", "--socket=" + opts.Socket} {
		if !strings.Contains(string(args), " "+want+" ") && !strings.HasSuffix(strings.TrimSpace(string(args)), want) {
			t.Errorf("arguments %q lack %s", args, want)
		}
	}
	if strings.TrimSpace(string(mode)) != "600" || !strings.Contains(string(optFile), "[client]\npassword=\"pw#1 \\\"x\\\"\"\n") {
		t.Errorf("option file (mode %s):\n%s", mode, optFile)
	}
	if ents := dirEntries(t, opts.TmpDir); len(ents) != 0 {
		t.Errorf("TmpDir holds %q", ents)
	}

	// With the server's option file, the password file includes it and is --defaults-file.
	opts.Prefix, opts.DefaultsFile = "ns/c/b2/", "/etc/mysql/my.cnf"
	if _, err := Take(t.Context(), opts, dirStore); err != nil {
		t.Fatal(err)
	}
	args, _ = os.ReadFile(filepath.Join(rec, "args"))
	optFile, _ = os.ReadFile(filepath.Join(rec, "optionfile"))
	if !strings.HasPrefix(string(args), "--defaults-file="+opts.TmpDir+"/") || !strings.Contains(string(optFile), "!include /etc/mysql/my.cnf\n[client]\n") {
		t.Errorf("with DefaultsFile: arguments %q, option file:\n%s", args, optFile)
	}
}

func TestTakeManifestCommitFails(t *testing.T) {
	tool := fakeBackupTool(t, t.TempDir(), "head -c 1000 /dev/urandom")
	store, root := newStore(t)
	_, err := Take(t.Context(), fakeOptions(t, tool), &recordingStore{Store: store, failKey: "ns/c/b/" + ManifestKey})
	if !errors.Is(err, errInjected) || !strings.Contains(err.Error(), "writing the manifest") {
		t.Fatalf("Take: %v", err)
	}
	if files := storeFiles(t, root); len(files) != 0 {
		t.Errorf("store holds %q after the manifest's Commit failed", files)
	}
}

func TestTakeFakeToolFailures(t *testing.T) {
	for name, tc := range map[string]struct {
		script string
		want   string
	}{
		"exit status": {`echo "[00] 2026-12-01 11:17:08 Using server version 10.11.14-MariaDB" >&2
head -c 100000 /dev/urandom
echo "[00] 2026-12-01 11:17:09 InnoDB: Error: log copy incomplete" >&2; exit 1`, "log copy incomplete"},
		"no completed OK": {`head -c 1000 /dev/urandom; echo "[00] x MySQL binlog position: filename 'b.1', position '4'" >&2`,
			`without printing "completed OK!"`},
		"no binlog position": {`head -c 1000 /dev/urandom; echo "[00] x completed OK!" >&2`, "no binlog position"},
		"no output":          {`echo "[00] x MySQL binlog position: filename 'b.1', position '4'" >&2; echo "[00] x completed OK!" >&2`, "wrote nothing"},
	} {
		t.Run(name, func(t *testing.T) {
			tool := fakeTool(t, `if [ "$1" = "--version" ]; then echo "mariadb-backup based on MariaDB server 10.11.14-MariaDB" >&2; exit 0; fi
`+tc.script)
			store, root := newStore(t)
			opts := fakeOptions(t, tool)
			_, err := Take(t.Context(), opts, store)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Take: %v, want %q", err, tc.want)
			}
			if files := storeFiles(t, root); len(files) != 0 {
				t.Errorf("store holds %q", files)
			}
			if ents := dirEntries(t, opts.TmpDir); len(ents) != 0 {
				t.Errorf("TmpDir holds %q", ents)
			}
		})
	}
}

// discardStore accepts uploads and keeps nothing but their sizes.
type discardStore struct {
	objectstore.Store
	mu    sync.Mutex
	sizes map[string]int64
}

func (d *discardStore) Stat(context.Context, string) (objectstore.ObjectInfo, error) {
	return objectstore.ObjectInfo{}, objectstore.ErrNotFound
}

func (d *discardStore) Describe() string { return "discard://" }

func (d *discardStore) Create(_ context.Context, key string) (objectstore.Upload, error) {
	return &discardUpload{d: d, key: key}, nil
}

type discardUpload struct {
	d   *discardStore
	key string
	n   int64
}

func (u *discardUpload) Write(p []byte) (int, error) { u.n += int64(len(p)); return len(p), nil }
func (u *discardUpload) Abort() error                { return nil }
func (u *discardUpload) Commit() (objectstore.ObjectInfo, error) {
	u.d.mu.Lock()
	defer u.d.mu.Unlock()
	if u.d.sizes == nil {
		u.d.sizes = map[string]int64{}
	}
	u.d.sizes[u.key] = u.n
	return objectstore.ObjectInfo{Key: u.key, Size: u.n}, nil
}

// TestTakeMemoryIsBounded streams 256 MiB of incompressible data through Take and samples the
// heap: it must stay far below the size of the stream.
func TestTakeMemoryIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 256 MiB")
	}
	const size = 256 << 20
	tool := fakeBackupTool(t, t.TempDir(), fmt.Sprintf("head -c %d /dev/urandom", size))
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	began := time.Now()
	m, err := Take(t.Context(), fakeOptions(t, tool), &discardStore{})
	close(done)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	grew := int64(peak.Load()) - int64(before.HeapInuse)
	t.Logf("%d MiB streamed in %v; heap in use grew by at most %d MiB", m.Objects[0].RawSize>>20,
		time.Since(began).Round(time.Millisecond), grew>>20)
	if m.Objects[0].RawSize != size {
		t.Errorf("raw size %d", m.Objects[0].RawSize)
	}
	if grew > 96<<20 {
		t.Errorf("heap grew by %d MiB while streaming %d MiB", grew>>20, size>>20)
	}
}

func TestTakeRefusesBadOptions(t *testing.T) {
	store, _ := newStore(t)
	for name, edit := range map[string]func(*TakeOptions){
		"no datadir":     func(o *TakeOptions) { o.DataDir = "" },
		"no user":        func(o *TakeOptions) { o.User = "" },
		"no connection":  func(o *TakeOptions) { o.Socket, o.Host = "", "" },
		"unknown flavor": func(o *TakeOptions) { o.Flavor = "postgres" },
		"no tool":        func(o *TakeOptions) { o.Tool = filepath.Join(t.TempDir(), "missing") },
	} {
		opts := fakeOptions(t, fakeTool(t, "exit 0"))
		edit(&opts)
		if _, err := Take(t.Context(), opts, store); err == nil {
			t.Errorf("%s: Take succeeded", name)
		}
	}
	// A NUL in the password cannot be written to an option file.
	opts := fakeOptions(t, fakeBackupTool(t, t.TempDir(), "echo x"))
	opts.Password = "a\x00b"
	if _, err := Take(t.Context(), opts, store); err == nil || errors.Is(err, io.EOF) {
		t.Errorf("a NUL in the password: %v", err)
	}
}
