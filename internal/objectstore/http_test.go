package objectstore_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"io/fs"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// Names of the test store server's certificate: agent.AgentServerName(httpCluster, httpNS).
const (
	httpCluster = "c1"
	httpNS      = "ns1"
	httpToken   = "test-token-0123456789"
)

// httpServer is a store server over a directory store in dir, on a real TLS listener whose
// certificate is signed by ca.
type httpServer struct {
	srv *httptest.Server
	dir string
	ca  []byte
}

// pki makes a CA and a server certificate it signs, as the operator does for agents.
func pki(t *testing.T) (caPEM []byte, cert tls.Certificate) {
	t.Helper()
	caPEM, certPEM, keyPEM, err := agent.NewAgentPKI(httpCluster, httpNS, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return caPEM, cert
}

// startHTTPServer serves a directory store in dir (a new temporary directory when empty).
func startHTTPServer(t *testing.T, dir string) *httpServer {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	st, err := objectstore.NewDirectory(dir)
	if err != nil {
		t.Fatal(err)
	}
	ca, cert := pki(t)
	srv := httptest.NewUnstartedServer(objectstore.NewHTTPHandler(st, httpToken))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	srv.Config.ReadHeaderTimeout = 30 * time.Second
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the TLS tests' handshake failures
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return &httpServer{srv: srv, dir: dir, ca: ca}
}

func (s *httpServer) config() objectstore.HTTPConfig {
	return objectstore.HTTPConfig{
		URL:        s.srv.URL,
		CACertPEM:  s.ca,
		ServerName: agent.AgentServerName(httpCluster, httpNS),
		Token:      httpToken,
	}
}

// client is a store server client with cfg changed by edit.
func (s *httpServer) client(t *testing.T, edit func(*objectstore.HTTPConfig)) objectstore.Store {
	t.Helper()
	cfg := s.config()
	if edit != nil {
		edit(&cfg)
	}
	st, err := objectstore.NewHTTP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// rawClient is an HTTP client that trusts the server, for requests the store's client would
// not send.
func (s *httpServer) rawClient() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.ca)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, ServerName: agent.AgentServerName(httpCluster, httpNS),
	}}}
}

// walk lists the objects and the upload temporary files under dir.
func walk(t *testing.T, dir string) (objects, temps []string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if strings.HasPrefix(e.Name(), ".upload-") {
			temps = append(temps, rel)
		} else {
			objects = append(objects, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return objects, temps
}

// assertNothingLeft checks that the server's directory holds exactly the objects want and no
// temporary file, waiting for a server-side abort to finish.
func (s *httpServer) assertNothingLeft(t *testing.T, want ...string) {
	t.Helper()
	testenv.EventuallyTrue(t, 30*time.Second, "cleaned up", func() bool {
		_, temps := walk(t, s.dir)
		return len(temps) == 0
	})
	if objects, _ := walk(t, s.dir); !slices.Equal(objects, want) {
		t.Errorf("objects on the server: %q, want %q", objects, want)
	}
}

// writeChunks writes data to up in odd-sized chunks and returns the first error.
func writeChunks(up objectstore.Upload, data []byte) error {
	sizes := []int{1, 7, 4093, 65537, 1<<20 + 3, 333}
	for i := 0; len(data) > 0; i++ {
		n := min(sizes[i%len(sizes)], len(data))
		if _, err := up.Write(data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{1, 2, 3})
	_, _ = r.Read(b)
	return b
}

func httpPut(t *testing.T, st objectstore.Store, key string, data []byte) objectstore.ObjectInfo {
	t.Helper()
	up, err := st.Create(t.Context(), key)
	if err != nil {
		t.Fatalf("Create(%q): %v", key, err)
	}
	if err := writeChunks(up, data); err != nil {
		t.Fatalf("Write(%q): %v", key, err)
	}
	info, err := up.Commit()
	if err != nil {
		t.Fatalf("Commit(%q): %v", key, err)
	}
	return info
}

func httpGet(t *testing.T, st objectstore.Store, key string) []byte {
	t.Helper()
	r, err := st.Open(t.Context(), key)
	if err != nil {
		t.Fatalf("Open(%q): %v", key, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("reading %q: %v", key, err)
	}
	return b
}

// TestHTTPRoundTrip streams a multi-MiB object, an empty one and one whose key needs escaping
// through the store server, and checks Stat, List order, Delete and missing objects.
func TestHTTPRoundTrip(t *testing.T) {
	s := startHTTPServer(t, "")
	st := s.client(t, nil)
	ctx := t.Context()
	if got, want := st.Describe(), "dolphin-store "+s.srv.URL+"/"; got != want || strings.Contains(got, httpToken) {
		t.Errorf("Describe() = %q, want %q", got, want)
	}

	big := randomBytes(5<<20 + 12345)
	info := httpPut(t, st, "cluster/full/data.xb", big)
	if info.Key != "cluster/full/data.xb" || info.Size != int64(len(big)) || info.Modified.IsZero() {
		t.Errorf("Commit: %+v", info)
	}
	if got := httpGet(t, st, "cluster/full/data.xb"); !bytes.Equal(got, big) {
		t.Fatalf("read back %d bytes, differing from the %d written", len(got), len(big))
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.srv.URL+"/v1/objects/cluster/full/data.xb", nil)
	req.Header.Set("Authorization", "Bearer "+httpToken)
	if resp, err := s.rawClient().Do(req); err != nil || resp.ContentLength != int64(len(big)) {
		t.Errorf("GET: %v, %v; want a Content-Length of %d", resp, err, len(big))
	} else {
		resp.Body.Close()
	}
	if st, err := st.Stat(ctx, "cluster/full/data.xb"); err != nil || st.Size != int64(len(big)) || !st.Modified.Equal(info.Modified) {
		t.Errorf("Stat: %+v, %v; want %+v", st, err, info)
	}
	if info := httpPut(t, st, "empty", nil); info.Size != 0 {
		t.Errorf("empty object: %+v", info)
	}
	if got := httpGet(t, st, "empty"); len(got) != 0 {
		t.Errorf("empty object read back as %d bytes", len(got))
	}
	odd := "odd/with space?#%+&.bin"
	httpPut(t, st, odd, []byte("odd"))
	if got := string(httpGet(t, st, odd)); got != "odd" {
		t.Errorf("%q read back as %q", odd, got)
	}

	for _, k := range []string{"b/2", "a/2", "a/10", "a/1", "c"} {
		httpPut(t, st, k, []byte(k))
	}
	keys := func(prefix string) []string {
		t.Helper()
		infos, err := st.List(ctx, prefix)
		if err != nil {
			t.Fatalf("List(%q): %v", prefix, err)
		}
		var out []string
		for _, i := range infos {
			out = append(out, i.Key)
		}
		return out
	}
	if got, want := keys(""), []string{"a/1", "a/10", "a/2", "b/2", "c", "cluster/full/data.xb", "empty", odd}; !slices.Equal(got, want) {
		t.Errorf("List(\"\") = %q, want %q", got, want)
	}
	if got, want := keys("a/"), []string{"a/1", "a/10", "a/2"}; !slices.Equal(got, want) {
		t.Errorf("List(\"a/\") = %q, want %q", got, want)
	}
	if got := keys("nothing/"); len(got) != 0 {
		t.Errorf("List(\"nothing/\") = %q", got)
	}

	// Many keys, most missing: more than one delete request.
	del := []string{"a/1", "c", odd, "missing"}
	for i := range 4000 {
		del = append(del, "missing/"+strings.Repeat("k", 80)+string(rune('a'+i%26)))
	}
	if err := st.Delete(ctx, del...); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if got, want := keys(""), []string{"a/10", "a/2", "b/2", "cluster/full/data.xb", "empty"}; !slices.Equal(got, want) {
		t.Errorf("after Delete, List = %q, want %q", got, want)
	}
	if _, err := st.Open(ctx, "a/1"); !errors.Is(err, objectstore.ErrNotFound) {
		t.Errorf("Open of a deleted object: %v, want ErrNotFound", err)
	}
	if _, err := st.Stat(ctx, "never/was"); !errors.Is(err, objectstore.ErrNotFound) {
		t.Errorf("Stat of a missing object: %v, want ErrNotFound", err)
	}
	if _, err := st.Create(ctx, "a//b"); err == nil {
		t.Error("Create of a non-canonical key succeeded")
	}
	s.assertNothingLeft(t, "a/10", "a/2", "b/2", "cluster/full/data.xb", "empty")
}

// TestHTTPServerRefusesBadRequests: a missing or wrong token is 401 (but /healthz needs
// none), bad keys are 400 rather than redirects, unknown paths are 404 but not "not found"
// objects, and JSON bodies are bounded.
func TestHTTPServerRefusesBadRequests(t *testing.T) {
	s := startHTTPServer(t, "")
	c := s.rawClient()
	do := func(method, path, token string, body io.Reader) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, s.srv.URL+path, body)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		method, path, token string
		body                io.Reader
		status              int
		contains            string
	}{
		{"GET", "/healthz", "", nil, 200, "ok"},
		{"GET", "/v1/list", "", nil, 401, "bearer token"},
		{"GET", "/v1/list", "wrong", nil, 401, "bearer token"},
		{"GET", "/v1/list", httpToken + "x", nil, 401, "bearer token"},
		{"GET", "/v1/list", httpToken, nil, 200, "[]"},
		{"GET", "/v1/stat/a//b", httpToken, nil, 400, "empty path element"},
		{"GET", "/v1/objects/a/../../etc/passwd", httpToken, nil, 400, `..\" path element`},
		{"GET", "/v1/stat/d/.upload-x", httpToken, nil, 400, "reserved"},
		{"GET", "/v1/list?prefix=/abs", httpToken, nil, 400, "absolute"},
		{"GET", "/v1/stat/missing", httpToken, nil, 404, `"code":"NotFound"`},
		{"GET", "/v2/stat/missing", httpToken, nil, 404, "NoSuchEndpoint"},
		{"DELETE", "/v1/objects/x", httpToken, nil, 405, "use GET, PUT"},
		{"POST", "/v1/delete", httpToken, strings.NewReader(`{"keys": ["../x"]}`), 400, `..\" path element`},
		{"POST", "/v1/delete", httpToken, strings.NewReader(`{"keys": ["` + strings.Repeat("k", 2<<20) + `"]}`), 400, "at most 1048576 bytes"},
		{"PUT", "/v1/objects/no-trailer", httpToken, strings.NewReader("data"), 400, "no trailer Dolphin-Object-Size"},
	} {
		status, body := do(tc.method, tc.path, tc.token, tc.body)
		if status != tc.status || !strings.Contains(body, tc.contains) {
			t.Errorf("%s %s (token %q): %d %s, want %d with %q", tc.method, tc.path, tc.token, status, body, tc.status, tc.contains)
		}
	}
	s.assertNothingLeft(t)

	// A handler without a token accepts nothing, not even an empty bearer token.
	open := httptest.NewServer(objectstore.NewHTTPHandler(nil, ""))
	defer open.Close()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, open.URL+"/v1/list", nil)
	req.Header.Set("Authorization", "Bearer ")
	if resp, err := open.Client().Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("empty token: %v, %v; want 401", resp, err)
	} else {
		resp.Body.Close()
	}
}

// TestHTTPClassifiedErrors: a wrong token, a certificate not signed by the trusted CA, a
// name the certificate does not hold and a closed port give errors of the right kind that
// name the store server and say what to change, never the token.
func TestHTTPClassifiedErrors(t *testing.T) {
	s := startHTTPServer(t, "")
	otherCA, _ := pki(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "https://" + ln.Addr().String()
	ln.Close()
	for _, tc := range []struct {
		name     string
		edit     func(*objectstore.HTTPConfig)
		kind     error
		contains string
	}{
		{"wrong token", func(c *objectstore.HTTPConfig) { c.Token = "wrong-token" }, objectstore.ErrCredentials, "use the token the store server was started with"},
		{"other CA", func(c *objectstore.HTTPConfig) { c.CACertPEM = otherCA }, objectstore.ErrTLS, "give the CA certificate that signs the store server's certificate"},
		{"system CAs", func(c *objectstore.HTTPConfig) { c.CACertPEM = nil }, objectstore.ErrTLS, "not signed by a trusted authority"},
		{"wrong name", func(c *objectstore.HTTPConfig) { c.ServerName = "other.example" }, objectstore.ErrTLS, "not valid for the name other.example"},
		{"closed port", func(c *objectstore.HTTPConfig) { c.URL = closed }, objectstore.ErrUnreachable, "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := s.client(t, tc.edit)
			check := func(op string, err error) {
				t.Helper()
				t.Logf("%s: %v", op, err)
				if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.contains) ||
					!strings.Contains(err.Error(), st.Describe()) || strings.Contains(err.Error(), "wrong-token") {
					t.Errorf("%s: %v; want %v, naming %s and saying %q", op, err, tc.kind, st.Describe(), tc.contains)
				}
			}
			_, err := st.Stat(t.Context(), "x")
			check("Stat", err)
			check("Check", objectstore.Check(t.Context(), st))
			up, err := st.Create(t.Context(), "up")
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			err = writeChunks(up, randomBytes(3<<20))
			if err == nil {
				_, err = up.Commit()
			} else {
				_ = up.Abort()
			}
			check("upload", err)
		})
	}
	s.assertNothingLeft(t)
}

// TestHTTPAbortLeavesNothing: Abort, or cancelling the Create context (without Abort), in the
// middle of a stream the server is writing leaves no object and no temporary file.
func TestHTTPAbortLeavesNothing(t *testing.T) {
	for _, how := range []string{"Abort", "cancel"} {
		t.Run(how, func(t *testing.T) {
			s := startHTTPServer(t, "")
			st := s.client(t, nil)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			up, err := st.Create(ctx, "backups/b1/data")
			if err != nil {
				t.Fatal(err)
			}
			if err := writeChunks(up, randomBytes(3<<20)); err != nil {
				t.Fatal(err)
			}
			testenv.EventuallyTrue(t, 30*time.Second, "writing on the server", func() bool {
				_, temps := walk(t, s.dir)
				return len(temps) == 1
			})
			if how == "Abort" {
				if err := up.Abort(); err != nil {
					t.Fatalf("Abort: %v", err)
				}
			} else {
				cancel()
				// Write fails once the watcher has cut the request.
				testenv.EventuallyTrue(t, 30*time.Second, "failing writes", func() bool {
					_, err := up.Write([]byte("more"))
					return err != nil
				})
				if _, err := up.Commit(); err == nil {
					t.Fatal("Commit after the context was cancelled succeeded")
				}
			}
			s.assertNothingLeft(t)
			if _, err := st.Stat(t.Context(), "backups/b1/data"); !errors.Is(err, objectstore.ErrNotFound) {
				t.Errorf("Stat: %v, want ErrNotFound", err)
			}
		})
	}
}

// TestHTTPTruncatedStreamRefused: a body whose trailer does not match the bytes sent is
// refused with 400 and stores nothing.
func TestHTTPTruncatedStreamRefused(t *testing.T) {
	s := startHTTPServer(t, "")
	for _, trailer := range []string{"1000001", "999999", "", "x"} {
		body := io.MultiReader(bytes.NewReader(randomBytes(1000000))) // of unknown length: chunked
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, s.srv.URL+"/v1/objects/cut", body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+httpToken)
		req.Trailer = http.Header{"Dolphin-Object-Size": {trailer}}
		resp, err := s.rawClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(b), "1000000 bytes received but the trailer Dolphin-Object-Size says") {
			t.Errorf("trailer %q: %s %s, want 400 naming the sizes", trailer, resp.Status, b)
		}
		s.assertNothingLeft(t)
	}
}

// TestHTTPConfig: New dispatches to NewHTTP, refuses two kinds at once, and NewHTTP refuses
// a plain http URL, a missing token and a CA that is not PEM.
func TestHTTPConfig(t *testing.T) {
	ctx := t.Context()
	good := objectstore.HTTPConfig{URL: "https://store.ns.svc:9444", Token: "t"}
	st, err := objectstore.New(ctx, objectstore.Config{HTTP: &good})
	if err != nil || st.Describe() != "dolphin-store https://store.ns.svc:9444/" {
		t.Errorf("New(HTTP): %v, %v", st, err)
	}
	if _, err := objectstore.New(ctx, objectstore.Config{HTTP: &good, Directory: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "set only one") {
		t.Errorf("New with a directory and a store server: %v", err)
	}
	if _, err := objectstore.New(ctx, objectstore.Config{}); err == nil || !strings.Contains(err.Error(), "store server") {
		t.Errorf("New with nothing: %v", err)
	}
	for _, tc := range []struct {
		cfg      objectstore.HTTPConfig
		contains string
	}{
		{objectstore.HTTPConfig{URL: "http://store:9444", Token: "t"}, "not https://"},
		{objectstore.HTTPConfig{URL: "https://store:9444"}, "no token"},
		{objectstore.HTTPConfig{URL: "https://store:9444", Token: "t\n"}, "trailing newline"},
		{objectstore.HTTPConfig{URL: "https://u:p@store:9444", Token: "t"}, "user, query or fragment"},
		{objectstore.HTTPConfig{URL: "https://store:9444", Token: "t", CACertPEM: []byte("junk")}, "no PEM certificate"},
	} {
		if _, err := objectstore.NewHTTP(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.contains) || strings.Contains(err.Error(), ":p@") {
			t.Errorf("NewHTTP(%q): %v, want an error saying %q", tc.cfg.URL, err, tc.contains)
		}
	}
}
