package podcmd

import (
	"bytes"
	"context"
	"database/sql"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/go-sql-driver/mysql"

	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/agentops"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/engineupgrade"
	"github.com/dolphin-operator/dolphin/internal/restore"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestServerSeedCmdClone runs the real `dolphin seed` (this test binary as dolphin, see
// TestMain) on an empty data directory, as the init container of a new replica would, and
// tells it over HTTPS to clone a real server through `dolphin agent`'s wiring (same cluster
// PKI and token); then a server starts on the clone. Run again, it exits at once.
func TestServerSeedCmdClone(t *testing.T) {
	src := dbtest.Start(t, dbtest.Options{Instances: 1}).Instances[0]
	db, err := sql.Open("mysql", "root@unix("+src.SocketPath()+")/")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		"SET GLOBAL read_only = OFF", "CREATE DATABASE app", "CREATE TABLE app.t (id INT PRIMARY KEY)",
		"INSERT INTO app.t SELECT seq FROM app.seq_1_to_300",
	} {
		if _, err := db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var srcPos string
	if err := db.QueryRowContext(t.Context(), "SELECT @@gtid_current_pos").Scan(&srcPos); err != nil {
		t.Fatal(err)
	}

	// The source's agent, wired as `dolphin agent` is.
	pki := writeSeedPKI(t)
	wiring := agentops.Config{Flavor: "mariadb", DataDir: src.DataDir, Socket: src.SocketPath()}
	backupFn, cloneFn := wiring.Functions(testr.New(t))
	srv, err := agent.NewServer(agent.ServerOptions{TokenFile: filepath.Join(pki.dir, "token"),
		CertFile: filepath.Join(pki.dir, "tls.crt"), KeyFile: filepath.Join(pki.dir, "tls.key"),
		Backup: backupFn, Clone: cloneFn, CloneUpgradeRecord: wiring.CloneUpgradeRecordFunc(), Logger: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	srcRecord, err := engineupgrade.ReadRecord(src.DataDir)
	if err != nil || srcRecord.Version() == "" {
		t.Fatalf("the source's data directory has no mariadb-upgrade record to pass on: %+v, %v", srcRecord, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	actx, stopAgent := context.WithCancel(context.Background())
	agentDone := make(chan error, 1)
	go func() { agentDone <- srv.ServeListener(actx, l) }()
	defer func() { stopAgent(); <-agentDone }()

	dst := dbtest.Layout(t, dbtest.Options{Instances: 1, ExtraConfig: map[string]string{"server_id": "77"}}).Instances[0]
	tmp, err := os.MkdirTemp("", "dolphin-seed-cmd-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	const opPw, rootPw = `op'pw\`, `root"pw'\`
	addr := testenv.FreeAddr(t)
	dolphin := func(ctx context.Context) (*exec.Cmd, *lockedBuffer) {
		args := append([]string{"seed"}, pki.serverArgs(addr)...)
		cmd := exec.CommandContext(ctx, os.Args[0], append(args, "--datadir", dst.DataDir,
			"--defaults-file", dst.ConfigFile, "--tmp-dir", tmp, "--use-memory", "64M", "--install-script", "/nonexistent")...)
		cmd.Env = append(os.Environ(), runMainEnv+"=1", envOperatorPassword+"="+opPw, envRootPassword+"="+rootPw)
		out := &lockedBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		return cmd, out
	}
	cmd, out := dolphin(t.Context())
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
	if _, err := pki.client(t, addr, "wrong").SeedStatus(t.Context()); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("with a wrong token: %v, want 401", err)
	}
	began := time.Now()
	if _, err := c.Seed(t.Context(), agent.SeedRequest{Mode: agent.SeedModeClone,
		Clone:    &agent.SeedClone{URL: "https://" + l.Addr().String(), ServerName: agent.AgentServerName("db", "ns")},
		SourceDB: agent.DBConn{User: "root"}}); err != nil {
		t.Fatal(err)
	}
	var last agent.SeedStatus
	for {
		if st, err := c.SeedStatus(t.Context()); err == nil {
			last = st
		}
		select {
		case err := <-exited:
			t.Logf("dolphin seed (%v, %v):\n%s", time.Since(began).Round(time.Millisecond), err, out)
			// It exits as soon as it is done (exit 0 is its success), so the last status read
			// may be Running; the data directory is checked below.
			if err != nil || last.Phase == agent.SeedFailed || last.Mode != agent.SeedModeClone || last.Bytes == 0 {
				t.Fatalf("dolphin seed exited: %v; its last status %+v", err, last)
			}
		case <-time.After(50 * time.Millisecond):
			continue
		}
		break
	}
	if s := out.String(); strings.Contains(s, opPw) || strings.Contains(s, rootPw) {
		t.Error("the output shows a password")
	}

	// Again: it exits at once.
	cmd, out = dolphin(t.Context())
	if err := cmd.Run(); err != nil || !strings.Contains(out.String(), "nothing to seed") {
		t.Errorf("dolphin seed on the seeded directory: %v\n%s", err, out)
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
	var pos, slavePos string
	if err := op.QueryRowContext(t.Context(), "SELECT COUNT(*), @@gtid_binlog_pos, @@gtid_slave_pos FROM app.t").Scan(&n, &pos, &slavePos); err != nil {
		t.Fatalf("as the operator: %v", err)
	}
	if n != 300 || !restore.SameGTIDPosition(pos, srcPos) || !restore.SameGTIDPosition(slavePos, srcPos) {
		t.Errorf("cloned server: %d rows, gtid_binlog_pos %q, gtid_slave_pos %q; want 300 and %q", n, pos, slavePos, srcPos)
	}
	b, err := os.ReadFile(filepath.Join(dst.DataDir, restore.RestoredMarker))
	if err != nil || !bytes.Contains(b, []byte(`"source": "clone from https://`+l.Addr().String()+`"`)) {
		t.Errorf("%s: %s (%v)", restore.RestoredMarker, b, err)
	}

	// The clone carries the source's mariadb-upgrade record (which mariadb-backup does not
	// copy), byte for byte, and the tool takes it: on the clone it has nothing to do.
	dstRecord, err := engineupgrade.ReadRecord(dst.DataDir)
	if err != nil || dstRecord.File != srcRecord.File || !bytes.Equal(dstRecord.Content, srcRecord.Content) {
		t.Fatalf("the clone's upgrade record: %+v (%v), want the source's %+v", dstRecord, err, srcRecord)
	}
	res, err := engineupgrade.Run(t.Context(), engineupgrade.Options{DataDir: dst.DataDir, Socket: dst.SocketPath(), User: "root", Password: rootPw})
	if err != nil || res.Ran || res.From != srcRecord.Version() {
		t.Errorf("mariadb-upgrade on the clone: %+v, %v; want nothing to do at %s", res, err, srcRecord.Version())
	}
	t.Logf("mariadb-upgrade on the clone: %+v", res)
}
