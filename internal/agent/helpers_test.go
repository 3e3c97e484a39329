package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"

	"github.com/dolphin-operator/dolphin/internal/backup"
)

const (
	testCluster   = "db"
	testNamespace = "prod"
	testToken     = "test-token-0123456789"
)

// testPKI is an agent CA and server certificate written to files.
type testPKI struct {
	caPEM             []byte
	certFile, keyFile string
	certPEM, keyPEM   []byte
}

// writePKI generates a PKI for cluster/namespace and writes the server pair into dir.
func writePKI(t *testing.T, dir, cluster, namespace string) testPKI {
	t.Helper()
	ca, cert, key, err := NewAgentPKI(cluster, namespace, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p := testPKI{caPEM: ca, certFile: filepath.Join(dir, "tls.crt"), keyFile: filepath.Join(dir, "tls.key"), certPEM: cert, keyPEM: key}
	writeFileAtomic(t, p.certFile, cert)
	writeFileAtomic(t, p.keyFile, key)
	return p
}

// writeFileAtomic replaces path as Kubernetes replaces a Secret's file: a new file renamed over
// the old one.
func writeFileAtomic(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// testAgent is a running agent on a loopback port.
type testAgent struct {
	t         *testing.T
	dir       string
	pki       testPKI
	tokenFile string
	addr      string
	opts      ServerOptions
	stop      context.CancelFunc
	served    chan error
}

// startAgent runs an agent with backup and clone (nil: functions that fail the test) in a new
// folder and stops it when the test ends.
func startAgent(t *testing.T, backupFn BackupFunc, cloneFn CloneFunc) *testAgent {
	t.Helper()
	dir := t.TempDir()
	a := &testAgent{t: t, dir: dir, pki: writePKI(t, dir, testCluster, testNamespace), tokenFile: filepath.Join(dir, "token")}
	writeFileAtomic(t, a.tokenFile, []byte(testToken+"\n"))
	if backupFn == nil {
		backupFn = func(context.Context, BackupRequest, func(int64)) (*backup.Manifest, error) {
			return nil, errors.New("no backup in this test")
		}
	}
	if cloneFn == nil {
		cloneFn = func(context.Context, CloneRequest, io.Writer) error { return errors.New("no clone in this test") }
	}
	a.opts = ServerOptions{
		TokenFile: a.tokenFile, CertFile: a.pki.certFile, KeyFile: a.pki.keyFile,
		Backup: backupFn, Clone: cloneFn, Logger: testLogger(t), ShutdownTimeout: 5 * time.Second,
	}
	a.start("127.0.0.1:0")
	t.Cleanup(a.shutdown)
	return a
}

// start serves on addr (the previous address for a restart).
func (a *testAgent) start(addr string) {
	a.t.Helper()
	srv, err := NewServer(a.opts)
	if err != nil {
		a.t.Fatal(err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		a.t.Fatal(err)
	}
	a.addr = l.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	a.stop, a.served = cancel, make(chan error, 1)
	go func() { a.served <- srv.ServeListener(ctx, l) }()
}

// shutdown stops the agent and checks that Serve returned nil.
func (a *testAgent) shutdown() {
	a.t.Helper()
	if a.stop == nil {
		return
	}
	a.stop()
	a.stop = nil
	select {
	case err := <-a.served:
		if err != nil {
			a.t.Errorf("Serve after shutdown = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		a.t.Error("Serve did not return after its context was cancelled")
	}
}

// restart stops the agent and starts a new one on the same address.
func (a *testAgent) restart() {
	a.t.Helper()
	a.shutdown()
	a.start(a.addr)
}

// client returns a client of the agent with the given token, trusting the agent's CA.
func (a *testAgent) client(token string) *Client {
	a.t.Helper()
	return a.clientWith(ClientOptions{Token: token, CACertPEM: a.pki.caPEM, ServerName: AgentServerName(testCluster, testNamespace)})
}

// clientWith fills in BaseURL (and Timeout) and builds the client.
func (a *testAgent) clientWith(o ClientOptions) *Client {
	a.t.Helper()
	o.BaseURL = "https://" + a.addr
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	c, err := NewClient(o)
	if err != nil {
		a.t.Fatal(err)
	}
	a.t.Cleanup(c.CloseIdleConnections)
	return c
}

// rawClient is an HTTP client that trusts the agent, for requests the Client would not send.
func (a *testAgent) rawClient() *http.Client {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(a.pki.caPEM)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: AgentServerName(testCluster, testNamespace)}}
	a.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}
}

func testLogger(t *testing.T) logr.Logger {
	return testr.NewWithOptions(t, testr.Options{Verbosity: 1})
}

// restartWith changes the options and restarts the agent on the same address.
func (a *testAgent) restartWith(change func(*ServerOptions)) {
	a.t.Helper()
	change(&a.opts)
	a.restart()
}
