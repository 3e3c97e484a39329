package seed

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dolphin-operator/dolphin/internal/restore"
)

// From template generation 6 the seed writes the per-instance config itself: its init script
// runs on every start, also when the data directory is initialised already, and a failing one
// stops the seed with its reason.
func TestRunRunsTheInitScriptFirst(t *testing.T) {
	dir := t.TempDir()
	data, out := filepath.Join(dir, "data"), filepath.Join(dir, "instance.cnf")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, restore.InitializedMarker), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "init.sh")
	if err := os.WriteFile(script, []byte("echo 'server_id=1000' > "+out+"\necho configured\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	if err := Run(context.Background(), Options{InitScript: script, DataDir: data}, &log); err != nil {
		t.Fatalf("Run: %v\n%s", err, log.String())
	}
	if b, err := os.ReadFile(out); err != nil || string(b) != "server_id=1000\n" {
		t.Fatalf("the init script did not write the instance config: %q, %v", b, err)
	}
	if !strings.Contains(log.String(), "configured") || !strings.Contains(log.String(), "nothing to seed") {
		t.Errorf("log: %s", log.String())
	}

	if err := os.WriteFile(script, []byte("echo 'no ordinal' >&2\nexit 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	log.Reset()
	err := Run(context.Background(), Options{InitScript: script, DataDir: data}, &log)
	if err == nil || !strings.Contains(err.Error(), "the init script") || !strings.Contains(log.String(), "no ordinal") {
		t.Fatalf("a failing init script: err %v, log %q", err, log.String())
	}
}
