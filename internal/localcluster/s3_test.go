package localcluster

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/dolphin-operator/dolphin/internal/objectstore/s3test"
)

func TestDefaultVersitygwPath(t *testing.T) {
	t.Setenv("HOME", "/home/u")
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("DOLPHIN_CACHE_DIR", "")
	if got, want := DefaultVersitygwPath(), "/home/u/.cache/dolphin/versitygw/v1.8.0/versitygw"; got != want {
		t.Errorf("HOME only: %s, want %s", got, want)
	}
	t.Setenv("XDG_CACHE_HOME", "/xdg")
	if got, want := DefaultVersitygwPath(), "/xdg/dolphin/versitygw/v1.8.0/versitygw"; got != want {
		t.Errorf("XDG_CACHE_HOME: %s, want %s", got, want)
	}
	t.Setenv("DOLPHIN_CACHE_DIR", "/c")
	if got, want := DefaultVersitygwPath(), "/c/versitygw/v1.8.0/versitygw"; got != want {
		t.Errorf("DOLPHIN_CACHE_DIR: %s, want %s", got, want)
	}
	if VersitygwVersion != s3test.Version {
		t.Errorf("VersitygwVersion %s, but s3test (and hack/versitygw.sh) build %s", VersitygwVersion, s3test.Version)
	}
}

func TestFindVersitygw(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "gw")
	plain := filepath.Join(dir, "plain")
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{{exe, 0o755}, {plain, 0o644}} {
		if err := os.WriteFile(f.path, []byte("#!/bin/sh\n"), f.mode); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("DOLPHIN_CACHE_DIR", filepath.Join(dir, "cache"))
	t.Setenv(EnvVersitygw, "")

	// Nothing given and nothing built: the message says how to build it.
	_, err := FindVersitygw("")
	if err == nil || !strings.Contains(err.Error(), "hack/versitygw.sh") || !strings.Contains(err.Error(), "make versitygw") ||
		!strings.Contains(err.Error(), DefaultVersitygwPath()) {
		t.Errorf("missing binary: %v, want the path and how to build it", err)
	}
	// The cache path once built.
	built := DefaultVersitygwPath()
	if err := os.MkdirAll(filepath.Dir(built), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(built, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := FindVersitygw(""); err != nil || got != built {
		t.Errorf("built: %q, %v; want %s", got, err, built)
	}
	// The environment wins over the cache, the flag over both.
	t.Setenv(EnvVersitygw, exe)
	if got, err := FindVersitygw(""); err != nil || got != exe {
		t.Errorf("env: %q, %v; want %s", got, err, exe)
	}
	if got, err := FindVersitygw(built); err != nil || got != built {
		t.Errorf("explicit: %q, %v; want %s", got, err, built)
	}
	// A relative path is made absolute (it becomes Args[0] of a recorded process).
	t.Chdir(dir)
	if got, err := FindVersitygw("gw"); err != nil || got != exe {
		t.Errorf("relative: %q, %v; want %s", got, err, exe)
	}
	// What is not an executable file is refused, wherever it comes from.
	if _, err := FindVersitygw(plain); err == nil {
		t.Error("a non-executable file was accepted")
	}
	t.Setenv(EnvVersitygw, dir)
	if _, err := FindVersitygw(""); err == nil || !strings.Contains(err.Error(), EnvVersitygw) {
		t.Errorf("env naming a folder: %v, want an error naming %s", err, EnvVersitygw)
	}
}

func TestGatewayAddress(t *testing.T) {
	for cidr, want := range map[string]string{
		"10.244.0.0/24":   "10.244.0.1",
		"10.244.88.0/24":  "10.244.88.1",
		"10.244.88.77/24": "10.244.88.1", // host bits are ignored, as the local node does
		"192.168.0.0/16":  "192.168.0.1",
		"10.0.0.8/29":     "10.0.0.9",
	} {
		if got, err := GatewayAddress(cidr); err != nil || got != want {
			t.Errorf("%s: %q, %v; want %s", cidr, got, err, want)
		}
	}
	for _, bad := range []string{"", "10.244.0.0", "10.0.0.0/30", "fd00::/64"} {
		if got, err := GatewayAddress(bad); err == nil {
			t.Errorf("%q: %q, want an error", bad, got)
		}
	}
}

func TestS3EndpointFromArgs(t *testing.T) {
	args := []string{"/bin/versitygw", "--port", "10.244.0.1:7070", "--access", "a", "posix", "/d"}
	if got := s3EndpointFromArgs(args); got != "http://10.244.0.1:7070" {
		t.Errorf("got %q", got)
	}
	if got := s3EndpointFromArgs([]string{"/bin/versitygw", "--port"}); got != "" {
		t.Errorf("no value: got %q", got)
	}
}

func TestLoadOrCreateS3Credentials(t *testing.T) {
	dir := t.TempDir()
	c1, err := LoadOrCreateS3Credentials(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c1.AccessKeyID == "" || len(c1.SecretAccessKey) < 32 {
		t.Fatalf("generated %+v", c1)
	}
	fi, err := os.Stat(S3CredentialsFile(dir))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("credentials file mode %v, want 0600", fi.Mode().Perm())
	}
	c2, err := LoadOrCreateS3Credentials(dir)
	if err != nil || c2 != c1 {
		t.Errorf("second call: %+v, %v; want the same %+v", c2, err, c1)
	}
	if other, _ := LoadOrCreateS3Credentials(t.TempDir()); other == c1 {
		t.Error("two folders got the same credentials")
	}
	if err := os.WriteFile(S3CredentialsFile(dir), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateS3Credentials(dir); err == nil {
		t.Error("empty credentials were accepted")
	}
}

// TestEnsureS3 starts the S3 server as `dolphin local up --s3` does (on 127.0.0.1 instead of
// the pods' gateway): recorded in state.json, answering with the bucket, the secret key kept
// out of the command line and state.json; a second EnsureS3 keeps it; Stop stops it; the next
// EnsureS3 uses the same credentials and still holds the objects.
func TestEnsureS3(t *testing.T) {
	s3test.RequireVersitygw(t)
	bin, err := FindVersitygw("")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	cp := &ControlPlane{Dir: dir, stopTimeout: 5 * time.Second, state: &state{}}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Errorf("stopping: %v", err)
		}
	})
	ports, err := FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	opts := S3Options{Binary: bin, Host: "127.0.0.1", Port: ports[0]}

	began := time.Now()
	srv, err := cp.EnsureS3(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("S3 server up with its bucket in %s", time.Since(began).Round(time.Millisecond))
	if !srv.Started || srv.Endpoint != "http://127.0.0.1:"+strconv.Itoa(ports[0]) || srv.Bucket != S3Bucket || srv.Dir != filepath.Join(dir, "s3") {
		t.Errorf("server %+v", srv)
	}
	p := cp.Process(S3Process)
	if p == nil || !p.Alive() || p.Log != filepath.Join(dir, "logs", "s3.log") {
		t.Fatalf("recorded process %+v", p)
	}
	state, err := os.ReadFile(stateFile(dir))
	if err != nil {
		t.Fatal(err)
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	for what, b := range map[string][]byte{"state.json": state, "the command line": cmdline} {
		if bytes.Contains(b, []byte(srv.Credentials.SecretAccessKey)) {
			t.Errorf("the secret key is in %s", what)
		}
	}
	if !bytes.Contains(state, []byte(`"name": "s3"`)) {
		t.Errorf("state.json does not record the S3 server:\n%s", state)
	}
	if ep, running := cp.S3Endpoint(); ep != srv.Endpoint || !running {
		t.Errorf("S3Endpoint: %q, %v", ep, running)
	}

	// The credentials work, and only they do.
	client := S3Client(srv.Endpoint, srv.Credentials)
	key, body := "local/probe", "hello"
	if _, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: &srv.Bucket, Key: &key, Body: strings.NewReader(body)}); err != nil {
		t.Fatalf("put: %v", err)
	}
	wrong := srv.Credentials
	wrong.SecretAccessKey = "wrong"
	if _, err := S3Client(srv.Endpoint, wrong).HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &srv.Bucket}); err == nil {
		t.Error("a wrong secret key was accepted")
	}

	// Again: kept as it is, the bucket still there.
	again, err := cp.EnsureS3(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if again.Started || cp.Process(S3Process).PID != p.PID || again.Credentials != srv.Credentials {
		t.Errorf("second EnsureS3 restarted the server or changed the credentials: %+v", again)
	}

	// Stop (what `dolphin local down` does) and start again (the next `up`).
	pid := p.PID
	if err := cp.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
		t.Errorf("pid %d still exists after Stop", pid)
	}
	if !PortFree(ports[0]) {
		t.Errorf("port %d still in use after Stop", ports[0])
	}
	began = time.Now()
	third, err := cp.EnsureS3(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted in %s", time.Since(began).Round(time.Millisecond))
	if !third.Started || third.Credentials != srv.Credentials {
		t.Errorf("after Stop: %+v, want a new process with the same credentials", third)
	}
	out, err := S3Client(third.Endpoint, third.Credentials).GetObject(ctx, &s3.GetObjectInput{Bucket: &third.Bucket, Key: &key})
	if err != nil {
		t.Fatalf("the object did not survive a restart: %v", err)
	}
	got, err := io.ReadAll(out.Body)
	out.Body.Close()
	if err != nil || string(got) != body {
		t.Errorf("object after restart: %q, %v", got, err)
	}

	// RemoveAddOn (`up` without --s3) stops it and forgets it; the data stays.
	stopped, err := cp.RemoveAddOn(S3Process)
	if err != nil || !stopped {
		t.Errorf("RemoveAddOn: %v, %v", stopped, err)
	}
	if cp.Process(S3Process) != nil {
		t.Error("the S3 server is still recorded")
	}
	if _, err := os.Stat(filepath.Join(third.Dir, S3Bucket, "local", "probe")); err != nil {
		t.Errorf("the object is not in the data folder: %v", err)
	}
	if _, running := cp.S3Endpoint(); running {
		t.Error("S3Endpoint reports a removed server running")
	}
}

// TestEnsureS3Fails checks that a server that cannot listen fails EnsureS3 at once with its
// log, and is not left running.
func TestEnsureS3Fails(t *testing.T) {
	s3test.RequireVersitygw(t)
	bin, err := FindVersitygw("")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	cp := &ControlPlane{Dir: dir, stopTimeout: 5 * time.Second, state: &state{}}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	// The port is taken, as the gateway's would be by another program.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = cp.EnsureS3(ctx, S3Options{Binary: bin, Host: "127.0.0.1", Port: l.Addr().(*net.TCPAddr).Port})
	if err == nil {
		t.Fatal("EnsureS3 on a port in use succeeded")
	}
	t.Logf("error: %v", err)
	if !strings.Contains(err.Error(), "s3.log") {
		t.Errorf("error %v does not point at the log", err)
	}
	if p := cp.Process(S3Process); p != nil && p.Alive() {
		t.Errorf("a failed S3 server is left running: %+v", p)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waited for the deadline instead of seeing the exit: %v", err)
	}
}
