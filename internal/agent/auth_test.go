package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// authorized reports whether c's token is accepted: an unknown backup is a 404 behind the
// token check, a 401 before it.
func authorized(t *testing.T, c *Client) bool {
	t.Helper()
	_, err := c.BackupStatus(context.Background(), "nope")
	var se *StatusError
	switch {
	case errors.Is(err, ErrUnknownBackup):
		return true
	case errors.As(err, &se) && se.StatusCode == http.StatusUnauthorized:
		return false
	default:
		t.Fatalf("BackupStatus = %v, want a 404 or a 401", err)
		return false
	}
}

func TestAgentAuthRequired(t *testing.T) {
	a := startAgent(t, nil, nil)
	raw := a.rawClient()
	base := "https://" + a.addr

	for name, header := range map[string]string{
		"no token":    "",
		"wrong token": "Bearer not-the-token",
		"basic auth":  "Basic " + testToken,
		"prefix only": "Bearer " + testToken[:5],
	} {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/backups/x", nil)
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		resp, err := raw.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: status %d, want 401", name, resp.StatusCode)
		}
	}
	// Every API route is behind the token, even those that do not exist.
	for _, path := range []string{"/v1/clone", "/v1/backups", "/nothing"} {
		resp, err := raw.Post(base+path, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("POST %s without a token: status %d, want 401", path, resp.StatusCode)
		}
	}

	resp, err := raw.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok\n" {
		t.Errorf("GET /healthz without a token = %d %q, want 200 ok", resp.StatusCode, body)
	}

	if !authorized(t, a.client(testToken)) {
		t.Error("the right token was refused")
	}
	_, err = a.client("wrong").BackupStatus(context.Background(), "x")
	var se *StatusError
	if !errors.As(err, &se) || se.StatusCode != http.StatusUnauthorized || !strings.Contains(err.Error(), a.addr) {
		t.Errorf("a wrong token gave %v, want a 401 StatusError naming the agent", err)
	}
	if err := a.client("wrong").Healthy(context.Background()); err != nil {
		t.Errorf("Healthy with a wrong token = %v, want nil (no token needed)", err)
	}
}

func TestAgentTokenRotation(t *testing.T) {
	a := startAgent(t, nil, nil)
	old, rotated := a.client(testToken), a.client("rotated-token-9876543210")
	if !authorized(t, old) || authorized(t, rotated) {
		t.Fatal("before the rotation, want the old token accepted and the new one refused")
	}
	writeFileAtomic(t, a.tokenFile, []byte("rotated-token-9876543210\n"))
	if authorized(t, old) || !authorized(t, rotated) {
		t.Error("after the rotation, want the old token refused and the new one accepted")
	}
	// A token file that becomes empty keeps the last good token rather than locking out.
	writeFileAtomic(t, a.tokenFile, nil)
	if !authorized(t, rotated) {
		t.Error("an empty token file dropped the last good token")
	}
}

func TestAgentCertificateReload(t *testing.T) {
	a := startAgent(t, nil, nil)
	oldCA := a.client(testToken)
	if err := oldCA.Healthy(context.Background()); err != nil {
		t.Fatal(err)
	}
	next := writePKI(t, t.TempDir(), testCluster, testNamespace)
	writeFileAtomic(t, a.pki.keyFile, next.keyPEM)
	writeFileAtomic(t, a.pki.certFile, next.certPEM)

	newCA := a.clientWith(ClientOptions{Token: testToken, CACertPEM: next.caPEM, ServerName: AgentServerName(testCluster, testNamespace)})
	if err := newCA.Healthy(context.Background()); err != nil {
		t.Errorf("after the certificate changed, a client trusting the new CA: %v", err)
	}
	oldCA.CloseIdleConnections()
	if err := oldCA.Healthy(context.Background()); err == nil {
		t.Error("after the certificate changed, a client trusting only the old CA still connected")
	}
	both := a.clientWith(ClientOptions{Token: testToken, CACertPEM: append(append([]byte{}, a.pki.caPEM...), next.caPEM...),
		ServerName: AgentServerName(testCluster, testNamespace)})
	if err := both.Healthy(context.Background()); err != nil {
		t.Errorf("a client trusting both CAs: %v", err)
	}

	// A key that does not match the certificate (half-written update) keeps the last good pair.
	other := writePKI(t, t.TempDir(), testCluster, testNamespace)
	writeFileAtomic(t, a.pki.keyFile, other.keyPEM)
	newCA.CloseIdleConnections()
	if err := newCA.Healthy(context.Background()); err != nil {
		t.Errorf("with a mismatched key on disk, the last good certificate was not kept: %v", err)
	}
}

func TestAgentClientRefusesOtherCA(t *testing.T) {
	a := startAgent(t, nil, nil)
	other := writePKI(t, t.TempDir(), testCluster, testNamespace)
	c := a.clientWith(ClientOptions{Token: testToken, CACertPEM: other.caPEM, ServerName: AgentServerName(testCluster, testNamespace)})
	err := c.Healthy(context.Background())
	if err == nil || !strings.Contains(err.Error(), "certificate") || !strings.Contains(err.Error(), a.addr) {
		t.Errorf("Healthy against a certificate of another CA = %v, want a certificate error naming the agent", err)
	}
}

func TestAgentClientRefusesWrongServerName(t *testing.T) {
	a := startAgent(t, nil, nil)
	for _, name := range []string{AgentServerName("other", testNamespace), AgentServerName(testCluster, "other"), ""} {
		c := a.clientWith(ClientOptions{Token: testToken, CACertPEM: a.pki.caPEM, ServerName: name})
		if err := c.Healthy(context.Background()); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("ServerName %q: Healthy = %v, want a certificate name error", name, err)
		}
	}
}

func TestAgentBodyLimit(t *testing.T) {
	a := startAgent(t, nil, nil)
	raw := a.rawClient()
	big := append([]byte(`{"id":"b1","prefix":"`), bytes.Repeat([]byte("x"), MaxRequestBytes)...)
	big = append(big, `","store":{}}`...)
	for _, path := range []string{"/v1/backups", "/v1/clone"} {
		req, _ := http.NewRequest(http.MethodPost, "https://"+a.addr+path, bytes.NewReader(big))
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := raw.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("POST %s with a %d-byte body: status %d, want 413", path, len(big), resp.StatusCode)
		}
	}
}

func TestAgentNewServerChecksFiles(t *testing.T) {
	dir := t.TempDir()
	p := writePKI(t, dir, testCluster, testNamespace)
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fn := func(context.Context, CloneRequest, io.Writer) error { return nil }
	opts := ServerOptions{TokenFile: tok, CertFile: p.certFile, KeyFile: p.keyFile, Backup: nil, Clone: fn}
	if _, err := NewServer(opts); err == nil {
		t.Error("NewServer without a Backup function succeeded")
	}
	opts.Backup = (&blockingBackup{}).run
	if _, err := NewServer(opts); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("NewServer with an empty token file = %v, want an error", err)
	}
	if err := os.WriteFile(tok, []byte("t"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts.KeyFile = filepath.Join(dir, "missing.key")
	if _, err := NewServer(opts); err == nil {
		t.Error("NewServer with a missing key file succeeded")
	}
}
