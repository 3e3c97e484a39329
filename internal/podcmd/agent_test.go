package podcmd

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

func TestAgentCmdRequiresFiles(t *testing.T) {
	if _, err := run(t, "agent"); err == nil || !strings.Contains(err.Error(), "--token-file") {
		t.Errorf("dolphin agent without flags = %v, want --token-file required", err)
	}
	if _, err := run(t, "agent", "--token-file", "/t"); err == nil || !strings.Contains(err.Error(), "--tls-cert") {
		t.Errorf("dolphin agent without a certificate = %v, want --tls-cert required", err)
	}
}

func TestAgentCmdServes(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key, err := agent.NewAgentPKI("db", "ns", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	token, err := agent.GenerateToken()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"ca.crt": ca, "tls.crt": cert, "tls.key": key, "token": []byte(token)}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	addr := testenv.FreeAddr(t)

	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	// The flags the pod spec passes (internal/resources/agent.go).
	root.SetArgs([]string{"agent", "--listen", addr,
		"--token-file", filepath.Join(dir, "token"), "--tls-cert", filepath.Join(dir, "tls.crt"), "--tls-key", filepath.Join(dir, "tls.key"),
		"--flavor", "mariadb", "--datadir", dir, "--socket", filepath.Join(dir, "mysqld.sock")})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()

	c, err := agent.NewClient(agent.ClientOptions{BaseURL: "https://" + addr, Token: token, CACertPEM: ca,
		ServerName: agent.AgentServerName("db", "ns"), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	deadline := time.Now().Add(10 * time.Second)
	for c.Healthy(ctx) != nil {
		select {
		case err := <-done:
			t.Fatalf("dolphin agent exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not answer: %v", c.Healthy(ctx))
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A backup whose request names no store fails with the store's reason (the agent is
	// wired to internal/backup; real backups are proven in internal/backup and test/e2e).
	if _, err := c.StartBackup(ctx, agent.BackupRequest{ID: "b1", Store: agent.StoreConfig(`{}`)}); err != nil {
		t.Fatal(err)
	}
	for {
		st, err := c.BackupStatus(ctx, "b1")
		if err != nil {
			t.Fatal(err)
		}
		if st.Finished() {
			if st.Phase != agent.BackupFailed || !strings.Contains(st.Error, "no store given") {
				t.Errorf("backup b1 = %+v, want Failed saying no store was given", st)
			}
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := c.BackupStatus(ctx, "unknown"); !errors.Is(err, agent.ErrUnknownBackup) {
		t.Errorf("BackupStatus unknown = %v, want ErrUnknownBackup", err)
	}

	// A clone is backup.Stream on the --socket: without a server there, it fails before the
	// first byte, on its first login (real clones: internal/restore, seed tests).
	var se *agent.StatusError
	if _, err := c.Clone(ctx, agent.CloneRequest{DB: agent.DBConn{User: "root"}}); !errors.As(err, &se) ||
		se.StatusCode != http.StatusInternalServerError || !strings.Contains(se.Message, "mysqld.sock: connect") {
		t.Errorf("Clone without a server = %v, want a 500 saying the socket does not answer", err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("dolphin agent after its context ended = %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("dolphin agent did not stop")
	}
}
