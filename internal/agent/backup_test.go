package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"

	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// blockingBackup is a Backup function that reports progress, then waits for release (or its
// context) and returns what it is given.
type blockingBackup struct {
	started chan BackupRequest
	release chan error

	mu   sync.Mutex
	ctxs []context.Context
}

func newBlockingBackup() *blockingBackup {
	return &blockingBackup{started: make(chan BackupRequest, 10), release: make(chan error)}
}

func (b *blockingBackup) run(ctx context.Context, req BackupRequest, progress func(int64)) (*backup.Manifest, error) {
	b.mu.Lock()
	b.ctxs = append(b.ctxs, ctx)
	b.mu.Unlock()
	progress(42)
	b.started <- req
	select {
	case err := <-b.release:
		if err != nil {
			return nil, err
		}
		return &backup.Manifest{Format: backup.ManifestFormat, Name: req.Meta.Name,
			Objects: []backup.Object{{Key: "data.xb.zst", Size: 1000}}}, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

func (b *blockingBackup) lastCtx() context.Context {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ctxs[len(b.ctxs)-1]
}

func testRequest(id string) BackupRequest {
	return BackupRequest{ID: id, Store: StoreConfig(`{"directory":"/backups"}`), Prefix: "db/" + id,
		DB:   DBConn{User: "dolphin-backup", Password: "pw-never-logged", Socket: "/run/mysqld/mysqld.sock"},
		Meta: BackupMeta{Name: id, Namespace: testNamespace, Cluster: testCluster, SourceInstance: "db-1", SourceRole: "replica", Flavor: "mariadb"}}
}

// waitPhase polls the backup until it is in phase.
func waitPhase(t *testing.T, c *Client, id string, phase BackupPhase) BackupStatus {
	t.Helper()
	var st BackupStatus
	testenv.EventuallyTrue(t, 5*time.Second, "backup "+id+" to be "+string(phase), func() bool {
		var err error
		st, err = c.BackupStatus(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return st.Phase == phase
	})
	return st
}

func TestAgentBackupLifecycle(t *testing.T) {
	b := newBlockingBackup()
	a := startAgent(t, b.run, nil)
	c := a.client(testToken)
	ctx := context.Background()

	st, err := c.StartBackup(ctx, testRequest("b1"))
	if err != nil {
		t.Fatal(err)
	}
	if st.ID != "b1" || st.Phase != BackupRunning || st.StartedAt.IsZero() || !st.FinishedAt.IsZero() {
		t.Errorf("StartBackup = %+v, want b1 Running", st)
	}
	if got := <-b.started; got.DB.Password != "pw-never-logged" || string(got.Store) != `{"directory":"/backups"}` || got.Meta.SourceRole != "replica" {
		t.Errorf("the Backup function got %+v, want the request as sent", got)
	}
	if st, err = c.BackupStatus(ctx, "b1"); err != nil || st.Phase != BackupRunning || st.StoredBytes != 42 {
		t.Errorf("BackupStatus while running = %+v, %v, want Running with 42 bytes stored", st, err)
	}

	// The same ID again: its status, no new job (an operator that restarted resumes polling).
	if st, err = c.StartBackup(ctx, testRequest("b1")); err != nil || st.ID != "b1" || st.Phase != BackupRunning {
		t.Errorf("StartBackup b1 again = %+v, %v, want b1's status", st, err)
	}
	// Another ID while b1 runs: 409 naming b1.
	_, err = c.StartBackup(ctx, testRequest("b2"))
	var se *StatusError
	if !errors.Is(err, ErrBackupRunning) || !errors.As(err, &se) || se.StatusCode != http.StatusConflict || se.RunningID != "b1" {
		t.Errorf("StartBackup b2 while b1 runs = %v, want a 409 naming b1", err)
	}

	b.release <- nil
	st = waitPhase(t, c, "b1", BackupSucceeded)
	if st.Manifest == nil || st.Manifest.Name != "b1" || st.StoredBytes != 1000 || st.FinishedAt.Before(st.StartedAt) || st.Error != "" {
		t.Errorf("finished b1 = %+v, want Succeeded with its manifest and 1000 bytes", st)
	}
	if st, err = c.StartBackup(ctx, testRequest("b1")); err != nil || st.Phase != BackupSucceeded {
		t.Errorf("StartBackup of the finished b1 = %+v, %v, want its Succeeded status", st, err)
	}

	// A failing job.
	if _, err := c.StartBackup(ctx, testRequest("b2")); err != nil {
		t.Fatal(err)
	}
	<-b.started
	b.release <- errors.New("mariadb-backup exited with status 1")
	if st = waitPhase(t, c, "b2", BackupFailed); st.Error != "mariadb-backup exited with status 1" {
		t.Errorf("failed b2 error = %q", st.Error)
	}

	// Cancel.
	if _, err := c.StartBackup(ctx, testRequest("b3")); err != nil {
		t.Fatal(err)
	}
	<-b.started
	if err := c.CancelBackup(ctx, "b3"); err != nil {
		t.Fatal(err)
	}
	if st, err = c.BackupStatus(ctx, "b3"); err != nil || st.Phase != BackupFailed || st.Error != "cancelled" {
		t.Errorf("b3 after CancelBackup = %+v, %v, want Failed with \"cancelled\"", st, err)
	}
	if err := c.CancelBackup(ctx, "b3"); err != nil {
		t.Errorf("cancelling a finished job = %v, want nil", err)
	}
	if err := c.CancelBackup(ctx, "never"); !errors.Is(err, ErrUnknownBackup) {
		t.Errorf("cancelling an unknown job = %v, want ErrUnknownBackup", err)
	}

	// After a restart the agent knows nothing: the operator can tell.
	a.restart()
	_, err = c.BackupStatus(ctx, "b1")
	if !errors.Is(err, ErrUnknownBackup) || !errors.As(err, &se) || se.StatusCode != http.StatusNotFound || !strings.Contains(err.Error(), a.addr) {
		t.Errorf("BackupStatus b1 after a restart = %v, want a 404 wrapping ErrUnknownBackup naming the agent", err)
	}
}

func TestAgentBackupSurvivesRequestContext(t *testing.T) {
	b := newBlockingBackup()
	a := startAgent(t, b.run, nil)
	c := a.client(testToken)
	reqCtx, cancel := context.WithCancel(context.Background())
	if _, err := c.StartBackup(reqCtx, testRequest("b1")); err != nil {
		t.Fatal(err)
	}
	<-b.started
	cancel()
	c.CloseIdleConnections() // the request's connection goes away too
	time.Sleep(50 * time.Millisecond)
	if err := b.lastCtx().Err(); err != nil {
		t.Fatalf("the job's context ended with its request's: %v", err)
	}
	b.release <- nil
	waitPhase(t, c, "b1", BackupSucceeded)
}

func TestAgentShutdownCancelsBackup(t *testing.T) {
	b := newBlockingBackup()
	a := startAgent(t, b.run, nil)
	if _, err := a.client(testToken).StartBackup(context.Background(), testRequest("b1")); err != nil {
		t.Fatal(err)
	}
	<-b.started
	a.shutdown() // checks that Serve returns nil
	if cause := context.Cause(b.lastCtx()); !errors.Is(cause, errShutdown) {
		t.Errorf("after the shutdown the job's context cause is %v, want %v", cause, errShutdown)
	}
}

func TestAgentForgetsOldBackups(t *testing.T) {
	quick := func(_ context.Context, req BackupRequest, _ func(int64)) (*backup.Manifest, error) {
		return &backup.Manifest{Name: req.ID}, nil
	}
	a := startAgent(t, quick, nil)
	c := a.client(testToken)
	ids := make([]string, MaxFinishedBackups+1)
	for i := range ids {
		ids[i] = "b" + string(rune('a'+i))
		if _, err := c.StartBackup(context.Background(), testRequest(ids[i])); err != nil {
			t.Fatal(err)
		}
		waitPhase(t, c, ids[i], BackupSucceeded)
	}
	if _, err := c.BackupStatus(context.Background(), ids[0]); !errors.Is(err, ErrUnknownBackup) {
		t.Errorf("the oldest of %d finished jobs: %v, want it forgotten", len(ids), err)
	}
	if _, err := c.BackupStatus(context.Background(), ids[1]); err != nil {
		t.Errorf("the second oldest: %v, want it remembered", err)
	}
}

func TestAgentBackupRequestValidation(t *testing.T) {
	a := startAgent(t, newBlockingBackup().run, nil)
	c := a.client(testToken)
	noStore := testRequest("b1")
	noStore.Store = nil
	for name, req := range map[string]BackupRequest{
		"bad ID":   testRequest("../etc"),
		"no ID":    testRequest(""),
		"no store": noStore,
	} {
		_, err := c.StartBackup(context.Background(), req)
		var se *StatusError
		if !errors.As(err, &se) || se.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: StartBackup = %v, want a 400", name, err)
		}
	}
}

func TestAgentNeverLogsSecrets(t *testing.T) {
	var mu sync.Mutex
	var logs bytes.Buffer
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logs.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{Verbosity: 10})
	b := newBlockingBackup()
	a := startAgent(t, b.run, nil)
	a.restartWith(func(o *ServerOptions) { o.Logger = logger })
	c := a.client(testToken)
	req := testRequest("b1")
	req.Store = StoreConfig(`{"s3":{"secretAccessKey":"store-secret-never-logged"}}`)
	if _, err := c.StartBackup(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	<-b.started
	b.release <- nil
	waitPhase(t, c, "b1", BackupSucceeded)
	a.shutdown()

	mu.Lock()
	defer mu.Unlock()
	out := logs.String()
	if !strings.Contains(out, "dolphin-backup@/run/mysqld/mysqld.sock") {
		t.Errorf("the log does not describe the request:\n%s", out)
	}
	for _, secret := range []string{"pw-never-logged", "store-secret-never-logged", testToken} {
		if strings.Contains(out, secret) {
			t.Errorf("the log contains %q:\n%s", secret, out)
		}
	}
	for _, s := range []string{req.String(), req.DB.String()} {
		if strings.Contains(s, "pw-never-logged") {
			t.Errorf("String() = %q contains the password", s)
		}
	}
	j, _ := json.Marshal(req.MarshalLog())
	if bytes.Contains(j, []byte("never-logged")) {
		t.Errorf("MarshalLog = %s contains a secret", j)
	}
}
