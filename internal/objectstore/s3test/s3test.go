// Package s3test runs a real S3 server, versitygw, for tests: one process per test on a free
// port of 127.0.0.1, storing objects in the test's temporary directory, with one bucket.
//
// The binary is built by hack/versitygw.sh (make versitygw) and found through the environment
// variable DOLPHIN_VERSITYGW, else in the cache folder that script builds into. Tests are
// skipped under go test -short and fail when the binary is missing.
package s3test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/dolphin-operator/dolphin/internal/freeport"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// Version is the versitygw release hack/versitygw.sh builds.
const Version = "v1.8.0"

// EnvBinary names the environment variable with the path of the versitygw binary.
const EnvBinary = "DOLPHIN_VERSITYGW"

// Server is a running versitygw with one empty bucket.
type Server struct {
	// Endpoint is the URL of the S3 API, http://127.0.0.1:PORT (https:// for StartTLS).
	Endpoint string
	// Bucket exists and is empty when Start returns.
	Bucket string
	// AccessKey and SecretKey are the root user's credentials.
	AccessKey, SecretKey string
	// CACertPEM is the certificate that signs the server's (StartTLS), else nil.
	CACertPEM []byte
	// Dir is the posix backend's root: Dir/<bucket>/<key> are the objects.
	Dir string

	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process has exited
}

// Binary returns the path of the versitygw binary: $DOLPHIN_VERSITYGW, else where
// hack/versitygw.sh builds it.
func Binary() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s=%s is not an executable file", EnvBinary, p)
		}
		return p, nil
	}
	cache := os.Getenv("DOLPHIN_CACHE_DIR")
	if cache == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("%s is not set and there is no home directory: %w", EnvBinary, err)
			}
			base = filepath.Join(home, ".cache")
		}
		cache = filepath.Join(base, "dolphin")
	}
	p := filepath.Join(cache, "versitygw", Version, "versitygw")
	if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s is not set and %s does not exist", EnvBinary, p)
	}
	return p, nil
}

// RequireVersitygw skips the test under go test -short; otherwise it fails the test,
// pointing at make versitygw, when the binary is missing. Start calls it too.
func RequireVersitygw(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("s3test: the real S3 server (versitygw) is not started under -short")
	}
	if _, err := Binary(); err != nil {
		t.Fatalf("s3test: versitygw is not built (%v): run make versitygw (or hack/versitygw.sh) and "+
			"set %s=$(hack/versitygw.sh --print), or skip the real-server tests with go test -short", err, EnvBinary)
	}
}

// Start runs versitygw over plain HTTP, waits until it answers, creates the bucket and
// registers a t.Cleanup that stops it.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, false, "127.0.0.1")
}

// StartOn is Start listening on host (an address of this machine), for clients that do not
// share its loopback, such as the pods of `dolphin local` (host: the pods' gateway address).
func StartOn(t testing.TB, host string) *Server {
	t.Helper()
	return start(t, false, host)
}

// StartTLS is Start over HTTPS, with a certificate for 127.0.0.1 signed by CACertPEM.
func StartTLS(t testing.TB) *Server {
	t.Helper()
	return start(t, true, "127.0.0.1")
}

func start(t testing.TB, withTLS bool, host string) *Server {
	t.Helper()
	RequireVersitygw(t)
	bin, _ := Binary()
	dir := t.TempDir()
	if err := checkXattr(dir); err != nil {
		t.Fatalf("s3test: %v", err)
	}
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o750); err != nil {
		t.Fatal(err)
	}
	var tlsArgs []string
	var caPEM []byte
	if withTLS {
		var err error
		var certFile, keyFile string
		caPEM, certFile, keyFile, err = writeCert(dir)
		if err != nil {
			t.Fatalf("s3test: certificate: %v", err)
		}
		tlsArgs = []string{"--cert", certFile, "--key", keyFile}
	}
	var lastErr error
	for attempt := range 3 {
		port, err := freePort()
		if err != nil {
			t.Fatalf("s3test: %v", err)
		}
		scheme := "http"
		if withTLS {
			scheme = "https"
		}
		s := &Server{
			Endpoint:  fmt.Sprintf("%s://%s", scheme, net.JoinHostPort(host, strconv.Itoa(port))),
			Bucket:    "dolphin-test",
			AccessKey: "dolphin-test-access",
			SecretKey: randomSecret(),
			CACertPEM: caPEM,
			Dir:       root,
			log:       filepath.Join(dir, fmt.Sprintf("versitygw-%d.log", attempt)),
			done:      make(chan struct{}),
		}
		args := append([]string{"--port", net.JoinHostPort(host, strconv.Itoa(port)), "--quiet"}, tlsArgs...)
		args = append(args, "posix", root)
		if lastErr = s.run(bin, args); lastErr != nil {
			continue
		}
		t.Cleanup(func() { s.stop(t) })
		if lastErr = s.waitReady(); lastErr == nil {
			return s
		}
		s.stop(t)
		if !s.exited() {
			break // running but not answering: a new port would not help
		}
	}
	t.Fatalf("s3test: versitygw did not come up: %v", lastErr)
	return nil
}

func (s *Server) run(bin string, args []string) error {
	logf, err := os.Create(s.log)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+s.AccessKey, "ROOT_SECRET_KEY="+s.SecretKey)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", bin, err)
	}
	s.cmd = cmd
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(s.done)
	}()
	return nil
}

func (s *Server) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// waitReady creates the bucket, retrying until versitygw answers (10 s at most).
func (s *Server) waitReady() error {
	c := s.Client()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &s.Bucket})
		cancel()
		if err == nil {
			return nil
		}
		if s.exited() {
			return fmt.Errorf("versitygw exited (%v): %s", s.cmd.ProcessState, s.logTail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no bucket after 10 s: %w; log: %s", err, s.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(s.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// Suspend stops versitygw with SIGSTOP: connections stay open and nothing answers, as a hung
// or partitioned store looks to a client. Resume continues it.
func (s *Server) Suspend(t testing.TB) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("s3test: SIGSTOP: %v", err)
	}
	t.Cleanup(s.Resume)
}

// Resume continues a suspended versitygw (SIGCONT); resuming a running one does nothing.
func (s *Server) Resume() {
	if !s.exited() {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// stop ends versitygw: SIGTERM, then SIGKILL after 5 s. A failed test logs its output.
func (s *Server) stop(t testing.TB) {
	if s.exited() {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	if t.Failed() {
		if tail := s.logTail(); tail != "" {
			t.Logf("s3test: versitygw log (%s):\n%s", s.log, tail)
		}
	}
}

// Config returns a store configuration for the bucket under prefix, path-style, with the
// root credentials and small parts (5 MiB, the minimum) so that tests reach multipart
// uploads quickly.
func (s *Server) Config(prefix string) objectstore.S3Config {
	return objectstore.S3Config{
		Endpoint:        s.Endpoint,
		Bucket:          s.Bucket,
		Prefix:          prefix,
		PathStyle:       true,
		AccessKeyID:     s.AccessKey,
		SecretAccessKey: s.SecretKey,
		CACertPEM:       s.CACertPEM,
		PartSize:        objectstore.MinS3PartSize,
	}
}

// Client returns a plain S3 client for the server, for looking behind a store's back (for
// example ListMultipartUploads).
func (s *Server) Client() *s3.Client {
	hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	if s.CACertPEM != nil {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(s.CACertPEM)
		hc.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: pool}
	}
	return s3.New(s3.Options{
		Region:                     "us-east-1",
		BaseEndpoint:               aws.String(s.Endpoint),
		UsePathStyle:               true,
		Credentials:                credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
		HTTPClient:                 hc,
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

// freePort is a port for versitygw, free on every address (host included) and outside the
// ephemeral range that the other tests' client connections take their local ports from
// (package freeport).
func freePort() (int, error) {
	ports, err := freeport.Pick(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

func randomSecret() string {
	b := make([]byte, 20)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// writeCert writes a self-signed certificate for 127.0.0.1 and its key into dir; the
// certificate is its own CA.
func writeCert(dir string) (caPEM []byte, certFile, keyFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "dolphin s3test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, "", "", err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, "", "", err
	}
	var certBuf, keyBuf bytes.Buffer
	if err := errors.Join(
		pem.Encode(&certBuf, &pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.Encode(&keyBuf, &pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	); err != nil {
		return nil, "", "", err
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := errors.Join(os.WriteFile(certFile, certBuf.Bytes(), 0o600), os.WriteFile(keyFile, keyBuf.Bytes(), 0o600)); err != nil {
		return nil, "", "", err
	}
	return certBuf.Bytes(), certFile, keyFile, nil
}
