package agent

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestAgentMetricsNeedTheScrapersToken: /metrics answers 503 until the metrics token file
// exists, then only to that token — the agent's own token, which opens the API, is refused,
// and the metrics token opens nothing but /metrics. A rotated file is read again.
func TestAgentMetricsNeedTheScrapersToken(t *testing.T) {
	a := startAgent(t, nil, nil)
	metricsTokenFile := filepath.Join(a.dir, "metrics-token")
	a.restartWith(func(o *ServerOptions) {
		o.MetricsTokenFile = metricsTokenFile
		o.Metrics = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "mysql_up 1\n")
		})
	})
	raw := a.rawClient()
	get := func(path, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "https://"+a.addr+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := raw.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	if code, body := get("/metrics", "anything"); code != http.StatusServiceUnavailable {
		t.Errorf("without a metrics token file: %d %s, want 503", code, body)
	}
	writeFileAtomic(t, metricsTokenFile, []byte("scraper-token\n"))
	for name, tc := range map[string]struct {
		path, token string
		want        int
	}{
		"metrics, scraper's token":    {"/metrics", "scraper-token", http.StatusOK},
		"metrics, no token":           {"/metrics", "", http.StatusUnauthorized},
		"metrics, the agent's token":  {"/metrics", testToken, http.StatusUnauthorized},
		"API, the scraper's token":    {"/v1/backups/x", "scraper-token", http.StatusUnauthorized},
		"API, the agent's own token":  {"/v1/backups/x", testToken, http.StatusNotFound},
		"healthz needs no token":      {"/healthz", "", http.StatusOK},
		"other paths stay behind API": {"/metrics/x", "scraper-token", http.StatusUnauthorized},
	} {
		if code, body := get(tc.path, tc.token); code != tc.want {
			t.Errorf("%s: %d %s, want %d", name, code, body, tc.want)
		}
	}
	if _, body := get("/metrics", "scraper-token"); body != "mysql_up 1\n" {
		t.Errorf("metrics body %q", body)
	}

	writeFileAtomic(t, metricsTokenFile, []byte("rotated"))
	testenv.EventuallyTrue(t, 5*time.Second, "the rotated metrics token", func() bool {
		code, _ := get("/metrics", "rotated")
		return code == http.StatusOK
	})
	if code, _ := get("/metrics", "scraper-token"); code != http.StatusUnauthorized {
		t.Errorf("the old metrics token still works after the rotation: %d", code)
	}
}

func TestAgentMetricsWithoutATokenFileIsRefused(t *testing.T) {
	_, err := NewServer(ServerOptions{TokenFile: "x", CertFile: "c", KeyFile: "k",
		Backup:  func(context.Context, BackupRequest, func(int64)) (*backup.Manifest, error) { return nil, nil },
		Clone:   func(context.Context, CloneRequest, io.Writer) error { return nil },
		Metrics: http.NotFoundHandler()})
	if err == nil || !strings.Contains(err.Error(), "metrics token file") {
		t.Fatalf("NewServer with metrics and no metrics token file = %v, want that refused", err)
	}
}
