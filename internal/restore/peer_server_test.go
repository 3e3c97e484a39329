package restore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
)

// The account the peer's agent backs its server up with, over the socket, as the operator
// asks for it; its password needs quoting in an option file.
const (
	cloneUser     = "dolphin-clone"
	clonePassword = `cl#one "pw" \x`
	cloneGrants   = "RELOAD, PROCESS, LOCK TABLES, BINLOG MONITOR, SLAVE MONITOR, REPLICATION SLAVE ADMIN"
	peerRowsT     = 1500
)

// peerCluster is a primary and its replica with rows, and an agent serving clones of the
// replica over HTTPS on 127.0.0.1.
type peerCluster struct {
	primary, replica *dbtest.Instance
	agentURL         string
	serverName       string
	token            string
	caPEM            []byte
}

// startPeers starts db-0 (primary, app.t with peerRowsT rows and the clone account) and db-1
// replicating from it with GTIDs (log_slave_updates, as in production), caught up.
func startPeers(t *testing.T) *peerCluster {
	t.Helper()
	c := dbtest.Start(t, dbtest.Options{Instances: 2})
	pc := &peerCluster{primary: c.Instances[0], replica: c.Instances[1]}
	p := openDB(t, tcpDSN(pc.primary, "root", ""))
	execAll(t, p,
		"SET GLOBAL read_only = OFF",
		"CREATE DATABASE app",
		"CREATE TABLE app.t (id INT PRIMARY KEY, v VARCHAR(100) NOT NULL)",
		fmt.Sprintf("INSERT INTO app.t SELECT seq, CONCAT('row-', seq, '-', REPEAT('x', 30)) FROM app.seq_1_to_%d", peerRowsT),
		"CREATE TABLE app.u (id INT PRIMARY KEY)",
	)
	// The server takes no placeholders in account statements: the driver interpolates them.
	pi := openDB(t, tcpDSN(pc.primary, "root", "")+"&interpolateParams=true")
	if _, err := pi.ExecContext(t.Context(), "CREATE USER ?@'%' IDENTIFIED BY ?", cloneUser, clonePassword); err != nil {
		t.Fatal(err)
	}
	execAll(t, p, "GRANT "+cloneGrants+" ON *.* TO '"+cloneUser+"'@'%'")
	r := openDB(t, tcpDSN(pc.replica, "root", ""))
	execAll(t, r, fmt.Sprintf("CHANGE MASTER TO MASTER_HOST = '%s', MASTER_PORT = %d, MASTER_USER = 'root', MASTER_USE_GTID = slave_pos",
		pc.primary.Host, pc.primary.Port), "START SLAVE")
	waitReplicated(t, pc.primary, pc.replica, "")
	// Domains are applied in parallel (slave_parallel_threads): domain 1's rows are written
	// once the replica has app.u, which domain 0 created.
	conn, err := p.Conn(t.Context()) // one session for its gtid_domain_id
	if err != nil {
		t.Fatal(err)
	}
	execAll(t, conn, "SET SESSION gtid_domain_id = 1", "INSERT INTO app.u SELECT seq FROM app.seq_1_to_20")
	conn.Close()
	waitReplicated(t, pc.primary, pc.replica, "")
	return pc
}

// waitReplicated waits until inst has applied the primary's whole binary log; rootPw is inst's
// root password.
func waitReplicated(t *testing.T, primary, inst *dbtest.Instance, rootPw string) {
	t.Helper()
	p, r := openDB(t, tcpDSN(primary, "root", "")), openDB(t, socketDSN(inst, "root", rootPw))
	want := str(t, p, "SELECT @@gtid_binlog_pos")
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got := str(t, r, "SELECT @@gtid_slave_pos")
		if SameGTIDPosition(got, want) {
			return
		}
		if time.Now().After(deadline) {
			rows, _ := r.QueryContext(t.Context(), "SHOW SLAVE STATUS")
			t.Fatalf("%s did not catch up: gtid_slave_pos %q, primary at %q; slave status %v", inst.Name, got, want, describeRows(rows))
		}
	}
}

// describeRows renders rows as column=value pairs, for failures.
func describeRows(rows interface {
	Columns() ([]string, error)
	Next() bool
	Scan(...any) error
	Close() error
}) string {
	if rows == nil {
		return "(none)"
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		_ = rows.Scan(ptrs...)
		for i, c := range cols {
			if b, ok := vals[i].([]byte); ok && len(b) > 0 {
				out = append(out, c+"="+string(b))
			}
		}
	}
	return strings.Join(out, " ")
}

// streamClone is the agent's CloneFunc as `dolphin agent` wires it (internal/agentops), for inst.
func streamClone(inst *dbtest.Instance) agent.CloneFunc {
	return func(ctx context.Context, req agent.CloneRequest, w io.Writer) error {
		socket := req.DB.Socket
		if socket == "" && req.DB.Host == "" {
			socket = inst.SocketPath()
		}
		_, err := backup.Stream(ctx, backup.StreamOptions{Socket: socket, Host: req.DB.Host, Port: req.DB.Port,
			User: req.DB.User, Password: req.DB.Password, DataDir: inst.DataDir,
			ExtraArgs: []string{"--log-copy-interval=100"}}, w)
		return err
	}
}

// serveAgent runs an agent with clone on 127.0.0.1 with a new PKI and token until the test
// ends, and points pc at it.
func (pc *peerCluster) serveAgent(t *testing.T, clone agent.CloneFunc) {
	t.Helper()
	dir := t.TempDir()
	ca, cert, key, err := agent.NewAgentPKI("db", "ns", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	token, err := agent.GenerateToken()
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"tls.crt": cert, "tls.key": key, "token": []byte(token + "\n")} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := agent.NewServer(agent.ServerOptions{
		TokenFile: filepath.Join(dir, "token"), CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key"),
		Backup: func(context.Context, agent.BackupRequest, func(int64)) (*backup.Manifest, error) {
			return nil, errors.New("no backups in this test")
		},
		Clone: clone, Logger: testr.New(t), ShutdownTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ServeListener(ctx, l) }()
	t.Cleanup(func() { cancel(); <-done })
	pc.agentURL, pc.serverName, pc.token, pc.caPEM = "https://"+l.Addr().String(), agent.AgentServerName("db", "ns"), token, ca
}

// peerOptions clones pc's agent into inst with the new cluster's passwords.
func (pc *peerCluster) peerOptions(t *testing.T, inst *dbtest.Instance) PeerOptions {
	tmp, err := os.MkdirTemp("", tmpDirTemplate) // short: the socket goes there
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	return PeerOptions{
		URL: pc.agentURL, ServerName: pc.serverName, Token: pc.token, CACertPEM: pc.caPEM,
		SourceDB: agent.DBConn{User: cloneUser, Password: clonePassword},
		DataDir:  inst.DataDir, DefaultsFile: inst.ConfigFile,
		OperatorUser: operatorUser, OperatorPassword: newOperatorPw, RootPassword: newRootPw,
		TmpDir: tmp, UseMemory: "64M", StartTimeout: time.Minute, StopTimeout: time.Minute,
		Log: func(format string, args ...any) { t.Logf("clone: "+format, args...) },
	}
}

// TestServerCloneFromPeer clones a real replica through a real agent into an empty data
// directory, starts a server on it and makes it replicate from the primary, whose binary logs
// before the clone are purged; then a clone whose stream fails midway, and one that is not
// zstd, leave nothing behind.
func TestServerCloneFromPeer(t *testing.T) {
	pc := startPeers(t)
	pc.serveAgent(t, streamClone(pc.replica))
	t.Run("IntoEmptyDataDir", func(t *testing.T) { testCloneIntoEmptyDataDir(t, pc) })
	t.Run("StreamFailsMidway", func(t *testing.T) {
		failing := *pc
		failing.serveAgent(t, func(ctx context.Context, req agent.CloneRequest, w io.Writer) error {
			return streamClone(pc.replica)(ctx, req, &failAfter{w: w, n: 512 << 10})
		})
		testCloneFails(t, &failing, "injected failure after 512 KiB")
	})
	t.Run("NotZstd", func(t *testing.T) {
		garbage := *pc
		garbage.serveAgent(t, func(_ context.Context, _ agent.CloneRequest, w io.Writer) error {
			_, err := w.Write([]byte(strings.Repeat("not a zstd frame ", 1000)))
			return err
		})
		testCloneFails(t, &garbage, "the stream is damaged")
	})
	t.Run("RedoLogCopyRetried", func(t *testing.T) {
		// The peer's mariadb-backup fell behind copying its redo log once (MDEV-39468).
		var calls atomic.Int32
		flaky := *pc
		flaky.serveAgent(t, func(ctx context.Context, req agent.CloneRequest, w io.Writer) error {
			if calls.Add(1) == 1 {
				return fmt.Errorf("backup stream: %w: Was only able to copy log from 1 to 2, not 3", backup.ErrRedoLogCopy)
			}
			return streamClone(pc.replica)(ctx, req, w)
		})
		inst := target(t)
		res, err := FromPeer(t.Context(), flaky.peerOptions(t, inst))
		if err != nil || calls.Load() != 2 {
			t.Fatalf("FromPeer = %+v, %v after %d clone(s); want success on the second", res, err, calls.Load())
		}
		inst.StartAs(t, "root", newRootPw)
		want := count(t, openDB(t, socketDSN(pc.replica, "root", "")), "app.t") // idle: no writes since
		if n := count(t, openDB(t, socketDSN(inst, "root", newRootPw)), "app.t"); n != want {
			t.Errorf("app.t has %d rows, the peer %d", n, want)
		}
	})
}

func testCloneIntoEmptyDataDir(t *testing.T, pc *peerCluster) {
	r := openDB(t, socketDSN(pc.replica, "root", ""))
	want := str(t, r, "SELECT @@gtid_current_pos")
	wantSum := checksum(t, r, "app.t")

	inst := target(t)
	opts := pc.peerOptions(t, inst)
	began := time.Now()
	res, err := FromPeer(t.Context(), opts)
	if err != nil {
		t.Fatalf("FromPeer: %v", err)
	}
	t.Logf("FromPeer took %v", time.Since(began).Round(time.Millisecond))
	if res.Skipped || !SameGTIDPosition(res.GTIDPosition, want) || res.Source != "clone from "+pc.agentURL {
		t.Errorf("Result %+v, want the replica's gtid_current_pos %q", res, want)
	}
	ents := dirEntries(t, inst.DataDir)
	for _, name := range []string{InitializedMarker, RestoredMarker, lostAndFound, "ibdata1", "mysql", "app"} {
		if !slices.Contains(ents, name) {
			t.Errorf("the data directory has no %s: %q", name, ents)
		}
	}
	if slices.Contains(ents, StagingDir) {
		t.Errorf("the staging directory is left: %q", ents)
	}
	b, err := os.ReadFile(filepath.Join(inst.DataDir, RestoredMarker))
	if err != nil {
		t.Fatal(err)
	}
	var mk Marker
	if err := json.Unmarshal(b, &mk); err != nil || mk.Source != "clone from "+pc.agentURL || !SameGTIDPosition(mk.GTIDPosition, want) || mk.RestoredAt.IsZero() {
		t.Errorf("%s: %s (%v)", RestoredMarker, b, err)
	}
	// Again on the initialised directory: nothing happens, even without a peer.
	again := opts
	again.URL, again.Token = "", ""
	if res, err := FromPeer(t.Context(), again); err != nil || !res.Skipped {
		t.Errorf("second FromPeer = %+v, %v; want Skipped", res, err)
	}

	inst.StartAs(t, "root", newRootPw)
	root := openDB(t, socketDSN(inst, "root", newRootPw))
	if n := count(t, root, "app.t"); n != peerRowsT {
		t.Errorf("app.t has %d rows, want %d", n, peerRowsT)
	}
	if got := checksum(t, root, "app.t"); got != wantSum {
		t.Errorf("app.t's checksum is %s, the replica's %s", got, wantSum)
	}
	if n := count(t, root, "app.u"); n != 20 {
		t.Errorf("app.u has %d rows, want 20", n)
	}
	for _, v := range []string{"gtid_binlog_pos", "gtid_slave_pos", "gtid_current_pos"} {
		if got := str(t, root, "SELECT @@"+v); !SameGTIDPosition(got, want) {
			t.Errorf("@@%s is %q, the replica's gtid_current_pos at the clone was %q", v, got, want)
		}
	}
	if n := rowCount(t, root, "SHOW ALL SLAVES STATUS"); n != 0 {
		t.Errorf("SHOW ALL SLAVES STATUS has %d rows: the replica's replication settings survived", n)
	}
	if err := openDB(t, tcpDSN(inst, operatorUser, newOperatorPw)).PingContext(t.Context()); err != nil {
		t.Errorf("the operator with the given password: %v", err)
	}

	// The primary's binary logs up to now are gone: the clone cannot be replayed from 0.
	p := openDB(t, tcpDSN(pc.primary, "root", ""))
	execAll(t, p, "FLUSH BINARY LOGS")
	current := binlogFile(t, p)
	// A log the replica's dump thread still reads is kept: try until it moved on.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		execAll(t, p, "PURGE BINARY LOGS TO '"+current+"'")
		n := rowCount(t, p, "SHOW BINARY LOGS")
		if n == 1 && current != "binlog.000001" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the primary has %d binary logs up to %s after PURGE", n, current)
		}
	}
	execAll(t, p,
		"INSERT INTO app.t SELECT seq, 'after the clone' FROM app.seq_100001_to_100100",
		"SET SESSION gtid_domain_id = 1", "INSERT INTO app.u VALUES (1000)", "SET SESSION gtid_domain_id = 0")
	execAll(t, root, fmt.Sprintf("CHANGE MASTER TO MASTER_HOST = '%s', MASTER_PORT = %d, MASTER_USER = 'root', MASTER_USE_GTID = slave_pos",
		pc.primary.Host, pc.primary.Port), "START SLAVE")
	waitReplicated(t, pc.primary, inst, newRootPw)
	if n := count(t, root, "app.t"); n != peerRowsT+100 {
		t.Errorf("after catching up app.t has %d rows, want %d", n, peerRowsT+100)
	}
	if got, want := checksum(t, root, "app.t"), checksum(t, p, "app.t"); got != want {
		t.Errorf("after catching up app.t's checksum is %s, the primary's %s", got, want)
	}
	t.Logf("the clone caught up from %q to %q", want, str(t, root, "SELECT @@gtid_slave_pos"))
}

// testCloneFails clones pc's (failing) agent into an empty data directory: the error says so
// and the directory is left as it was.
func testCloneFails(t *testing.T, pc *peerCluster, wantErr string) {
	inst := target(t)
	_, err := FromPeer(t.Context(), pc.peerOptions(t, inst))
	if err == nil || !strings.Contains(err.Error(), wantErr) || !strings.Contains(err.Error(), "nothing was cloned") {
		t.Fatalf("FromPeer from a failing peer: %v, want an error saying %q", err, wantErr)
	}
	t.Logf("error: %v", err)
	if ents := dirEntries(t, inst.DataDir); !slices.Equal(ents, []string{lostAndFound}) {
		t.Errorf("the data directory holds %q, want only %s", ents, lostAndFound)
	}
	if _, err := os.Stat(inst.ErrorLog); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a server was started on the failed clone: %s: %v", inst.ErrorLog, err)
	}
}

// failAfter passes n bytes to w, then fails.
type failAfter struct {
	w io.Writer
	n int
}

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		return 0, errors.New("injected failure after 512 KiB")
	}
	f.n -= len(p)
	return f.w.Write(p)
}

func checksum(t *testing.T, db querier, table string) string {
	t.Helper()
	var name, sum string
	if err := db.QueryRowContext(t.Context(), "CHECKSUM TABLE "+table).Scan(&name, &sum); err != nil {
		t.Fatal(err)
	}
	return sum
}

func binlogFile(t *testing.T, db querier) string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), "SHOW MASTER STATUS")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if !rows.Next() {
		t.Fatal("SHOW MASTER STATUS: no row (is the binary log on?)")
	}
	if err := rows.Scan(ptrs...); err != nil {
		t.Fatal(err)
	}
	return string(vals[0].([]byte))
}
