package dbtest

import (
	"database/sql"
	"fmt"
	"os"
	"os/exec"
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

// startReadyFor launches mariadbd like start, but waits until dsn answers.
func (i *Instance) startReadyFor(extraArgs []string, dsn string) error {
	bin, err := findBinaries()
	if err != nil {
		return err
	}
	i.mu.Lock()
	if i.runningLocked() {
		i.mu.Unlock()
		return fmt.Errorf("%s is already running (pid %d)", i.Name, i.cmd.Process.Pid)
	}
	logf, err := os.OpenFile(filepath.Join(i.Dir, "mariadbd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		i.mu.Unlock()
		return err
	}
	// --defaults-file must be the first argument, or /etc/mysql is read too.
	args := append([]string{"--defaults-file=" + i.ConfigFile}, extraArgs...)
	fmt.Fprintf(logf, "==== dbtest %s: %s %s\n", time.Now().Format(time.RFC3339Nano), bin.server, strings.Join(args, " "))
	cmd := exec.Command(bin.server, args...)
	cmd.Dir = i.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		i.mu.Unlock()
		return fmt.Errorf("%s: starting mariadbd: %w", i.Name, err)
	}
	done := make(chan struct{})
	i.cmd, i.done = cmd, done
	i.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	if err := i.waitReadyFor(cmd, done, dsn); err != nil {
		return fmt.Errorf("%s (%s): %w\n%s", i.Name, i.Addr(), err, i.logTails(40))
	}
	return nil
}

// waitReadyFor polls dsn with "SELECT 1" until it answers, the process exits, or
// readyTimeout passes.
func (i *Instance) waitReadyFor(cmd *exec.Cmd, done chan struct{}, dsn string) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-done:
			return fmt.Errorf("mariadbd exited during startup: %v", cmd.ProcessState)
		default:
		}
		lastErr := i.ping(db)
		if lastErr == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %w", readyTimeout, lastErr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
