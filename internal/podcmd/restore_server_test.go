package podcmd

import (
	"bytes"
	"database/sql"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// TestServerRestoreCmd runs the real `dolphin restore` (this test binary as dolphin, see
// TestMain) on a backup of a real server, as an init container would, and then a server on the
// restored data directory; then again on the initialised directory.
func TestServerRestoreCmd(t *testing.T) {
	src := dbtest.Start(t, dbtest.Options{Instances: 1}).Instances[0]
	db, err := sql.Open("mysql", "root@unix("+src.SocketPath()+")/")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		"SET GLOBAL read_only = OFF", "CREATE DATABASE app", "CREATE TABLE app.t (id INT PRIMARY KEY)",
		"INSERT INTO app.t SELECT seq FROM app.seq_1_to_100",
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

	dst := dbtest.Layout(t, dbtest.Options{Instances: 1}).Instances[0]
	tmp, err := os.MkdirTemp("", "dolphin-restore-cmd-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	const opPw, rootPw = `op'pw\`, `root"pw'\`
	dolphin := func(path string) (string, error) {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "restore", "--directory", root, "--path", path,
			"--datadir", dst.DataDir, "--defaults-file", dst.ConfigFile, "--tmp-dir", tmp, "--use-memory", "64M")
		cmd.Env = append(os.Environ(), runMainEnv+"=1",
			envOperatorPassword+"="+opPw, envRootPassword+"="+rootPw)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		began := time.Now()
		err := cmd.Run()
		t.Logf("dolphin restore (%v, %v):\n%s", time.Since(began).Round(time.Millisecond), err, out.String())
		return out.String(), err
	}
	// A path without a backup: exit status 1, and the last line says why.
	out, err := dolphin("ns/c/none/")
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if last := lines[len(lines)-1]; err == nil || !strings.HasPrefix(last, "dolphin-restore: ") || !strings.Contains(last, "no manifest") {
		t.Errorf("dolphin restore of a missing backup: %v, last line %q", err, last)
	}

	out, err = dolphin("ns/c/b/")
	if err != nil || !strings.Contains(out, "dolphin-restore: done: "+dst.DataDir+" holds backup ns/c/b/ at GTID position \""+m.GTIDPosition+"\"") {
		t.Fatalf("dolphin restore: %v", err)
	}
	if strings.Contains(out, opPw) || strings.Contains(out, rootPw) {
		t.Error("the output shows a password")
	}
	if out, err := dolphin("ns/c/b/"); err != nil || !strings.Contains(out, "was initialised already") {
		t.Errorf("second dolphin restore: %v", err)
	}

	dst.StartAs(t, "root", rootPw)
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr = defaultOperatorUser, opPw, "tcp", dst.Addr()
	op, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	var n int
	var pos string
	if err := op.QueryRowContext(t.Context(), "SELECT COUNT(*), @@gtid_binlog_pos FROM app.t").Scan(&n, &pos); err != nil {
		t.Fatalf("as the operator: %v", err)
	}
	if n != 100 || pos != m.GTIDPosition {
		t.Errorf("restored server: %d rows, gtid_binlog_pos %q; want 100 and %q", n, pos, m.GTIDPosition)
	}
	if _, err := os.Stat(filepath.Join(dst.DataDir, ".dolphin-initialized")); err != nil {
		t.Error(err)
	}
}
