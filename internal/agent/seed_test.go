package agent

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// startSeedAgent runs an agent with only the seed endpoints, as `dolphin seed` does.
func startSeedAgent(t *testing.T, change func(*ServerOptions)) *testAgent {
	t.Helper()
	a := startAgent(t, nil, nil)
	a.restartWith(func(o *ServerOptions) {
		o.Backup, o.Clone = nil, nil
		change(o)
	})
	return a
}

var cloneReq = SeedRequest{Mode: SeedModeClone, Clone: &SeedClone{URL: "https://10.0.0.7:9443", ServerName: "db-agent.ns.dolphin.internal"},
	SourceDB: DBConn{User: "dolphin", Password: "secret-pw"}}

func TestAgentSeedOneInstructionAtATime(t *testing.T) {
	release := make(chan error)
	var runs atomic.Int32
	var got SeedRequest
	done := make(chan SeedStatus, 4)
	a := startSeedAgent(t, func(o *ServerOptions) {
		o.Seed = func(_ context.Context, req SeedRequest, progress func(int64)) error {
			runs.Add(1)
			got = req
			progress(12345)
			return <-release
		}
		o.SeedDone = func(st SeedStatus, _ error) { done <- st }
	})
	c := a.client(testToken)
	ctx := t.Context()
	if st, err := c.SeedStatus(ctx); err != nil || st.Phase != SeedWaiting || st.Mode != "" {
		t.Fatalf("SeedStatus before an instruction = %+v, %v; want Waiting", st, err)
	}
	st, err := c.Seed(ctx, cloneReq)
	if err != nil || st.Phase != SeedRunning || st.Mode != SeedModeClone || st.StartedAt.IsZero() {
		t.Fatalf("Seed = %+v, %v; want Running", st, err)
	}
	testenv.EventuallyTrue(t, 5*time.Second, "the progress", func() bool { st, _ := c.SeedStatus(ctx); return st.Bytes == 12345 })
	if _, err := c.Seed(ctx, SeedRequest{Mode: SeedModeEmpty}); !errors.Is(err, ErrSeedRunning) {
		t.Errorf("a second instruction while one runs = %v, want ErrSeedRunning", err)
	}
	if got.Clone.URL != cloneReq.Clone.URL || got.SourceDB.Password != "secret-pw" {
		t.Errorf("the seed function got %+v", got)
	}

	// It fails: the status says why, and the same instruction runs again.
	release <- errors.New("the peer went away")
	if st := <-done; st.Phase != SeedFailed || st.Error != "the peer went away" || st.Bytes != 12345 || st.FinishedAt.IsZero() {
		t.Errorf("SeedDone after a failure got %+v", st)
	}
	if st, _ := c.SeedStatus(ctx); st.Phase != SeedFailed || st.Error != "the peer went away" {
		t.Errorf("SeedStatus after a failure = %+v", st)
	}
	if st, err := c.Seed(ctx, cloneReq); err != nil || st.Phase != SeedRunning || st.Error != "" {
		t.Fatalf("Seed after a failure = %+v, %v; want Running again", st, err)
	}
	release <- nil
	if st := <-done; st.Phase != SeedSucceeded {
		t.Errorf("SeedDone got %+v, want Succeeded", st)
	}
	// Seeded: an instruction changes nothing.
	if st, err := c.Seed(ctx, SeedRequest{Mode: SeedModeEmpty}); err != nil || st.Phase != SeedSucceeded || st.Mode != SeedModeClone {
		t.Errorf("Seed after success = %+v, %v; want the Succeeded clone", st, err)
	}
	if n := runs.Load(); n != 2 {
		t.Errorf("the seed function ran %d times, want 2", n)
	}
	// Only the seed endpoints are served.
	if _, err := c.StartBackup(ctx, BackupRequest{ID: "b", Store: StoreConfig(`{}`)}); err == nil {
		t.Error("POST /v1/backups on a seed-only agent succeeded")
	}
}

func TestAgentSeedRefusesBadRequests(t *testing.T) {
	a := startSeedAgent(t, func(o *ServerOptions) {
		o.Seed = func(context.Context, SeedRequest, func(int64)) error { return errors.New("must not run") }
		o.SeedCheck = func(req SeedRequest) error {
			if req.Mode == SeedModeBackup {
				return errors.New("restoring a backup is not supported for mysql")
			}
			return nil
		}
	})
	c := a.client(testToken)
	for _, c2 := range []struct {
		req  SeedRequest
		code int
		want string
	}{
		{SeedRequest{}, http.StatusBadRequest, "the mode is required"},
		{SeedRequest{Mode: "magic"}, http.StatusBadRequest, "unknown mode"},
		{SeedRequest{Mode: SeedModeClone}, http.StatusBadRequest, "clone.url"},
		{SeedRequest{Mode: SeedModeClone, Clone: &SeedClone{URL: "http://x:1"}, SourceDB: DBConn{User: "u"}}, http.StatusBadRequest, "not https"},
		{SeedRequest{Mode: SeedModeClone, Clone: &SeedClone{URL: "https://x:1"}}, http.StatusBadRequest, "sourceDB.user"},
		{SeedRequest{Mode: SeedModeBackup}, http.StatusUnprocessableEntity, "not supported for mysql"},
	} {
		_, err := c.Seed(t.Context(), c2.req)
		var se *StatusError
		if !errors.As(err, &se) || se.StatusCode != c2.code || !strings.Contains(se.Message, c2.want) {
			t.Errorf("Seed(%v) = %v, want %d saying %q", c2.req, err, c2.code, c2.want)
		}
	}
	if st, _ := c.SeedStatus(t.Context()); st.Phase != SeedWaiting {
		t.Errorf("after refused instructions the status is %+v, want Waiting", st)
	}
	// The token is checked on the seed endpoints too.
	for _, call := range []func() error{
		func() error { _, err := a.client("wrong-token").SeedStatus(t.Context()); return err },
		func() error {
			_, err := a.client("wrong-token").Seed(t.Context(), SeedRequest{Mode: SeedModeEmpty})
			return err
		},
	} {
		var se *StatusError
		if err := call(); !errors.As(err, &se) || se.StatusCode != http.StatusUnauthorized {
			t.Errorf("with a wrong token: %v, want 401", err)
		}
	}
}

func TestAgentSeedShutdownCancels(t *testing.T) {
	started := make(chan struct{})
	a := startSeedAgent(t, func(o *ServerOptions) {
		o.Seed = func(ctx context.Context, _ SeedRequest, _ func(int64)) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		}
	})
	if _, err := a.client(testToken).Seed(t.Context(), SeedRequest{Mode: SeedModeEmpty}); err != nil {
		t.Fatal(err)
	}
	<-started
	began := time.Now()
	a.shutdown()
	if d := time.Since(began); d > 3*time.Second {
		t.Errorf("the shutdown took %v", d)
	}
	if _, err := NewServer(ServerOptions{TokenFile: a.tokenFile, CertFile: a.pki.certFile, KeyFile: a.pki.keyFile}); err == nil {
		t.Error("NewServer without Backup, Clone or Seed succeeded")
	}
	if (SeedRequest{Mode: SeedModeClone, Clone: &SeedClone{URL: "https://p"}, SourceDB: DBConn{User: "u", Password: "pw"}}).String() != `seed clone from https://p (server name "") as u` {
		t.Error("SeedRequest.String shows the wrong thing")
	}
}
