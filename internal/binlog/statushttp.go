package binlog

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// StatusPath is where `dolphin binlog-archive` serves its Archiver's Status (GET, JSON,
// bearer token).
const StatusPath = "/v1/archive"

// StatusHandler serves status() at StatusPath to requests carrying token, and GET /healthz to
// anyone.
func StatusHandler(status func() Status, token string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET "+StatusPath, func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dolphin-binlog-archive"`)
			http.Error(w, "a valid bearer token is required", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(status())
	})
	return mux
}

// FetchStatus asks the archiver at baseURL (e.g. https://10.0.0.7:9445) for its Status.
func FetchStatus(ctx context.Context, c *http.Client, baseURL, token string) (Status, error) {
	var st Status
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(baseURL, "/")+StatusPath, nil)
	if err != nil {
		return st, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		return st, fmt.Errorf("binlog archiver %s: %w", baseURL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return st, fmt.Errorf("binlog archiver %s: reading its status: %w", baseURL, err)
	}
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("binlog archiver %s: GET %s: %s: %s", baseURL, StatusPath, resp.Status, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, fmt.Errorf("binlog archiver %s: decoding its status: %w", baseURL, err)
	}
	return st, nil
}
