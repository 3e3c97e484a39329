package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dolphin-operator/dolphin/internal/localcluster"
)

// TestLocalUpFailureStopsWhatItStarted makes `dolphin local up` fail after the control plane
// and the local node are running (the CRDs it is told to install do not parse) and checks that
// it says so, exits non-zero, and leaves no process of its folder running: a failed start
// must not leak an API server, a scheduler or a node holding ports and memory. The same
// failure on a stack that runs leaves every process of it running.
func TestLocalUpFailureStopsWhatItStarted(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped under -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("the local node needs root (network and mount namespaces): run as root, as CI does")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "dolphin")
	build := exec.Command("go", "build", "-o", bin, "./cmd/dolphin")
	build.Dir = repoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building dolphin: %v\n%s", err, out)
	}
	crds := filepath.Join(dir, "crds")
	if err := os.Mkdir(crds, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(crds, "broken.yaml"), []byte("apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nspec: [not, a, map\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	local := filepath.Join(dir, "local")
	t.Cleanup(func() { // whatever the assertions say, leave nothing behind
		_ = exec.Command(bin, "local", "down", "--dir", local, "--wipe").Run()
	})
	out, err := exec.Command(bin, "local", "up", "--dir", local, "--crd-dir", crds,
		"--node", "process", "--bridge", "dle2e", "--pod-cidr", "10.244.77.0/24").CombinedOutput()
	t.Logf("dolphin local up:\n%s", out)
	if err == nil {
		t.Fatal("dolphin local up with CRDs that do not parse succeeded")
	}
	for _, want := range []string{"kube-apiserver", "ready", "node + service proxy", "installing CRDs", "stopping what this up started"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the output does not say %q: the failure must come after the control plane and the node started", want)
		}
	}
	if pids := processesUnder(t, local); len(pids) > 0 {
		t.Errorf("processes of %s still run after the failed up: %v", local, pids)
	}
	cp, err := localcluster.Open(local)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range cp.Health(t.Context()) {
		if h.Alive {
			t.Errorf("state.json shows %s (pid %d) alive", h.Name, h.PID)
		}
	}

	// A stack that runs is left as it was by an `up` that fails: same processes, all healthy.
	if out, err := exec.Command(bin, "local", "up", "--dir", local,
		"--node", "process", "--bridge", "dle2e", "--pod-cidr", "10.244.77.0/24").CombinedOutput(); err != nil {
		t.Fatalf("dolphin local up: %v\n%s", err, out)
	}
	pids := func() map[string]int {
		cp, err := localcluster.Open(local)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]int{}
		for _, h := range cp.Health(t.Context()) {
			if h.Err != nil {
				t.Errorf("%s: %v", h.Name, h.Err)
			}
			m[h.Name] = h.PID
		}
		return m
	}
	running := pids()
	out, err = exec.Command(bin, "local", "up", "--dir", local, "--crd-dir", crds,
		"--node", "process", "--bridge", "dle2e", "--pod-cidr", "10.244.77.0/24").CombinedOutput()
	t.Logf("dolphin local up on the running stack:\n%s", out)
	if err == nil {
		t.Fatal("dolphin local up with CRDs that do not parse succeeded")
	}
	after := pids()
	for _, name := range []string{localcluster.Etcd, localcluster.APIServer, localcluster.ControllerManager, localcluster.Scheduler, "node", "operator"} {
		if running[name] == 0 || after[name] != running[name] {
			t.Errorf("%s: pid %d before the failed up, %d after: a running stack must be left as it was", name, running[name], after[name])
		}
	}
}

// processesUnder returns "pid: command line" of every process whose command line mentions dir.
func processesUnder(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil || e.Name() == strconv.Itoa(os.Getpid()) {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), dir) {
			continue
		}
		found = append(found, e.Name()+": "+strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " "))
	}
	return found
}
