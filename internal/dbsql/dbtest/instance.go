package dbtest

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	// Registers the "mysql" driver used to check that a server is ready.
	_ "github.com/go-sql-driver/mysql"
)

// readyTimeout bounds how long Start waits for a server to answer.
const readyTimeout = 30 * time.Second

// killTimeout bounds how long Kill waits for a SIGKILLed process to exit.
const killTimeout = 10 * time.Second

// Instance is one mariadbd server of a Cluster. Its methods may be called from
// any goroutine, but Start, Stop and Kill must not race each other.
type Instance struct {
	// Name is "db-0", "db-1", ….
	Name string
	// Host is the instance's own loopback address, 127.A.B.C; the server binds
	// only to it (bind_address) and reports it as report_host.
	Host string
	// Port is the TCP port, 3306.
	Port int
	// Dir holds everything of the instance: my.cnf, instance.cnf, data/,
	// tmp/, error.log, mariadbd.log (stdout and stderr), install-db.log, the
	// socket and the pid file.
	Dir string
	// ConfigFile is the instance's my.cnf. Pass it as the FIRST argument,
	// --defaults-file=<ConfigFile>, to mariadb, mariadb-backup or mariadb-dump;
	// its [client] section names this server and user root.
	ConfigFile string
	// DataDir is the server's datadir, Dir/data.
	DataDir string
	// ErrorLog is the server's error log (log_error), appended across restarts.
	ErrorLog string

	serverID uint32
	lock     *addrLock

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd has exited and been reaped
	// supervised: cmd is not mariadbd but a supervisor that runs it (StartCommand).
	supervised bool
}

// Addr returns "host:3306".
func (i *Instance) Addr() string { return net.JoinHostPort(i.Host, strconv.Itoa(i.Port)) }

// RootDSN returns a go-sql-driver/mysql DSN for root over TCP, without a
// password or default database: "root@tcp(127.1.2.3:3306)/?"+params. params
// (e.g. "timeout=1s&multiStatements=true") may be empty.
func (i *Instance) RootDSN(params string) string {
	dsn := "root@tcp(" + i.Addr() + ")/"
	if params = strings.TrimPrefix(params, "?"); params != "" {
		dsn += "?" + params
	}
	return dsn
}

// ServerID returns the instance's server_id: its index in the cluster plus 1.
func (i *Instance) ServerID() uint32 { return i.serverID }

// Running reports whether the server process is alive (started and not yet
// exited). It does not check that the server answers.
func (i *Instance) Running() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.runningLocked()
}

func (i *Instance) runningLocked() bool {
	if i.done == nil {
		return false
	}
	select {
	case <-i.done:
		return false
	default:
		return true
	}
}

// PID returns the server's process id, or 0 when it is not running. Tests can
// use it to send other signals, e.g. SIGSTOP to simulate a hung server.
func (i *Instance) PID() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	if !i.runningLocked() {
		return 0
	}
	return i.cmd.Process.Pid
}

// Start (re)starts the server on its existing data directory, with extraArgs
// after --defaults-file (e.g. "--init-rpl-role=SLAVE"), and waits up to 30 s
// until it accepts TCP connections and answers "SELECT 1" as root. It fails
// the test if the server is already running, exits, or does not answer.
func (i *Instance) Start(t testing.TB, extraArgs ...string) {
	t.Helper()
	began := time.Now()
	if err := i.start(extraArgs); err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Logf("dbtest: %s (%s) started in %v", i.Name, i.Host, time.Since(began).Round(time.Millisecond))
}

// Stop shuts the server down cleanly with SIGTERM and waits for it to exit;
// after 30 s it sends SIGKILL (logged). Stopping a stopped server does nothing.
func (i *Instance) Stop(t testing.TB) {
	t.Helper()
	if err := i.stop(30 * time.Second); err != nil {
		t.Logf("dbtest: %v", err)
	}
}

// Kill crashes the server with SIGKILL and returns once the process has exited
// and been reaped (waited for): its address is free and InnoDB recovers on
// the next Start. Started by StartCommand, the server and its supervisor are
// killed together (their process group). Killing a stopped server does nothing.
func (i *Instance) Kill(t testing.TB) {
	t.Helper()
	cmd, done := i.current()
	if cmd == nil {
		return
	}
	server, _ := i.ServerPID()
	// An error means the process has exited already: done is about to close.
	sigErr := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(killTimeout):
		t.Fatalf("dbtest: %s (pid %d) did not exit within %v of SIGKILL (signal: %v)",
			i.Name, cmd.Process.Pid, killTimeout, sigErr)
	}
	if i.isSupervised() && server > 0 && !exited(server, killTimeout) {
		t.Fatalf("dbtest: %s: mariadbd (pid %d) did not exit within %v of SIGKILL", i.Name, server, killTimeout)
	}
}

// Recreate stops the server, replaces its data directory with a freshly
// initialised, empty one (what a pod gets from a new volume) and starts it
// again. Its address and server id stay the same.
func (i *Instance) Recreate(t testing.TB) {
	t.Helper()
	i.Stop(t)
	if err := os.RemoveAll(i.DataDir); err != nil {
		t.Fatalf("dbtest: %s: removing the data directory: %v", i.Name, err)
	}
	if err := os.Mkdir(i.DataDir, 0o750); err != nil {
		t.Fatalf("dbtest: %s: %v", i.Name, err)
	}
	if err := i.initDataDir(""); err != nil { // no template: mariadb-install-db
		t.Fatalf("dbtest: %v", err)
	}
	i.Start(t)
}

// current returns the running process and its done channel, or nil.
func (i *Instance) current() (*exec.Cmd, chan struct{}) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if !i.runningLocked() {
		return nil, nil
	}
	return i.cmd, i.done
}

// runInstallDB initialises the empty DataDir with mariadb-install-db.
func (i *Instance) runInstallDB() error {
	bin, err := findBinaries()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// --defaults-file must be the first argument, or /etc/mysql is read too.
	cmd := exec.CommandContext(ctx, bin.installDB, append([]string{"--defaults-file=" + i.ConfigFile}, installDBArgs...)...)
	cmd.Dir = i.Dir
	cmd.SysProcAttr = sysProcAttr()
	out, err := cmd.CombinedOutput()
	_ = os.WriteFile(filepath.Join(i.Dir, "install-db.log"), out, 0o644)
	if err != nil {
		return fmt.Errorf("%s: mariadb-install-db: %v; output (tail):\n%s", i.Name, err, tail(out, 40))
	}
	return nil
}

// rootSocketDSN logs in as root over the Unix socket. The socket is used because the code
// under test locks down the install-time root accounts over TCP; root@localhost stays.
func (i *Instance) rootSocketDSN() string {
	return "root@unix(" + i.socket() + ")/?timeout=1s&readTimeout=2s&writeTimeout=2s"
}

// start launches mariadbd and waits until it is ready (root answers over the socket).
func (i *Instance) start(extraArgs []string) error {
	return i.startReadyFor(extraArgs, i.rootSocketDSN())
}

// startReadyFor launches mariadbd and waits until dsn answers.
func (i *Instance) startReadyFor(extraArgs []string, dsn string) error {
	bin, err := findBinaries()
	if err != nil {
		return err
	}
	// --defaults-file must be the first argument, or /etc/mysql is read too.
	args := append([]string{"--defaults-file=" + i.ConfigFile}, extraArgs...)
	return i.launch(bin.server, args, nil, false, dsn)
}

// launch starts path with args (and env added to the test's environment) as the instance's
// process — mariadbd, or a supervisor that runs it (supervised) — and waits until dsn
// answers.
func (i *Instance) launch(path string, args, env []string, supervised bool, dsn string) error {
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
	fmt.Fprintf(logf, "==== dbtest %s: %s %s\n", time.Now().Format(time.RFC3339Nano), path, strings.Join(args, " "))
	cmd := exec.Command(path, args...)
	cmd.Dir = i.Dir
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf // files: Wait does not wait for copying goroutines
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		i.mu.Unlock()
		return fmt.Errorf("%s: starting %s: %w", i.Name, path, err)
	}
	done := make(chan struct{})
	i.cmd, i.done, i.supervised = cmd, done, supervised
	i.mu.Unlock()
	// The only Wait: it reaps the process as soon as it exits, whether it was
	// stopped, killed or crashed, so Running turns false right away.
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
	var lastErr error
	for {
		select {
		case <-done:
			return fmt.Errorf("mariadbd exited during startup: %v", cmd.ProcessState)
		default:
		}
		if lastErr = i.ping(db); lastErr == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %w", readyTimeout, lastErr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (i *Instance) ping(db *sql.DB) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var one int
	return db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
}

// stop sends SIGTERM and waits up to timeout for the process to exit, then
// SIGKILLs it. It reports a timeout, and a process that survives SIGKILL.
func (i *Instance) stop(timeout time.Duration) error {
	cmd, done := i.current()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return nil
	case <-time.After(timeout):
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the group: a supervisor's server too
	select {
	case <-done:
		return fmt.Errorf("%s (pid %d) did not stop within %v of SIGTERM: killed it", i.Name, cmd.Process.Pid, timeout)
	case <-time.After(killTimeout):
		return fmt.Errorf("%s (pid %d) did not exit within %v of SIGKILL", i.Name, cmd.Process.Pid, killTimeout)
	}
}

// logTails returns the last n lines of the error log and, when it holds more
// than dbtest's own start lines, of mariadbd's stdout and stderr.
func (i *Instance) logTails(n int) string {
	var b strings.Builder
	errLog, err := os.ReadFile(i.ErrorLog)
	if err != nil {
		fmt.Fprintf(&b, "---- %s: %v\n", i.ErrorLog, err)
	} else {
		fmt.Fprintf(&b, "---- last %d lines of %s:\n%s", n, i.ErrorLog, tail(errLog, n))
	}
	outPath := filepath.Join(i.Dir, "mariadbd.log")
	if out, err := os.ReadFile(outPath); err == nil {
		for line := range strings.Lines(string(out)) {
			if !strings.HasPrefix(line, "==== dbtest ") {
				fmt.Fprintf(&b, "---- last %d lines of %s:\n%s", n, outPath, tail(out, n))
				break
			}
		}
	}
	return b.String()
}

// tail returns the last n lines of text, ending in a newline.
func tail(text []byte, n int) string {
	text = bytes.TrimRight(text, "\n")
	if len(text) == 0 {
		return ""
	}
	end := len(text)
	for idx := end; n > 0; n-- {
		idx = bytes.LastIndexByte(text[:idx], '\n')
		if idx < 0 {
			return string(text) + "\n"
		}
		end = idx
	}
	return string(text[end+1:]) + "\n"
}
