package dbtest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Layout lays out opts.Instances servers as Start does — each with its own loopback address,
// my.cnf (the production file plus the test paths and opts.ExtraConfig) and instance.cnf — but
// leaves every DataDir empty and starts nothing. The test fills a DataDir (by restoring a
// backup into it, say, with ConfigFile as the server's option file) and then starts the
// server with StartAs, or Start when root@localhost still has no password. The cleanup is
// Start's: servers stopped, addresses released, directories deleted unless
// DOLPHIN_KEEP_DBTEST=1.
func Layout(t testing.TB, opts Options) *Cluster {
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
	sweepStale()
	dir, err := os.MkdirTemp("", clusterDirPrefix+dirSafe(t.Name())+"-")
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	c := &Cluster{Dir: dir}
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
	return c
}

// SocketPath returns the server's Unix socket, Dir/mysqld.sock, as its my.cnf names it (in
// [mysqld] and [client]).
func (i *Instance) SocketPath() string { return i.socket() }

// StartAs (re)starts the server on whatever its DataDir holds, with extraArgs after
// --defaults-file, and waits up to 30 s until user, with password, answers "SELECT 1" over
// the Unix socket: Start for a data directory whose root@localhost has a password, such as
// one restored from a backup. It fails the test if the server is already running, exits, or
// does not answer.
func (i *Instance) StartAs(t testing.TB, user, password string, extraArgs ...string) {
	t.Helper()
	began := time.Now()
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd = user, password
	cfg.Net, cfg.Addr = "unix", i.socket()
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = time.Second, 2*time.Second, 2*time.Second
	if err := i.startReadyFor(extraArgs, cfg.FormatDSN()); err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Logf("dbtest: %s (%s) started in %v", i.Name, i.Host, time.Since(began).Round(time.Millisecond))
}
