package podcmd

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/restore"
	"github.com/dolphin-operator/dolphin/internal/termination"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// seedPKI is the agent Secret's files of a cluster "db" in "ns", in a folder.
type seedPKI struct {
	dir, token string
	ca         []byte
}

func writeSeedPKI(t *testing.T) seedPKI {
	t.Helper()
	dir := t.TempDir()
	ca, cert, key, err := agent.NewAgentPKI("db", "ns", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	token, err := agent.GenerateToken()
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"ca.crt": ca, "tls.crt": cert, "tls.key": key, "token": []byte(token + "\n")} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return seedPKI{dir: dir, token: token, ca: ca}
}

// serverArgs are the flags the pod spec passes for the agent Secret (internal/resources).
func (p seedPKI) serverArgs(listen string) []string {
	return []string{"--listen", listen, "--token-file", filepath.Join(p.dir, "token"),
		"--tls-cert", filepath.Join(p.dir, "tls.crt"), "--tls-key", filepath.Join(p.dir, "tls.key")}
}

// client reaches the agent at addr with token.
func (p seedPKI) client(t *testing.T, addr, token string) *agent.Client {
	t.Helper()
	c, err := agent.NewClient(agent.ClientOptions{BaseURL: "https://" + addr, Token: token, CACertPEM: p.ca,
		ServerName: agent.AgentServerName("db", "ns"), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// lockedBuffer is a bytes.Buffer that the command writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// seedRun is `dolphin seed` running in-process.
type seedRun struct {
	out  *lockedBuffer
	done chan error
	code *int // seedExit's code, -1 when not called; read after done
}

// startSeed runs `dolphin seed args...` in-process with short intervals, and waits until it
// answers on addr (or exits).
func startSeed(t *testing.T, c *agent.Client, args ...string) *seedRun {
	t.Helper()
	waitEvery, linger := seedWaitLogEvery, seedLinger
	seedWaitLogEvery, seedLinger = 50*time.Millisecond, 500*time.Millisecond
	code := -1
	seedExit = func(c int) { code = c }
	t.Cleanup(func() { seedWaitLogEvery, seedLinger, seedExit = waitEvery, linger, os.Exit })

	root := newRootCmd()
	r := &seedRun{out: &lockedBuffer{}, done: make(chan error, 1), code: &code}
	root.SetOut(r.out)
	root.SetErr(r.out)
	root.SetArgs(append([]string{"seed"}, args...))
	ctx, cancel := context.WithCancel(context.Background())
	go func() { r.done <- root.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			t.Error("dolphin seed did not stop")
		}
	})
	if c == nil {
		return r
	}
	for deadline := time.Now().Add(10 * time.Second); c.Healthy(t.Context()) != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("dolphin seed does not answer: %v\n%s", c.Healthy(t.Context()), r.out)
		}
	}
	return r
}

// wait returns the command's error once it exited.
func (r *seedRun) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(60 * time.Second):
		t.Fatalf("dolphin seed did not exit:\n%s", r.out)
		return nil
	}
}

func TestSeedCmdExitsOnInitializedDataDir(t *testing.T) {
	data := t.TempDir()
	if err := os.WriteFile(filepath.Join(data, restore.InitializedMarker), nil, 0o640); err != nil {
		t.Fatal(err)
	}
	// No server flags: it never gets as far as serving.
	out, err := run(t, "seed", "--datadir", data)
	if err != nil || !strings.Contains(out, "dolphin-seed: "+filepath.Join(data, restore.InitializedMarker)+" exists") {
		t.Errorf("dolphin seed on an initialised directory: %v, %q", err, out)
	}
}

func TestSeedCmdRequiresServerFlags(t *testing.T) {
	r := startSeed(t, nil, "--datadir", t.TempDir())
	if err := r.wait(t); err == nil || !strings.Contains(err.Error(), "--token-file") || *r.code != 1 ||
		!strings.HasSuffix(r.out.String(), "dolphin-seed: --token-file is required\n") {
		t.Errorf("dolphin seed without flags: %v, exit %d, %q", err, *r.code, r.out)
	}
}

// installScript writes a stand-in for the install script: it records the operator user it
// was given and writes the marker into data (or fails, exiting code).
func installScript(t *testing.T, data string, code int) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "install.sh")
	script := "echo \"installing for $DOLPHIN_OPERATOR_USER\"\n"
	if code != 0 {
		script += "echo 'mariadb-install-db: disk full' >&2\nexit 3\n"
	} else {
		script += "touch " + filepath.Join(data, restore.InitializedMarker) + "\n"
	}
	if err := os.WriteFile(p, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSeedCmdEmpty(t *testing.T) {
	pki := writeSeedPKI(t)
	data, addr := t.TempDir(), testenv.FreeAddr(t)
	t.Setenv(envOperatorUser, "op-from-env")
	// Leftovers of a failed clone are removed before the install script runs.
	if err := os.WriteFile(filepath.Join(data, "ibdata1"), []byte("half a clone"), 0o640); err != nil {
		t.Fatal(err)
	}
	c := pki.client(t, addr, pki.token)
	// MySQL: only empty is possible.
	r := startSeed(t, c, append(pki.serverArgs(addr), "--datadir", data, "--flavor", "mysql",
		"--install-script", installScript(t, data, 0))...)
	ctx := t.Context()

	if st, err := c.SeedStatus(ctx); err != nil || st.Phase != agent.SeedWaiting {
		t.Fatalf("SeedStatus = %+v, %v; want Waiting", st, err)
	}
	var se *agent.StatusError
	if _, err := pki.client(t, addr, "wrong-token").SeedStatus(ctx); !errors.As(err, &se) || se.StatusCode != http.StatusUnauthorized {
		t.Errorf("with a wrong token: %v, want 401", err)
	}
	for _, req := range []agent.SeedRequest{
		{Mode: agent.SeedModeBackup},
		{Mode: agent.SeedModeClone, Clone: &agent.SeedClone{URL: "https://127.0.0.1:1"}, SourceDB: agent.DBConn{User: "u"}},
	} {
		if _, err := c.Seed(ctx, req); !errors.As(err, &se) || se.StatusCode != http.StatusUnprocessableEntity ||
			!strings.Contains(se.Message, "MySQL") || !strings.Contains(se.Message, "not supported") {
			t.Errorf("%s on MySQL: %v, want 422 not supported", req.Mode, err)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); strings.Count(r.out.String(), "waiting for the operator to say how to seed this instance") < 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("dolphin seed does not say it waits:\n%s", r.out)
		}
	}

	if _, err := c.Seed(ctx, agent.SeedRequest{Mode: agent.SeedModeEmpty}); err != nil {
		t.Fatal(err)
	}
	// It answers Succeeded for a moment, then exits 0.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st, err := c.SeedStatus(ctx)
		if err == nil && st.Phase == agent.SeedSucceeded && st.Mode == agent.SeedModeEmpty {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("SeedStatus = %+v, %v; want Succeeded\n%s", st, err, r.out)
		}
	}
	if err := r.wait(t); err != nil || *r.code != -1 {
		t.Errorf("dolphin seed after an empty seed: %v (exit %d)\n%s", err, *r.code, r.out)
	}
	if out := r.out.String(); !strings.Contains(out, "installing for op-from-env") || !strings.Contains(out, "dolphin-seed: done: "+data+" was seeded (mode empty)") {
		t.Errorf("output:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(data, restore.InitializedMarker)); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(filepath.Join(data, "ibdata1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the leftover ibdata1 is still there: %v", err)
	}
}

func TestSeedCmdFailureEndsWithOneLine(t *testing.T) {
	pki := writeSeedPKI(t)
	data, addr := t.TempDir(), testenv.FreeAddr(t)
	c := pki.client(t, addr, pki.token)
	r := startSeed(t, c, append(pki.serverArgs(addr), "--datadir", data, "--install-script", installScript(t, data, 3))...)
	// Backup: this instance has no --path.
	var se *agent.StatusError
	if _, err := c.Seed(t.Context(), agent.SeedRequest{Mode: agent.SeedModeBackup}); !errors.As(err, &se) ||
		se.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(se.Message, "--path is required") {
		t.Errorf("backup without --path: %v, want 422", err)
	}
	if _, err := c.Seed(t.Context(), agent.SeedRequest{Mode: agent.SeedModeEmpty}); err != nil {
		t.Fatal(err)
	}
	err := r.wait(t)
	out := r.out.String()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	last := lines[len(lines)-1]
	if err == nil || *r.code != 1 || !strings.HasPrefix(last, "dolphin-seed: the install script ") ||
		!strings.Contains(last, "exit status 3") || len(last) > len(termination.SeedPrefix)+termination.MaxLine {
		t.Errorf("a failing install script: %v, exit %d, last line %q\n%s", err, *r.code, last, out)
	}
	if !strings.Contains(out, "mariadb-install-db: disk full") {
		t.Errorf("the script's output is not shown:\n%s", out)
	}
}

// TestSeedCmdClone is the clone instruction's wiring without a peer: the token and CA files
// of the server flags are used, and an unreachable peer fails the instruction.
func TestSeedCmdCloneUnreachablePeer(t *testing.T) {
	pki := writeSeedPKI(t)
	data, addr := t.TempDir(), testenv.FreeAddr(t)
	c := pki.client(t, addr, pki.token)
	t.Setenv(envOperatorPassword, "op-pw")
	t.Setenv(envRootPassword, "root-pw")
	r := startSeed(t, c, append(pki.serverArgs(addr), "--datadir", data, "--defaults-file", "/nonexistent/my.cnf")...)
	peer := testenv.FreeAddr(t) // nothing listens there
	if _, err := c.Seed(t.Context(), agent.SeedRequest{Mode: agent.SeedModeClone,
		Clone: &agent.SeedClone{URL: "https://" + peer, ServerName: agent.AgentServerName("db", "ns")}, SourceDB: agent.DBConn{User: "u"}}); err != nil {
		t.Fatal(err)
	}
	err := r.wait(t)
	if err == nil || *r.code != 1 || !strings.Contains(err.Error(), "nothing was cloned") || !strings.Contains(err.Error(), peer) {
		t.Errorf("a clone from an unreachable peer: %v, exit %d\n%s", err, *r.code, r.out)
	}
	if ents, _ := os.ReadDir(data); len(ents) != 0 {
		t.Errorf("the data directory holds %v", ents)
	}
}
