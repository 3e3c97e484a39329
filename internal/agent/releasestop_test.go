package agent

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// TestReleaseStop checks POST /v1/release-stop: it needs the token, creates the file (again
// without error), and an agent without the file configured answers 404.
func TestReleaseStop(t *testing.T) {
	a := startAgent(t, nil, nil)
	file := filepath.Join(a.dir, "run", "dolphin-stop-released")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var se *StatusError
	if err := a.client(testToken).ReleaseStop(ctx); !errors.As(err, &se) || se.StatusCode != http.StatusNotFound {
		t.Fatalf("ReleaseStop without StopReleasedFile = %v, want a 404 StatusError", err)
	}
	a.opts.StopReleasedFile = file
	a.restart()
	if err := a.client("wrong").ReleaseStop(ctx); !errors.As(err, &se) || se.StatusCode != http.StatusUnauthorized {
		t.Fatalf("ReleaseStop with a wrong token = %v, want a 401 StatusError", err)
	}
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("released without a valid token: %v", err)
	}
	for range 2 {
		if err := a.client(testToken).ReleaseStop(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(file); err != nil {
			t.Fatalf("the released file: %v", err)
		}
	}
}
