// Package dbtest starts real MariaDB servers for tests of replication and
// failover: each instance is a mariadbd process with its own data directory,
// listening on port 3306 of its own loopback address (127.A.B.C), configured
// with the my.cnf that Dolphin generates for production (package mycnf) plus a
// small-memory profile and test-only paths.
//
// The servers start as a freshly installed, unreplicated cluster member would:
// read-only, binary log on, no replication configured, root reachable over TCP
// from loopback without a password. Setting up replication is left to the code
// under test.
//
// Each data directory is initialised by mariadb-install-db, through a cached
// template that later tests copy (see template.go): the first test on a
// machine pays for install-db (3–6 s under load), later ones copy its 34 MB
// result (0.1–0.3 s).
//
// The binaries come from hack/install-mariadb.sh. Tests that use this package
// are skipped under `go test -short`. Environment:
//
//   - DOLPHIN_KEEP_DBTEST=1 keeps each test's directory (config, data, logs).
//   - DOLPHIN_CACHE_DIR moves the template cache, by default
//     ${XDG_CACHE_HOME:-$HOME/.cache}/dolphin/dbtest-datadir.
package dbtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// KeepEnv names the environment variable that, set to "1", keeps the servers'
// directories after a test (their location is logged) instead of deleting them.
const KeepEnv = "DOLPHIN_KEEP_DBTEST"

// stopTimeout is how long cleanup waits after SIGTERM before it sends SIGKILL.
const stopTimeout = 20 * time.Second

// binaries are the MariaDB programs the harness runs.
type binaries struct {
	server    string // mariadbd
	installDB string // mariadb-install-db
}

var (
	binOnce sync.Once
	binVal  binaries
	binErr  error
)

// findBinaries looks mariadbd and mariadb-install-db up on PATH and, since
// /usr/sbin is not always on a user's PATH, in /usr/sbin and /usr/bin.
func findBinaries() (binaries, error) {
	binOnce.Do(func() {
		find := func(name string) (string, error) {
			if p, err := exec.LookPath(name); err == nil {
				return p, nil
			}
			for _, dir := range []string{"/usr/sbin", "/usr/bin"} {
				p := filepath.Join(dir, name)
				if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
					return p, nil
				}
			}
			return "", fmt.Errorf("%s not found on PATH, in /usr/sbin or /usr/bin", name)
		}
		var errs [2]error
		binVal.server, errs[0] = find("mariadbd")
		binVal.installDB, errs[1] = find("mariadb-install-db")
		binErr = errors.Join(errs[:]...)
	})
	return binVal, binErr
}

// RequireMariaDB skips the test under `go test -short`; otherwise it fails the
// test (t.Fatal), pointing at hack/install-mariadb.sh, when mariadbd or
// mariadb-install-db is not installed. Start calls it too.
func RequireMariaDB(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("dbtest: real MariaDB servers are not started under -short")
	}
	if _, err := findBinaries(); err != nil {
		t.Fatalf("dbtest: MariaDB is not installed (%v): run hack/install-mariadb.sh, "+
			"or skip the real-server tests with go test -short", err)
	}
}

// Options configures Start.
type Options struct {
	// Instances is how many servers to start (at least 1). They are named
	// db-0, db-1, … and get server_id 1, 2, ….
	Instances int
	// ExtraConfig holds extra [mysqld] settings, written last in every
	// instance's my.cnf so that they win over everything else, including the
	// test paths. Keys are written as given ("key=value", or "key" alone when
	// the value is empty) and are not checked against mycnf's reserved keys.
	ExtraConfig map[string]string
}

// Cluster is a set of running servers started by Start.
type Cluster struct {
	// Instances are the servers, in order of their names and server ids.
	Instances []*Instance
	// Dir is the directory that holds every instance's Dir.
	Dir string
}

// Start starts opts.Instances fresh servers, each on its own loopback address
// with its own freshly initialised data directory, in parallel, and waits
// until each answers "SELECT 1" as root over TCP. It registers a t.Cleanup that stops every server (SIGTERM, then
// SIGKILL after 20 s), logs the tail of each error log when the test failed,
// and deletes the directories unless DOLPHIN_KEEP_DBTEST=1.
//
// Start skips the test under -short and fails it when MariaDB is missing (see
// RequireMariaDB) or a server does not come up.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	RequireMariaDB(t)
	if opts.Instances < 1 {
		t.Fatalf("dbtest: Options.Instances is %d, want at least 1", opts.Instances)
	}
	for k, v := range opts.ExtraConfig {
		if k == "" || strings.ContainsAny(k, "\r\n=[]") || strings.ContainsAny(v, "\r\n") {
			t.Fatalf("dbtest: Options.ExtraConfig: bad setting %q=%q", k, v)
		}
	}
	began := time.Now()

	sweepStale()
	dir, err := os.MkdirTemp("", clusterDirPrefix+dirSafe(t.Name())+"-")
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	c := &Cluster{Dir: dir}
	// Registered before anything runs, so that a failure half-way through
	// still stops what was started and frees the addresses.
	t.Cleanup(func() { c.cleanup(t) })

	for n := range opts.Instances {
		inst, err := newInstance(dir, n)
		if inst != nil {
			c.Instances = append(c.Instances, inst)
		}
		if err != nil {
			t.Fatalf("dbtest: %v", err)
		}
		if err := writeConfig(inst, opts.ExtraConfig); err != nil {
			t.Fatalf("dbtest: %s: %v", inst.Name, err)
		}
	}

	template, err := datadirTemplate(opts.ExtraConfig)
	if err != nil {
		t.Logf("dbtest: no datadir template, running mariadb-install-db for each instance: %v", err)
	}
	// Initialise and start in parallel.
	errs := make([]error, len(c.Instances))
	initTook := make([]time.Duration, len(c.Instances))
	startTook := make([]time.Duration, len(c.Instances))
	var wg sync.WaitGroup
	for n, inst := range c.Instances {
		wg.Go(func() {
			t0 := time.Now()
			if err := inst.initDataDir(template); err != nil {
				errs[n] = err
				return
			}
			t1 := time.Now()
			errs[n] = inst.start(nil)
			initTook[n], startTook[n] = t1.Sub(t0), time.Since(t1)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("dbtest: starting %d instance(s): %v", len(c.Instances), err)
	}

	var hosts []string
	for _, inst := range c.Instances {
		hosts = append(hosts, inst.Name+"="+inst.Host)
	}
	how := "copied"
	if template == "" {
		how = "mariadb-install-db"
	}
	t.Logf("dbtest: started %d MariaDB instance(s) in %v (datadir %s ≤%v, mariadbd ready ≤%v): %s (dir %s)",
		len(c.Instances), time.Since(began).Round(time.Millisecond), how,
		slices.Max(initTook).Round(time.Millisecond), slices.Max(startTook).Round(time.Millisecond),
		strings.Join(hosts, " "), dir)
	return c
}

// cleanup stops every server, releases the addresses and deletes the files.
// It runs from t.Cleanup, so also after a test panicked. A test binary that
// dies outright takes its servers with it: they run with a parent-death
// signal (Linux).
func (c *Cluster) cleanup(t testing.TB) {
	if t.Failed() {
		for _, inst := range c.Instances {
			t.Logf("dbtest: %s (%s, pid %d, running=%v):\n%s",
				inst.Name, inst.Addr(), inst.PID(), inst.Running(), inst.logTails(40))
		}
	}
	var wg sync.WaitGroup
	for _, inst := range c.Instances {
		wg.Go(func() {
			if err := inst.stop(stopTimeout); err != nil {
				t.Logf("dbtest: cleanup: %v", err)
			}
		})
	}
	wg.Wait()
	for _, inst := range c.Instances {
		inst.lock.release()
	}
	if os.Getenv(KeepEnv) == "1" {
		os.Remove(filepath.Join(c.Dir, ownerFile)) // or a later sweepStale deletes it
		t.Logf("dbtest: %s=1: keeping %s", KeepEnv, c.Dir)
		return
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		t.Logf("dbtest: cleanup: %v", err)
	}
}

// clusterDirPrefix starts the name of every cluster's directory in
// os.TempDir(); ownerFile in it holds the test process's pid.
const (
	clusterDirPrefix = "dolphin-dbtest-"
	ownerFile        = "owner.pid"
)

// sweepStale deletes the directories of clusters whose test process died
// without running its cleanups (killed, or timed out): their servers died with
// it (parent-death signal) but their files stay. A directory without an owner
// file (kept with DOLPHIN_KEEP_DBTEST=1) is left alone.
func sweepStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), clusterDirPrefix+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(d)
		}
	}
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// dirSafe turns a test name into a short directory-name fragment.
func dirSafe(name string) string {
	s := unsafeChars.ReplaceAllString(name, "_")
	if len(s) > 32 {
		s = s[:32]
	}
	return s
}
