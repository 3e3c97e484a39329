package topology

import (
	"fmt"
	"strings"
	"testing"
)

// TestServerRunTimeVariables: settings the server takes at run time are set on every
// instance without a restart; a setting no longer configured goes back to the server's
// default; a value the server refuses is the plan's error and holds nothing else up.
func TestServerRunTimeVariables(t *testing.T) {
	h := newHarness(t, 3)
	h.e.cfg.Variables = map[string]string{"max_connections": "217", "long_query_time": "2.5"}
	h.e = New(h.e.cfg, Persisted{})
	t.Cleanup(h.e.Close)
	h.converge("healthy with the variables applied", func(d Decision) bool { return d.State == StateHealthy && len(d.Plan) == 0 })
	pids := map[int]int{}
	for i := range h.db.Instances {
		if got := globalVar(t, h, i, "max_connections"); got != "217" {
			t.Errorf("%s: max_connections %s, want 217", h.db.Instances[i].Name, got)
		}
		if got := globalVar(t, h, i, "long_query_time"); !strings.HasPrefix(got, "2.5") {
			t.Errorf("%s: long_query_time %s, want 2.5", h.db.Instances[i].Name, got)
		}
		pids[i] = h.db.Instances[i].PID()
	}

	// The next configuration drops long_query_time and changes max_connections, as the
	// operator does when spec.mysqlConfig changes: a new engine from the old one's state.
	cfg := h.e.cfg
	cfg.Variables = map[string]string{"max_connections": "180"}
	from := h.e.State()
	h.e.Close()
	h.e = New(cfg, from)
	t.Cleanup(h.e.Close)
	h.converge("changed variables applied", func(d Decision) bool { return d.State == StateHealthy && len(d.Plan) == 0 })
	for i := range h.db.Instances {
		if got := globalVar(t, h, i, "max_connections"); got != "180" {
			t.Errorf("%s: max_connections %s, want 180", h.db.Instances[i].Name, got)
		}
		if got := globalVar(t, h, i, "long_query_time"); !strings.HasPrefix(got, "10") {
			t.Errorf("%s: long_query_time %s, want the default 10 after it was removed", h.db.Instances[i].Name, got)
		}
		if pid := h.db.Instances[i].PID(); pid != pids[i] {
			t.Errorf("%s restarted (pid %d -> %d)", h.db.Instances[i].Name, pids[i], pid)
		}
	}

	// A value the server refuses: reported as the plan's error, retried, and the topology
	// stays healthy (the other steps are not held up).
	cfg.Variables = map[string]string{"max_connections": "190", "sql_mode": "'NO_SUCH_MODE'"}
	from = h.e.State()
	h.e.Close()
	h.e = New(cfg, from)
	t.Cleanup(h.e.Close)
	d, err := h.e.Cycle(t.Context())
	for range 20 {
		if err != nil {
			break
		}
		d, err = h.e.Cycle(t.Context())
	}
	if err == nil || !strings.Contains(err.Error(), "sql_mode") {
		t.Fatalf("a refused value must be the plan's error naming it: %v (state %s)", err, d.State)
	}
	if d.State != StateHealthy || d.Primary != "db-0" {
		t.Errorf("a refused setting changed the topology: %s %s", d.State, d.Primary)
	}
	if got := globalVar(t, h, 0, "max_connections"); got != "190" {
		t.Errorf("the other settings must still be applied: max_connections %s", got)
	}
}

func globalVar(t *testing.T, h *harness, i int, name string) string {
	t.Helper()
	var v string
	if err := h.pool(i).QueryRow(fmt.Sprintf("SELECT @@GLOBAL.%s", name)).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}
