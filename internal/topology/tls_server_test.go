package topology

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/pki"
)

// wiretap is a TCP proxy in front of one server that keeps every byte it forwards, in both
// directions, so a test can tell whether a text crossed the wire readable.
type wiretap struct {
	ln   net.Listener
	mu   sync.Mutex
	seen bytes.Buffer
}

func newWiretap(t *testing.T, target string) *wiretap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := &wiretap{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go w.forward(c, target)
		}
	}()
	return w
}

func (w *wiretap) forward(c net.Conn, target string) {
	defer c.Close()
	s, err := net.DialTimeout("tcp", target, 3*time.Second)
	if err != nil {
		return
	}
	defer s.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(io.MultiWriter(dst, w), src)
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go pipe(s, c)
	go pipe(c, s)
	<-done
	<-done
}

// Write records forwarded bytes (at most 64 MiB).
func (w *wiretap) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen.Len() < 64<<20 {
		w.seen.Write(p)
	}
	return len(p), nil
}

func (w *wiretap) port() int { return w.ln.Addr().(*net.TCPAddr).Port }

// readable reports which of texts crossed the wire in plain text since the last reset.
func (w *wiretap) readable(texts ...string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, s := range texts {
		if bytes.Contains(w.seen.Bytes(), []byte(s)) {
			out = append(out, s)
		}
	}
	return out
}

func (w *wiretap) reset() { w.mu.Lock(); w.seen.Reset(); w.mu.Unlock() }

// writeCA writes a CA and a server certificate it signed for 127.0.0.1 into dir and returns
// the file paths and the CA's PEM.
func writeCA(t *testing.T, dir, name string) (ca, cert, key string, caPEM []byte) {
	t.Helper()
	caPEM, caKey, err := pki.NewCA("test-ca-"+name, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := pki.Issue(caPEM, caKey, pki.Leaf{CommonName: "db.test", DNSNames: []string{"db.test"},
		IPs: []net.IP{net.ParseIP("127.0.0.1")}, Validity: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ca, cert, key = filepath.Join(dir, name+"-ca.crt"), filepath.Join(dir, name+"-tls.crt"), filepath.Join(dir, name+"-tls.key")
	for p, b := range map[string][]byte{ca: caPEM, cert: certPEM, key: keyPEM} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return ca, cert, key, caPEM
}

// TestServerEngineAndReplicationOverTLS runs the engine on three real servers that serve TLS,
// each behind a proxy that records the bytes it forwards. While the members are not known to
// serve TLS (as when their pods have not been restarted with it), the engine's statements and
// the replicated rows cross the proxies readable — which shows the check can fail. Once they
// are, the engine reconnects over TLS verifying the CA and the replicas are re-pointed over
// TLS: nothing readable crosses any more. A server that presents a certificate of another CA
// is not talked to (x509: unknown authority) until it has the right one again.
func TestServerEngineAndReplicationOverTLS(t *testing.T) {
	dbtest.RequireMariaDB(t)
	db := dbtest.Start(t, dbtest.Options{Instances: 3})
	dir := t.TempDir()
	ca, cert, key, caPEM := writeCA(t, dir, "good")
	_, rogueCert, rogueKey, _ := writeCA(t, dir, "rogue")
	tlsArgs := func(cert, key string) []string {
		return []string{"--ssl-ca=" + ca, "--ssl-cert=" + cert, "--ssl-key=" + key}
	}
	taps := make([]*wiretap, len(db.Instances))
	plain := make([]Member, len(db.Instances))
	for i, in := range db.Instances {
		in.Stop(t)
		in.Start(t, tlsArgs(cert, key)...)
		taps[i] = newWiretap(t, in.Addr())
		plain[i] = Member{Name: in.Name, Host: "127.0.0.1", Port: taps[i].port()}
	}
	var members atomic.Pointer[[]Member]
	members.Store(&plain)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	h := &harness{t: t, db: db}
	h.e = New(Config{
		Flavor:      dbsql.FlavorMariaDB,
		Members:     func() []Member { return *members.Load() },
		Credentials: Credentials{Accounts: testAccounts, Bootstrap: dbsql.Account{User: "root"}},
		Settings:    Settings{FailoverEnabled: true, DetectionAttempts: 2},
		Interval:    200 * time.Millisecond,
		WaitTimeout: 30 * time.Second,
		TLSRoots:    roots,
		TLSCAFile:   ca,
		Reporter:    h,
		Log:         testr.New(t),
	}, Persisted{})
	t.Cleanup(h.e.Close)
	h.converge("three instances healthy, plain connections", healthyWith("db-0"))
	mustExec(t, h.sqlDB(0), "CREATE DATABASE app")
	mustExec(t, h.sqlDB(0), "CREATE TABLE app.rows (id BIGINT PRIMARY KEY, v VARCHAR(40))")
	h.createAppAccount()
	app := appDB(t, db.Instances[0])

	engineText := []string{"SHOW ALL SLAVES STATUS", "gtid_binlog_pos", testAccounts.Operator.User}
	mark := func(id int) string {
		v := fmt.Sprintf("wire-marker-%d", id)
		mustExec(t, app, "INSERT INTO app.rows (id, v) VALUES (?, ?)", id, v)
		return v
	}
	// Control: plain connections are readable on the wire.
	m1 := mark(1)
	h.waitSameRows("db-0", "db-1", "db-2")
	h.converge("healthy", healthyWith("db-0"))
	if got := taps[0].readable(m1); len(got) == 0 {
		t.Fatal("control: the replicated row did not cross the primary's proxy readable; the check could not fail")
	}
	if got := taps[1].readable(engineText...); len(got) != len(engineText) {
		t.Fatalf("control: the engine's plain statements to db-1 not seen on the wire (saw %v)", got)
	}

	// The members now serve TLS, as after their pods were restarted with it.
	withTLS := make([]Member, len(plain))
	for i, m := range plain {
		m.TLSServerName = "127.0.0.1"
		withTLS[i] = m
	}
	members.Store(&withTLS)
	h.converge("replicas re-pointed over TLS", func(d Decision) bool {
		if d.State != StateHealthy || d.Primary != "db-0" {
			return false
		}
		for _, in := range db.Instances[1:] {
			st, err := statusOf(h, h.index(in.Name))
			if err != nil || st.Replica == nil || !st.Replica.SSL || !st.Replica.IORunning {
				return false
			}
		}
		return true
	})
	for _, in := range db.Instances[1:] {
		st, err := statusOf(h, h.index(in.Name))
		if err != nil {
			t.Fatal(err)
		}
		if rs := st.Replica; rs.SSLCAFile != ca || !rs.SSLVerifyName {
			t.Errorf("%s replicates with CA %q, verify name %v; want %q and true (the proxy address is in the certificate)", in.Name, rs.SSLCAFile, rs.SSLVerifyName, ca)
		}
	}
	// Old plain sessions are gone (the engine replaced its pools; replicas reconnected):
	// from now on nothing may cross readable.
	for _, tp := range taps {
		tp.reset()
	}
	m2 := mark(2)
	h.waitSameRows("db-0", "db-1", "db-2")
	for range 10 {
		h.converge("healthy over TLS", healthyWith("db-0"))
	}
	for i, tp := range taps {
		if got := tp.readable(append([]string{m2}, engineText...)...); len(got) > 0 {
			t.Errorf("db-%d: %q crossed its proxy in plain text with TLS on", i, got)
		}
	}

	// db-2 restarts with a certificate another CA signed: the engine refuses to talk to it.
	rogue := db.Instances[2]
	rogue.Stop(t)
	rogue.Start(t, tlsArgs(rogueCert, rogueKey)...)
	var lastErr string
	deadline := time.Now().Add(30 * time.Second)
	for ; time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		views := h.e.observe(t.Context(), withTLS)
		if v := views[2]; v.Status == nil && v.Err != nil {
			lastErr = v.Err.Error()
			if strings.Contains(lastErr, "x509") {
				break
			}
		}
	}
	if !strings.Contains(lastErr, "x509") {
		t.Fatalf("db-2 with another CA's certificate: last error %q, want a certificate verification failure", lastErr)
	}
	t.Logf("db-2 with another CA's certificate: %s", lastErr)
	d, _ := h.e.Cycle(t.Context())
	if d.State == StateHealthy {
		t.Errorf("cluster healthy while db-2 cannot be verified: %s", d.Message)
	}
	rogue.Stop(t)
	rogue.Start(t, tlsArgs(cert, key)...)
	h.converge("db-2 back with the cluster's certificate", healthyWith("db-0"))
	m3 := mark(3)
	h.waitSameRows("db-0", "db-1", "db-2")
	if got := taps[0].readable(m3); len(got) > 0 {
		t.Errorf("row %q crossed the primary's proxy in plain text", m3)
	}

	// TLS required for clients: every instance refuses plain TCP logins; the engine and
	// replication (over TLS) carry on.
	h.e.cfg.TLSRequired = true
	secureEverywhere := func(want bool) func(Decision) bool {
		return func(d Decision) bool {
			if d.State != StateHealthy {
				return false
			}
			for i := range db.Instances {
				st, err := tlsStatusOf(h, i, roots)
				if err != nil { // an instance that serves no TLS
					st, err = statusOf(h, i)
				}
				if err != nil || st.RequireSecureTransport != want {
					return false
				}
			}
			return true
		}
	}
	h.converge("plain logins refused everywhere", secureEverywhere(true))
	plainApp := appDB(t, db.Instances[1])
	if err := plainApp.Ping(); err == nil {
		t.Error("a plain login of the application account was accepted with TLS required")
	} else {
		t.Logf("plain login with TLS required: %v", err)
	}
	m4 := mark(4) // app is an open session from before: it keeps working
	h.waitSameRows("db-0", "db-1", "db-2")
	h.converge("healthy with TLS required", healthyWith("db-0"))
	if got := taps[0].readable(m4); len(got) > 0 {
		t.Errorf("row %q crossed the primary's proxy in plain text", m4)
	}

	// An instance re-created without TLS (its pod's template lost it): plain logins are
	// allowed again everywhere, so that it is not cut off, and it replicates in plain text.
	mixed := append([]Member(nil), withTLS...)
	mixed[2].TLSServerName = ""
	rogue.Stop(t)
	members.Store(&mixed)
	rogue.Start(t)
	h.converge("plain logins allowed again while db-2 serves no TLS", secureEverywhere(false))
	m5 := mark(5)
	h.waitSameRows("db-0", "db-1", "db-2")
	if st, err := statusOf(h, 2); err != nil || st.Replica == nil || st.Replica.SSL {
		t.Errorf("db-2 without TLS: replica status %+v, %v; want plain replication", st, err)
	}
	t.Logf("row %s replicated to db-2 in plain text", m5)
}

// tlsStatusOf reads instance i's status over a verified TLS connection (direct, not through
// its proxy), which works whether or not plain logins are refused.
func tlsStatusOf(h *harness, i int, roots *x509.CertPool) (*dbsql.Status, error) {
	in, err := dbsql.Open(dbsql.Config{Flavor: dbsql.FlavorMariaDB, Addr: h.db.Instances[i].Addr(),
		User: testAccounts.Operator.User, Password: testAccounts.Operator.Password,
		TLS: &tls.Config{RootCAs: roots, ServerName: "db.test", MinVersion: tls.VersionTLS12}})
	if err != nil {
		return nil, err
	}
	defer in.Close()
	return in.Status(context.Background())
}

// appDB is a pool on instance in as the application account, direct (not through a proxy).
func appDB(t *testing.T, in *dbtest.Instance) *sql.DB {
	t.Helper()
	d, err := sql.Open("mysql", fmt.Sprintf("%s:%s@tcp(%s)/?timeout=2s&readTimeout=10s", appAccount.User, appAccount.Password, in.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}
