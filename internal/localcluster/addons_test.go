package localcluster

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestHelperAddOn is not a test: it is the add-on process of TestEnsureAddOnWaitsForALiveAddOn,
// an HTTP server whose /readyz fails while the file named by DOLPHIN_TEST_ADDON_UNREADY exists.
func TestHelperAddOn(t *testing.T) {
	addr, unready := os.Getenv("DOLPHIN_TEST_ADDON_ADDR"), os.Getenv("DOLPHIN_TEST_ADDON_UNREADY")
	if addr == "" {
		t.Skip("the add-on process of TestEnsureAddOnWaitsForALiveAddOn")
	}
	http.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if _, err := os.Stat(unready); err == nil {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
		}
	})
	t.Fatal(http.ListenAndServe(addr, nil))
}

// TestEnsureAddOnWaitsForALiveAddOn: an add-on that is alive but not ready for a moment (the
// local node while its watches come back after a kube-apiserver restart) is kept, not replaced:
// replacing the node agent restarted every pod on it.
func TestEnsureAddOnWaitsForALiveAddOn(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	ports, err := FreePorts(1) // the add-on binds it
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	unready := filepath.Join(dir, "unready")
	cp := &ControlPlane{Dir: dir, state: &state{}, stopTimeout: 5 * time.Second}
	addOn := AddOn{
		Name:         "helper",
		Args:         []string{exe, "-test.run=^TestHelperAddOn$"},
		Env:          []string{"DOLPHIN_TEST_ADDON_ADDR=" + addr, "DOLPHIN_TEST_ADDON_UNREADY=" + unready},
		Probe:        Probe{URL: fmt.Sprintf("http://%s/readyz", addr)},
		ReadyTimeout: 20 * time.Second,
	}
	ctx := t.Context()
	started, err := cp.EnsureAddOn(ctx, addOn)
	if err != nil || !started {
		t.Fatalf("first EnsureAddOn: started=%v, %v", started, err)
	}
	t.Cleanup(func() { _ = cp.Process("helper").Stop(5 * time.Second) })
	first := cp.Process("helper").PID

	// Unready for 1.5 s, alive all along.
	if err := os.WriteFile(unready, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(1500*time.Millisecond, func() { _ = os.Remove(unready) })
	began := time.Now()
	started, err = cp.EnsureAddOn(ctx, addOn)
	if err != nil {
		t.Fatal(err)
	}
	if started || cp.Process("helper").PID != first {
		t.Fatalf("a live add-on unready for a moment was replaced (started=%v, pid %d -> %d)", started, first, cp.Process("helper").PID)
	}
	if waited := time.Since(began); waited < time.Second {
		t.Errorf("EnsureAddOn returned after %v, before the add-on was ready again", waited)
	}

	// The control: one that stays unready is replaced once ReadyTimeout has passed.
	if err := os.WriteFile(unready, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	addOn.ReadyTimeout = time.Second
	started, err = cp.EnsureAddOn(ctx, addOn)
	if !started || cp.Process("helper").PID == first {
		t.Errorf("an add-on that stays unready was kept (started=%v, err %v)", started, err)
	}
	if err == nil {
		t.Error("the replacement cannot be ready either (the file is still there): want an error")
	} else if errors.Is(err, ctx.Err()) && ctx.Err() != nil {
		t.Fatal(err)
	}
}
