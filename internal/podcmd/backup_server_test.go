package podcmd

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
)

// TestServerBackupCmd is the physical copy of a migration: the real `dolphin backup` (this test
// binary as dolphin, see TestMain) run beside a server Dolphin does not manage, as on its host,
// writes a backup in Dolphin's own format that `dolphin restore` — what a cluster created with
// spec.bootstrap.from runs — restores, checksums verified, at the manifest's GTID position,
// the source's accounts included. A wrong password fails with the tool's words and leaves no
// manifest.
func TestServerBackupCmd(t *testing.T) {
	src := dbtest.Start(t, dbtest.Options{Instances: 1}).Instances[0]
	db, err := sql.Open("mysql", "root@unix("+src.SocketPath()+")/")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		"SET GLOBAL read_only = OFF", "CREATE DATABASE shop", "CREATE TABLE shop.orders (id INT PRIMARY KEY)",
		"INSERT INTO shop.orders SELECT seq FROM shop.seq_1_to_250",
		"CREATE USER 'backup'@'localhost' IDENTIFIED BY 'b pw'",
		"GRANT RELOAD, PROCESS, LOCK TABLES, BINLOG MONITOR, SLAVE MONITOR ON *.* TO 'backup'@'localhost'",
		"CREATE USER 'shop'@'%' IDENTIFIED BY 'shop-pw'", "GRANT SELECT ON shop.* TO 'shop'@'%'",
	} {
		if _, err := db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	store := t.TempDir()
	dolphin := func(password string, args ...string) (string, error) {
		cmd := exec.CommandContext(t.Context(), os.Args[0], append([]string{"backup", "--directory", store,
			"--socket", src.SocketPath(), "--datadir", src.DataDir, "--defaults-file", src.ConfigFile, "--tmp-dir", t.TempDir()}, args...)...)
		cmd.Env = append(os.Environ(), runMainEnv+"=1", envBackupUser+"=backup", envBackupPassword+"="+password)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		t.Logf("dolphin backup %v: %v\n%s", args, err, tail(out.String(), 6))
		return out.String(), err
	}
	if out, err := dolphin("wrong", "--path", "migrations/bad/"); err == nil || !strings.Contains(out, "Access denied") {
		t.Errorf("a wrong password: %v; want a failure naming the refusal", err)
	}
	if _, err := os.Stat(filepath.Join(store, "migrations/bad", backup.ManifestKey)); err == nil {
		t.Error("the failed backup wrote a manifest")
	}
	out, err := dolphin("b pw", "--path", "migrations/shop-1")
	if err != nil || !strings.Contains(out, "spec.bootstrap.from {store, path: migrations/shop-1/}") {
		t.Fatalf("dolphin backup: %v", err)
	}
	raw, err := os.ReadFile(filepath.Join(store, "migrations/shop-1", backup.ManifestKey))
	if err != nil {
		t.Fatal(err)
	}
	var m backup.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if m.Name != "shop-1" || m.SourceRole != "external" || m.SourceInstance != host || m.GTIDPosition == "" || m.UpgradeRecord == "" {
		t.Errorf("manifest %+v", m)
	}
	db.Close()

	dst := dbtest.Layout(t, dbtest.Options{Instances: 1}).Instances[0]
	tmp, err := os.MkdirTemp("", "dolphin-backup-cmd-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	const opPw, rootPw = "op-pw", "root-pw"
	restore := exec.CommandContext(t.Context(), os.Args[0], "restore", "--directory", store, "--path", "migrations/shop-1/",
		"--datadir", dst.DataDir, "--defaults-file", dst.ConfigFile, "--tmp-dir", tmp, "--use-memory", "64M")
	restore.Env = append(os.Environ(), runMainEnv+"=1", envOperatorPassword+"="+opPw, envRootPassword+"="+rootPw)
	if out, err := restore.CombinedOutput(); err != nil {
		t.Fatalf("dolphin restore: %v\n%s", err, out)
	}
	dst.StartAs(t, "root", rootPw)
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr = "shop", "shop-pw", "tcp", dst.Addr()
	shop, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer shop.Close()
	var n int
	var pos string
	if err := shop.QueryRowContext(t.Context(), "SELECT COUNT(*), @@gtid_binlog_pos FROM shop.orders").Scan(&n, &pos); err != nil {
		t.Fatalf("as the source's application account on the restored server: %v", err)
	}
	if n != 250 || pos != m.GTIDPosition {
		t.Errorf("restored: %d rows at %q; want 250 at the manifest's %q", n, pos, m.GTIDPosition)
	}
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
