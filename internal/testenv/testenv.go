// Package testenv starts a real kube-apiserver and etcd for tests (controller-runtime's
// envtest) from the binaries that hack/control-plane.sh builds from Go modules, with
// Dolphin's CRDs installed.
package testenv

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/dolphin-operator/dolphin/internal/freeport"
)

// Env is a running control plane.
type Env struct {
	Config *rest.Config
	// Environment is the underlying envtest environment (e.g. to add users).
	Environment *envtest.Environment
}

// repoRoot finds the repository root from this file's location.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Start starts etcd and kube-apiserver with the CRDs under config/crd/bases. It needs
// KUBEBUILDER_ASSETS to name the folder with the binaries; `make test` sets it.
func Start() (*Env, error) {
	return StartWithCRDs(CRDDir())
}

// CRDDir is config/crd/bases, the CRDs of this build.
func CRDDir() string { return filepath.Join(repoRoot(), "config", "crd", "bases") }

// BaselineCRDDir is config/crd/baseline, the CRDs of the last release (docs/design/0031).
func BaselineCRDDir() string { return filepath.Join(repoRoot(), "config", "crd", "baseline") }

// StartWithCRDs is Start with the CRDs of crdDirs instead (BaselineCRDDir: an API server as
// the last release left it; another operator's CRDs for a side-by-side bench).
func StartWithCRDs(crdDirs ...string) (*Env, error) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return nil, fmt.Errorf("KUBEBUILDER_ASSETS is not set: run `make test` (it builds the control plane " +
			"with hack/control-plane.sh), or export KUBEBUILDER_ASSETS=$(hack/control-plane.sh), or use -short to skip")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			return nil, fmt.Errorf("control-plane binary missing (run hack/control-plane.sh): %w", err)
		}
	}
	// envtest chooses ports by listening on :0, in the ephemeral range where the client
	// connections of the tests running beside this one take their local ports: one can be
	// taken before etcd or kube-apiserver binds it. The ports come from outside that range
	// (package freeport) instead; a start that still fails because a port was taken ("address
	// already in use" in their output) is stopped and tried again on new ones.
	var errs []error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		ports, err := freeport.Pick(3)
		if err != nil {
			return nil, err
		}
		env := &envtest.Environment{
			BinaryAssetsDirectory: assets,
			CRDDirectoryPaths:     crdDirs,
			ErrorIfCRDPathMissing: true,
		}
		var watch inUseWatcher
		etcd := &envtest.Etcd{URL: &url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}, Out: &watch, Err: &watch}
		etcd.Configure().Set("listen-peer-urls", "http://"+net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])))
		env.ControlPlane.Etcd = etcd
		api := env.ControlPlane.GetAPIServer()
		api.SecurePort, api.Out, api.Err = ports[2], &watch, &watch
		// envtest's default Service range is a /24: 254 ClusterIPs, which a footprint bench
		// of 300 clusters (two Services each, for Dolphin as for MOCO) runs out of.
		api.Configure().Set("service-cluster-ip-range", "10.0.0.0/16")
		cfg, err := env.Start()
		if err == nil {
			return &Env{Config: cfg, Environment: env}, nil
		}
		errs = append(errs, fmt.Errorf("attempt %d (etcd on %d/%d, kube-apiserver on %d): %w", attempt, ports[0], ports[1], ports[2], err))
		if serr := env.Stop(); serr != nil {
			return nil, fmt.Errorf("starting envtest: %w", errors.Join(append(errs, fmt.Errorf("stopping attempt %d: %w", attempt, serr))...))
		}
		if !watch.seen() && !freeport.InUse(err) {
			break // not a port taken: trying again would fail the same way
		}
	}
	return nil, fmt.Errorf("starting envtest: %w", errors.Join(errs...))
}

// inUseWatcher is the output of etcd and kube-apiserver: discarded, but whether it said
// "address already in use" is kept.
type inUseWatcher struct {
	mu    sync.Mutex
	tail  []byte // the end of the last write, for a phrase split between writes
	found bool
}

const inUsePhrase = "address already in use"

func (w *inUseWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.found {
		buf := append(w.tail, p...)
		w.found = bytes.Contains(buf, []byte(inUsePhrase))
		w.tail = append(w.tail[:0], buf[max(0, len(buf)-len(inUsePhrase)):]...)
	}
	return len(p), nil
}

func (w *inUseWatcher) seen() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.found
}

// startAttempts is how many times StartWithCRDs starts etcd and kube-apiserver.
const startAttempts = 3

// Stop stops the control plane.
func (e *Env) Stop() error {
	if err := e.Environment.Stop(); err != nil {
		return fmt.Errorf("stopping envtest: %w", err)
	}
	return nil
}

// StartForTest starts a control plane for one test and stops it when the test ends. It
// skips the test under -short and fails it when the control plane cannot start.
func StartForTest(t testing.TB) *Env {
	t.Helper()
	return StartForTestWithCRDs(t, CRDDir())
}

// StartForTestWithCRDs is StartForTest with the CRDs of crdDirs.
func StartForTestWithCRDs(t testing.TB, crdDirs ...string) *Env {
	t.Helper()
	if testing.Short() {
		t.Skip("needs kube-apiserver and etcd (envtest); skipped under -short")
	}
	env, err := StartWithCRDs(crdDirs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	return env
}

// Eventually polls cond (after 5 ms, then doubling up to every 100 ms) until it returns nil,
// and fails the test with the last error when timeout passes first.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	if err := Poll(timeout, cond); err != nil {
		t.Fatalf("%s: not reached within %s: %v", what, timeout, err)
	}
}

// Poll checks cond as Eventually does until it returns nil, and returns nil then, or cond's
// last error once timeout has passed: for a caller that must not stop the test.
func Poll(timeout time.Duration, cond func() error) error {
	var err error
	poll := 5 * time.Millisecond
	deadline := time.Now().Add(timeout)
	for ; time.Now().Before(deadline); time.Sleep(min(poll, max(time.Until(deadline), time.Millisecond))) {
		if err = cond(); err == nil {
			return nil
		}
		poll = min(2*poll, maxPoll)
	}
	if err == nil {
		return errors.New("not checked: no time given")
	}
	// Once more at the deadline: the condition may have come true during the last sleep.
	return cond()
}

// maxPoll is the longest wait between two checks of Eventually's condition.
const maxPoll = 100 * time.Millisecond

// EventuallyTrue is Eventually for a condition that says only whether it holds.
func EventuallyTrue(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	Eventually(t, timeout, what, func() error {
		if !cond() {
			return errors.New("the condition does not hold")
		}
		return nil
	})
}

// FlipByte changes one byte in the middle of a file, keeping its mode: a damaged copy.
func FlipByte(t testing.TB, path string) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) == 0 {
		t.Fatalf("FlipByte: %s is empty", path)
	}
	b[len(b)/2] ^= 0x5a
	if err := os.WriteFile(path, b, st.Mode().Perm()); err != nil {
		t.Fatal(err)
	}
}

// Stored returns the bytes etcd holds at key (for example
// /registry/mysql.dolphin.dev/mysqlclusters/default/shop: custom resources are stored as
// JSON), through etcd's JSON gateway, so that a test sees what the API server wrote rather
// than what it serves. It fails when the key does not exist.
func (e *Env) Stored(ctx context.Context, key string) ([]byte, error) {
	etcd := e.Environment.ControlPlane.Etcd
	if etcd == nil || etcd.URL == nil {
		return nil, errors.New("etcd is not running")
	}
	body, err := json.Marshal(map[string]string{"key": base64.StdEncoding.EncodeToString([]byte(key))})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, etcd.URL.String()+"/v3/kv/range", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading %s from etcd: %w", key, err)
	}
	defer resp.Body.Close()
	var out struct {
		Kvs []struct {
			Value []byte `json:"value"` // base64 in JSON: decoded by encoding/json
		} `json:"kvs"`
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("reading %s from etcd: %s: %s", key, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("reading %s from etcd: %w", key, err)
	}
	if len(out.Kvs) != 1 {
		return nil, fmt.Errorf("etcd has no key %s", key)
	}
	return out.Kvs[0].Value, nil
}

// StoredAPIVersion is the version (after the group) of the object etcd holds at key: its
// top-level apiVersion, not the versions its managedFields were written in, which stay.
func (e *Env) StoredAPIVersion(ctx context.Context, key string) (string, error) {
	b, err := e.Stored(ctx, key)
	if err != nil {
		return "", err
	}
	var obj struct {
		APIVersion string `json:"apiVersion"`
	}
	if err := json.Unmarshal(b, &obj); err != nil {
		return "", fmt.Errorf("etcd %s: %w", key, err)
	}
	_, version, _ := strings.Cut(obj.APIVersion, "/")
	return version, nil
}
