package podcmd

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/restore"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestServerSeedCmdExternal runs the real `dolphin seed` on an empty data directory, as a new
// cluster's first instance would, and tells it over HTTPS to copy a server outside the cluster
// through a migration account (mode external); a server then starts on the copy with the
// source's rows and application account, at the source's GTID position. Neither password is
// in the output.
func TestServerSeedCmdExternal(t *testing.T) {
	src := dbtest.Start(t, dbtest.Options{Instances: 1}).Instances[0]
	db, err := sql.Open("mysql", "root@unix("+src.SocketPath()+")/")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const migPw = `mig'pw\#1`
	for _, q := range []string{
		"SET GLOBAL read_only = OFF", "CREATE DATABASE app", "CREATE TABLE app.t (id INT PRIMARY KEY)",
		"INSERT INTO app.t SELECT seq FROM app.seq_1_to_300",
		"CREATE USER 'migrate'@'%' IDENTIFIED BY 'mig''pw\\\\#1'",
		"GRANT SELECT, SHOW VIEW, TRIGGER, EVENT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'migrate'@'%'",
		"CREATE USER 'app'@'%' IDENTIFIED BY 'app-pw'", "GRANT SELECT ON app.* TO 'app'@'%'",
	} {
		if _, err := db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var srcPos string
	if err := db.QueryRowContext(t.Context(), "SELECT @@gtid_binlog_pos").Scan(&srcPos); err != nil {
		t.Fatal(err)
	}

	pki := writeSeedPKI(t)
	dst := dbtest.Layout(t, dbtest.Options{Instances: 1, ExtraConfig: map[string]string{"server_id": "77"}}).Instances[0]
	tmp, err := os.MkdirTemp("", "dolphin-seed-cmd-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	const opPw, rootPw = `op'pw\`, `root"pw'\`
	addr := testenv.FreeAddr(t)
	args := append([]string{"seed"}, pki.serverArgs(addr)...)
	cmd := exec.CommandContext(t.Context(), os.Args[0], append(args, "--datadir", dst.DataDir,
		"--defaults-file", dst.ConfigFile, "--tmp-dir", tmp, "--install-script", "/nonexistent")...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1", envOperatorPassword+"="+opPw, envRootPassword+"="+rootPw)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	c := pki.client(t, addr, pki.token)
	for deadline := time.Now().Add(20 * time.Second); c.Healthy(t.Context()) != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("dolphin seed does not answer:\n%s", out)
		}
	}
	if _, err := c.Seed(t.Context(), agent.SeedRequest{Mode: agent.SeedModeExternal}); err == nil || !strings.Contains(err.Error(), "external.host") {
		t.Errorf("an external instruction without a source: %v, want refused", err)
	}
	if _, err := c.Seed(t.Context(), agent.SeedRequest{Mode: agent.SeedModeExternal,
		External: &agent.SeedExternal{Host: src.Host, Port: src.Port, User: "migrate", Password: migPw}}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("dolphin seed: %v\n%s", err, out)
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("dolphin seed did not finish:\n%s", out)
	}
	if s := out.String(); strings.Contains(s, opPw) || strings.Contains(s, rootPw) || strings.Contains(s, migPw) {
		t.Error("the output shows a password")
	}

	dst.StartAs(t, "root", rootPw)
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr = "app", "app-pw", "tcp", dst.Addr()
	app, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	var n int
	if err := app.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM app.t").Scan(&n); err != nil || n != 300 {
		t.Errorf("the source's application account on the copy: %d rows, %v; want 300", n, err)
	}
	cfg.User, cfg.Passwd = defaultOperatorUser, opPw
	op, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	var pos, slavePos string
	if err := op.QueryRowContext(t.Context(), "SELECT @@gtid_binlog_pos, @@gtid_slave_pos").Scan(&pos, &slavePos); err != nil {
		t.Fatalf("as the operator: %v", err)
	}
	if !restore.SameGTIDPosition(pos, srcPos) || !restore.SameGTIDPosition(slavePos, srcPos) {
		t.Errorf("the copy's gtid_binlog_pos %q, gtid_slave_pos %q; want the source's %q", pos, slavePos, srcPos)
	}
	b, err := os.ReadFile(filepath.Join(dst.DataDir, restore.RestoredMarker))
	if err != nil || !bytes.Contains(b, []byte(`"source": "external copy from migrate@`)) {
		t.Errorf("%s: %s (%v)", restore.RestoredMarker, b, err)
	}
}
