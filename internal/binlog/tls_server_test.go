package binlog

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/pki"
)

// serverTLS writes a CA and a server certificate for db.test into a temporary directory and
// returns the my.cnf settings that serve it, and a client configuration that trusts the CA.
func serverTLS(t *testing.T, name string) (map[string]string, *tls.Config) {
	t.Helper()
	dir := t.TempDir()
	caPEM, caKey, err := pki.NewCA("archive-test-"+name, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := pki.Issue(caPEM, caKey, pki.Leaf{CommonName: "db.test", DNSNames: []string{"db.test"}, Validity: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"ca.crt": caPEM, "tls.crt": certPEM, "tls.key": keyPEM}
	for f, b := range files {
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	return map[string]string{"ssl_ca": filepath.Join(dir, "ca.crt"), "ssl_cert": filepath.Join(dir, "tls.crt"), "ssl_key": filepath.Join(dir, "tls.key")},
		&tls.Config{RootCAs: roots, ServerName: "db.test", MinVersion: tls.VersionTLS12}
}

// TestServerArchiverOverTLS: the archiver reads a server that serves TLS over a verified TLS
// connection (the session's cipher is seen on the server), and refuses to read a server whose
// certificate another CA signed — nothing is archived from it.
func TestServerArchiverOverTLS(t *testing.T) {
	cnf, good := serverTLS(t, "good")
	_, other := serverTLS(t, "other")
	src := startServersWith(t, 1, cnf)[0]
	store, _ := newStore(t)

	// A CA the server's certificate does not chain to: refused, nothing archived.
	var ep atomic.Pointer[Endpoint]
	bad := src.endpoint()
	bad.TLS = other
	ep.Store(&bad)
	a, stop := runArchiver(t, ArchiverOptions{Store: store, SegmentMaxAge: 200 * time.Millisecond}, &ep)
	src.exec("CREATE DATABASE app")
	waitFor(t, "the certificate refused", func() (bool, string) {
		st := a.Status()
		return strings.Contains(st.LastError, "x509"), fmt.Sprintf("%+v", st)
	})
	t.Logf("archiver with another CA: %s", a.Status().LastError)
	if l, err := ListSegments(t.Context(), store, ""); err != nil || len(l.Segments) != 0 {
		t.Fatalf("segments archived from an unverified server: %+v, %v", l, err)
	}
	stop()

	// The right CA: archived over TLS. The archiver's account may log in only over TLS, so
	// the stream itself (not only a probe) is encrypted.
	src.execNoBinlog(fmt.Sprintf("ALTER USER '%s'@'%%' REQUIRE SSL", archUser))
	ok := src.endpoint()
	ok.TLS = good
	ep.Store(&ok)
	a, _ = runArchiver(t, ArchiverOptions{Store: store, SegmentMaxAge: 200 * time.Millisecond}, &ep)
	waitFor(t, "connected over TLS", func() (bool, string) { return a.Status().Connected, fmt.Sprintf("%+v", a.Status()) })
	want := src.pos()
	waitArchived(t, a, want)
	if _, txns := archivedTransactions(t, store, ""); len(txns) != 1 {
		t.Errorf("archived %d transactions, want 1", len(txns))
	}

	// A server that serves no TLS is not read from in plain text by an archiver told to use TLS.
	plain := startServers(t, 1)[0]
	pep := plain.endpoint()
	pep.TLS = good
	var ep2 atomic.Pointer[Endpoint]
	ep2.Store(&pep)
	a2, _ := runArchiver(t, ArchiverOptions{Store: store, Prefix: "plain/", SegmentMaxAge: 200 * time.Millisecond}, &ep2)
	plain.exec("CREATE DATABASE app")
	waitFor(t, "a server without TLS refused", func() (bool, string) {
		st := a2.Status()
		return st.LastError != "" && !st.Connected, fmt.Sprintf("%+v", st)
	})
	t.Logf("archiver told to use TLS, server without it: %s", a2.Status().LastError)
	if l, err := ListSegments(t.Context(), store, "plain/"); err != nil || len(l.Segments) != 0 {
		t.Errorf("segments archived in plain text: %+v, %v", l, err)
	}
}
