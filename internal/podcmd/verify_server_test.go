package podcmd

import (
	"bytes"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// TestServerVerifyCmd runs the real `dolphin verify` (this test binary as dolphin, see
// TestMain) on a backup of a real server, as the operator's throwaway pod would.
func TestServerVerifyCmd(t *testing.T) {
	src := dbtest.Start(t, dbtest.Options{Instances: 1}).Instances[0]
	db, err := sql.Open("mysql", "root@unix("+src.SocketPath()+")/")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		"SET GLOBAL read_only = OFF", "CREATE DATABASE app", "CREATE TABLE app.t (id INT PRIMARY KEY)",
		"INSERT INTO app.t SELECT seq FROM app.seq_1_to_100", "CREATE TABLE app.u (id INT PRIMARY KEY) ENGINE=Aria",
		"INSERT INTO app.u SELECT seq FROM app.seq_1_to_20",
	} {
		if _, err := db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	root := t.TempDir()
	store, err := objectstore.NewDirectory(root)
	if err != nil {
		t.Fatal(err)
	}
	m, err := backup.Take(t.Context(), backup.TakeOptions{
		Prefix: "ns/c/b/", Name: "b", Socket: src.SocketPath(), User: "root",
		DataDir: src.DataDir, DefaultsFile: src.ConfigFile, TmpDir: t.TempDir(),
		ExtraArgs: []string{"--log-copy-interval=100"},
	}, store)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	db.Close()
	src.Stop(t)

	tmp, err := os.MkdirTemp("", "dolphin-verify-cmd-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	scratch := filepath.Join(t.TempDir(), "scratch")
	result := filepath.Join(t.TempDir(), "termination-log")
	cmd := exec.CommandContext(t.Context(), os.Args[0], "verify", "--directory", root, "--path", "ns/c/b/",
		"--scratch-dir", scratch, "--tmp-dir", tmp, "--use-memory", "32M", "--result-file", result)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	began := time.Now()
	err = cmd.Run()
	t.Logf("dolphin verify (%v, %v):\n%s", time.Since(began).Round(time.Millisecond), err, out.String())
	last := lastOutputLine(out.String())
	want := regexp.MustCompile(`^dolphin-verify: ok gtid=` + regexp.QuoteMeta(m.GTIDPosition) + ` tables=2 rows=120 seconds=\d+$`)
	if err != nil || !want.MatchString(last) {
		t.Fatalf("dolphin verify: %v, last line %q, want %v", err, last, want)
	}
	if got := readString(t, result); got != last+"\n" {
		t.Errorf("result file %q, want the last line %q", got, last)
	}
	if _, err := os.Stat(scratch); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the scratch directory is left: %v", err)
	}
}
