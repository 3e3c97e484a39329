package restore

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// What the source of TestServerVerify holds outside the system schemas: five tables Verify
// checks (InnoDB, an empty one, a system-versioned one with history, MyISAM and Aria, the last
// two in a schema whose names need quoting), and a view and a sequence it leaves alone.
const (
	verifyPrefix = "ns/src/v1/"
	verifyTables = 5
	verifyRows   = 300 + 0 + 3 + 7 + 5
	// verifyBadPrefix is a second backup, taken after the source's MyISAM table lost the end
	// of its data file: its objects match its manifest, its data does not hold up.
	verifyBadPrefix = "ns/src/v2/"
	verifyBadTable  = "`odd db`.`ta b`"
)

// verifySource is a backup of a real server in a directory store.
type verifySource struct {
	root     string // the store's root
	manifest *backup.Manifest
	binlog   string // the source's @@gtid_binlog_pos when it was backed up
}

// takeVerifySource starts a server, fills it, backs it up into a directory store and stops it.
func takeVerifySource(t *testing.T) *verifySource {
	t.Helper()
	inst := dbtest.Start(t, dbtest.Options{Instances: 1}).Instances[0]
	db, err := sql.Open("mysql", "root@unix("+inst.SocketPath()+")/")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, q := range []string{
		"SET GLOBAL read_only = OFF",
		"CREATE DATABASE app",
		"CREATE TABLE app.t (id INT PRIMARY KEY, v VARCHAR(100) NOT NULL, KEY (v)) ENGINE=InnoDB",
		"INSERT INTO app.t SELECT seq, CONCAT('row-', seq) FROM app.seq_1_to_300",
		"CREATE TABLE app.empty (id INT PRIMARY KEY) ENGINE=InnoDB",
		"CREATE TABLE app.h (id INT PRIMARY KEY, v INT) ENGINE=InnoDB WITH SYSTEM VERSIONING",
		"INSERT INTO app.h VALUES (1, 1), (2, 2), (3, 3)",
		"UPDATE app.h SET v = 10 WHERE id = 1",
		"CREATE VIEW app.v AS SELECT id FROM app.t",
		"CREATE SEQUENCE app.s",
		"CREATE DATABASE `odd db`",
		"CREATE TABLE `odd db`.`ta b` (id INT PRIMARY KEY) ENGINE=MyISAM",
		"INSERT INTO `odd db`.`ta b` SELECT seq FROM app.seq_1_to_7",
		"CREATE TABLE `odd db`.aria (id INT PRIMARY KEY) ENGINE=Aria",
		"INSERT INTO `odd db`.aria SELECT seq FROM app.seq_1_to_5",
	} {
		if _, err := db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var binlog string
	if err := db.QueryRowContext(t.Context(), "SELECT @@gtid_binlog_pos").Scan(&binlog); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	store, err := objectstore.NewDirectory(root)
	if err != nil {
		t.Fatal(err)
	}
	take := func(prefix string) *backup.Manifest {
		m, err := backup.Take(t.Context(), backup.TakeOptions{
			Prefix: prefix, Name: path.Base(prefix), Socket: inst.SocketPath(), User: "root",
			DataDir: inst.DataDir, DefaultsFile: inst.ConfigFile, TmpDir: t.TempDir(),
			ExtraArgs: []string{"--log-copy-interval=100"},
		}, store)
		if err != nil {
			t.Fatalf("Take: %v", err)
		}
		t.Logf("backup %s: GTID position %s, %d bytes stored", prefix, m.GTIDPosition, m.StoredBytes())
		return m
	}
	m := take(verifyPrefix)
	db.Close()

	// MyISAM files are copied as they are: cut the data file of a table, cleanly closed, so
	// that nothing notices before CHECK TABLE.
	inst.Stop(t)
	myd := filepath.Join(inst.DataDir, "odd@0020db", "ta@0020b.MYD")
	st, err := os.Stat(myd)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(myd, st.Size()/2); err != nil {
		t.Fatal(err)
	}
	inst.Start(t)
	take(verifyBadPrefix)
	inst.Stop(t) // Verify needs the CPU more
	return &verifySource{root: root, manifest: m, binlog: binlog}
}

// copyStore returns the root of a copy of the source's store, to spoil.
func (src *verifySource) copyStore(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "store")
	if err := os.CopyFS(root, os.DirFS(src.root)); err != nil {
		t.Fatal(err)
	}
	return root
}

// verifyOptions verifies the backup verifyPrefix of the store at root into scratch.
func verifyOptions(t *testing.T, root, scratch string) VerifyOptions {
	t.Helper()
	tmp, err := os.MkdirTemp("", "dv-") // short: the socket goes there
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ents, _ := os.ReadDir(tmp); len(ents) > 0 {
			t.Errorf("Verify left %s in its temporary directory", ents[0].Name())
		}
		os.RemoveAll(tmp)
	})
	return VerifyOptions{
		Store: objectstore.Config{Directory: root}, Path: verifyPrefix, ScratchDir: scratch,
		TmpDir: tmp, UseMemory: "32M", StartTimeout: time.Minute, StopTimeout: time.Minute,
		TableTimeout: time.Minute,
		Log:          func(format string, args ...any) { t.Logf("verify: "+format, args...) },
	}
}

// TestServerVerify verifies a backup of a real server, then spoiled copies of it.
func TestServerVerify(t *testing.T) {
	src := takeVerifySource(t)
	t.Run("Backup", func(t *testing.T) { testVerifyBackup(t, src) })
	t.Run("CorruptObject", func(t *testing.T) { testVerifyCorruptObject(t, src) })
	t.Run("EditedPosition", func(t *testing.T) { testVerifyEditedPosition(t, src) })
	t.Run("CorruptTable", func(t *testing.T) { testVerifyCorruptTable(t, src) })
}

// testVerifyBackup: the report says what the source held; the scratch directory, which Verify
// created, is gone; the store is untouched.
func testVerifyBackup(t *testing.T, src *verifySource) {
	before := treeOf(t, src.root)
	scratch := filepath.Join(t.TempDir(), "scratch")
	began := time.Now()
	rep, err := Verify(t.Context(), verifyOptions(t, src.root, scratch))
	t.Logf("Verify took %v", time.Since(began).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if rep.GTIDPosition != src.manifest.GTIDPosition || !SameGTIDPosition(rep.GTIDPosition, src.binlog) {
		t.Errorf("GTIDPosition %q, want the manifest's %q and the source's %q", rep.GTIDPosition, src.manifest.GTIDPosition, src.binlog)
	}
	if rep.Tables != verifyTables || rep.Rows != verifyRows || len(rep.SkippedTables) != 0 {
		t.Errorf("%d table(s), %d row(s), skipped %q; want %d, %d and none", rep.Tables, rep.Rows, rep.SkippedTables, verifyTables, verifyRows)
	}
	if rep.Manifest == nil || rep.Manifest.Name != "v1" {
		t.Errorf("Manifest %+v", rep.Manifest)
	}
	if rep.Duration <= 0 || rep.Duration > time.Since(began) || time.Since(rep.CheckedAt) > time.Minute {
		t.Errorf("Duration %v, CheckedAt %v", rep.Duration, rep.CheckedAt)
	}
	if _, err := os.Stat(scratch); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the scratch directory is left: %v", err)
	}
	if after := treeOf(t, src.root); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Errorf("Verify changed the store:\n%q\n%q", before, after)
	}
}

// testVerifyCorruptObject: one flipped byte fails with ErrCorrupt naming the object; a given
// scratch directory (a volume with lost+found) is left as it was.
func testVerifyCorruptObject(t *testing.T, src *verifySource) {
	root := src.copyStore(t)
	obj := filepath.Join(root, verifyPrefix, backup.DataObjectKey)
	b, err := os.ReadFile(obj)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x01
	if err := os.WriteFile(obj, b, 0o640); err != nil {
		t.Fatal(err)
	}
	scratch := t.TempDir()
	if err := os.Mkdir(filepath.Join(scratch, lostAndFound), 0o700); err != nil {
		t.Fatal(err)
	}
	_, err = Verify(t.Context(), verifyOptions(t, root, scratch))
	if !errors.Is(err, backup.ErrCorrupt) || !strings.Contains(err.Error(), verifyPrefix+backup.DataObjectKey) ||
		!strings.Contains(err.Error(), "sha256") {
		t.Fatalf("Verify of a corrupt object: %v; want ErrCorrupt naming %s", err, verifyPrefix+backup.DataObjectKey)
	}
	t.Logf("error: %v", err)
	if ents := dirNames(t, scratch); strings.Join(ents, ",") != lostAndFound {
		t.Errorf("the scratch directory holds %q, want only %s", ents, lostAndFound)
	}
}

// testVerifyEditedPosition: a manifest whose position was changed (its objects intact) fails
// on the position; leftovers of an earlier verification in the scratch directory are
// removed first, and the directory is emptied.
func testVerifyEditedPosition(t *testing.T, src *verifySource) {
	root := src.copyStore(t)
	mpath := filepath.Join(root, verifyPrefix, backup.ManifestKey)
	var m backup.Manifest
	b, err := os.ReadFile(mpath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	const edited = "0-1-987654"
	m.GTIDPosition = edited
	if b, err = json.MarshalIndent(m, "", "  "); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mpath, b, 0o640); err != nil {
		t.Fatal(err)
	}
	scratch := t.TempDir()
	for _, f := range []string{VerifyMarker, "data/ibdata1"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(scratch, f)), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(scratch, f), []byte("left"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	_, err = Verify(t.Context(), verifyOptions(t, root, scratch))
	if err == nil || !strings.Contains(err.Error(), "GTID position") || !strings.Contains(err.Error(), edited) ||
		!strings.Contains(err.Error(), src.manifest.GTIDPosition) {
		t.Fatalf("Verify of a manifest with another position: %v; want an error about the positions %q and %q",
			err, edited, src.manifest.GTIDPosition)
	}
	t.Logf("error: %v", err)
	if ents := dirNames(t, scratch); len(ents) > 0 {
		t.Errorf("the scratch directory holds %q", ents)
	}
}

// treeOf lists the files under dir with their sizes and modification times.
func treeOf(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, fmt.Sprintf("%s %v %d %d", rel, fi.Mode(), fi.Size(), fi.ModTime().UnixNano()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// testVerifyCorruptTable: a backup of a corrupt table fails CHECK TABLE, with an error naming
// the table; the server is still shut down and the scratch directory removed.
func testVerifyCorruptTable(t *testing.T, src *verifySource) {
	scratch := filepath.Join(t.TempDir(), "scratch")
	opts := verifyOptions(t, src.root, scratch)
	opts.Path = verifyBadPrefix
	var logged strings.Builder
	log := opts.Log
	opts.Log = func(format string, args ...any) {
		fmt.Fprintf(&logged, format+"\n", args...)
		log(format, args...)
	}
	_, err := Verify(t.Context(), opts)
	if !errors.Is(err, backup.ErrCorrupt) || !strings.Contains(err.Error(), "CHECK TABLE failed on 1 of 5 table(s)") ||
		!strings.Contains(err.Error(), verifyBadTable+": ") {
		t.Fatalf("Verify of a backup of a corrupt table: %v; want ErrCorrupt naming %s", err, verifyBadTable)
	}
	t.Logf("error: %v", err)
	if !strings.Contains(logged.String(), "Shutdown complete") {
		t.Error("the temporary server did not shut down cleanly")
	}
	if _, err := os.Stat(scratch); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the scratch directory is left: %v", err)
	}
}
