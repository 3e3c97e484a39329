package podcmd

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/binlog"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestServerBinlogArchiveCmd runs the real `dolphin binlog-archive` (this test binary as
// dolphin) as the operator's Deployment would: its first source answers nothing, so it reads
// from the second, a real server; its status endpoint refuses a wrong token and reports the
// archived position once the server's writes are in the store.
func TestServerBinlogArchiveCmd(t *testing.T) {
	src := dbtest.Start(t, dbtest.Options{Instances: 1}).Instances[0]
	db, err := sql.Open("mysql", src.RootDSN("interpolateParams=true"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var start string
	for _, q := range []string{"SET GLOBAL read_only = OFF", "CREATE USER 'arch'@'%' IDENTIFIED BY 'pw'",
		"GRANT REPLICATION SLAVE ON *.* TO 'arch'@'%'", "CREATE DATABASE app", "CREATE TABLE app.t (id INT PRIMARY KEY)"} {
		if _, err := db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := db.QueryRowContext(t.Context(), "SELECT @@gtid_binlog_pos").Scan(&start); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	root := filepath.Join(dir, "store")
	if err := os.Mkdir(root, 0o750); err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg, _ := json.Marshal(objectstore.Config{Directory: root})
	ca, cert, key, err := agent.NewAgentPKI("c", "ns", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	addr := testenv.FreeAddr(t)                   // the archiver binds it
	dead, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers: a proxy without a backend
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	var out bytes.Buffer
	cmd := exec.CommandContext(t.Context(), os.Args[0], "binlog-archive",
		"--store-config", write("store.json", cfg), "--prefix", "ns/c/binlog/",
		"--source", dead.Addr().String(), "--source", net.JoinHostPort(src.Host, strconv.Itoa(src.Port)),
		"--user", "arch", "--password-file", write("password", []byte("pw\n")), "--server-id", "4000000001",
		"--start", start, "--segment-max-age", "1s", "--listen", addr,
		"--token-file", write("token", []byte("tok\n")), "--tls-cert", write("tls.crt", cert), "--tls-key", write("tls.key", key))
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("dolphin binlog-archive:\n%s", out.String())
		}
	}()

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, ServerName: agent.AgentServerName("c", "ns")}}}
	url := "https://" + addr
	var st binlog.Status
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if st, err = binlog.FetchStatus(t.Context(), client, url, "tok"); err == nil && st.Connected {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the archiver did not connect: %+v, %v", st, err)
		}
	}
	if _, err := binlog.FetchStatus(t.Context(), client, url, "wrong"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("a wrong token: %v, want 401", err)
	}
	if want := net.JoinHostPort(src.Host, strconv.Itoa(src.Port)); st.Source != want {
		t.Errorf("reading from %q, want %q (the first source does not answer)", st.Source, want)
	}

	for i := 1; i <= 20; i++ {
		if _, err := db.ExecContext(t.Context(), fmt.Sprintf("INSERT INTO app.t VALUES (%d)", i)); err != nil {
			t.Fatal(err)
		}
	}
	var want string
	if err := db.QueryRowContext(t.Context(), "SELECT @@gtid_binlog_pos").Scan(&want); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if st, err = binlog.FetchStatus(t.Context(), client, url, "tok"); err == nil && st.Position == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the archive did not reach %s: %+v, %v", want, st, err)
		}
	}
	store, err := objectstore.NewDirectory(root)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := binlog.ListSegments(t.Context(), store, "ns/c/binlog/")
	if err != nil || l2.Err() != nil || l2.Last() == nil || l2.Last().End != want {
		t.Fatalf("ListSegments: %+v, %v; want segments up to %s", l2, err, want)
	}
	if st.LastUpload.IsZero() || st.LastCommit.IsZero() || st.Segment < 1 {
		t.Errorf("status %+v", st)
	}
	t.Logf("archived up to %s in %d segment(s) from %s", st.Position, st.Segment, st.Source)
}
