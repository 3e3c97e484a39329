package restore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
)

// maxSocketPath is the longest Unix socket path the kernel accepts (108 bytes with the NUL).
const maxSocketPath = 107

// Names of the temporary server's files in Options.TmpDir.
const (
	tempSocket  = "restore.sock"
	tempPidFile = "restore.pid"
)

// killWait bounds how long a SIGKILLed temporary server may take to exit.
const killWait = 30 * time.Second

// tempServer is the mariadbd that fixes up the restored data directory.
type tempServer struct {
	cmd     *exec.Cmd
	done    chan struct{} // closed when cmd has exited and been reaped
	waitErr error         // cmd.Wait's result, set before done closes
	out     *lineLog
	socket  string
}

// tempServerArgs are the temporary server's options: the server's own option file and data
// directory, and neither networking, nor grant tables (nobody can log in to it anyway, and the
// backup's accounts and passwords are unknown here), nor replication threads, nor events.
// The binary log stays on: RESET MASTER and gtid_binlog_state need it. Commits are not
// flushed to disk one by one (sync_binlog=0, innodb_flush_log_at_trx_commit=2): a crash of
// the temporary server fails the attempt, and the next one starts again from an empty data
// directory (the markers come only after its clean shutdown, which writes everything), so
// per-commit durability would only slow a point-in-time replay down.
func (o *Options) tempServerArgs() []string {
	return []string{
		"--defaults-file=" + o.DefaultsFile, // first, or other option files are read too
		"--datadir=" + o.DataDir,
		"--skip-networking",
		"--socket=" + filepath.Join(o.TmpDir, tempSocket),
		"--pid-file=" + filepath.Join(o.TmpDir, tempPidFile),
		"--skip-slave-start",
		"--skip-grant-tables",
		"--event-scheduler=DISABLED",
		"--sync-binlog=0",
		"--innodb-flush-log-at-trx-commit=2",
	}
}

// startTempServer starts the temporary server and waits until it answers over its socket.
func (o *Options) startTempServer(ctx context.Context) (*tempServer, error) {
	bin, err := findServer(o.ServerBinary)
	if err != nil {
		return nil, err
	}
	socket := filepath.Join(o.TmpDir, tempSocket)
	if len(socket) > maxSocketPath {
		return nil, fmt.Errorf("the temporary server's socket %s is longer than %d bytes: give a shorter temporary directory", socket, maxSocketPath)
	}
	if err := os.MkdirAll(o.TmpDir, 0o750); err != nil {
		return nil, fmt.Errorf("creating the temporary directory: %w", err)
	}
	// Files of a temporary server of an earlier attempt (the container restarted).
	for _, f := range []string{socket, filepath.Join(o.TmpDir, tempPidFile)} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("removing %s: %w", f, err)
		}
	}
	if err := o.rollBackPrepared(ctx, bin); err != nil {
		return nil, err
	}
	log := o.logf()
	args := o.tempServerArgs()
	log("starting a temporary server: %s %s", bin, strings.Join(args, " "))
	s := &tempServer{done: make(chan struct{}), out: &lineLog{log: log, prefix: "mariadbd: "}, socket: socket}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Dir = o.DataDir
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.cmd.SysProcAttr = sysProcAttr()
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	go func() {
		s.waitErr = s.cmd.Wait()
		close(s.done)
	}()
	if err := s.waitReady(ctx, o.StartTimeout); err != nil {
		return nil, errors.Join(err, s.stop(o.StopTimeout))
	}
	return s, nil
}

// findServer returns path when set, else mariadbd from PATH, /usr/sbin or /usr/bin.
func findServer(path string) (string, error) {
	return findTool(path, "mariadbd", "/usr/sbin", "/usr/bin")
}

// findTool returns path when set, else name from PATH or the first of dirs that holds it as
// an executable file.
func findTool(path, name string, dirs ...string) (string, error) {
	if path != "" {
		return path, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range dirs {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found on PATH or in %s: run the restore in the server's image", name, strings.Join(dirs, ", "))
}

// connector returns a connector to the temporary server as any user (no grant tables):
// parameters are interpolated client-side, with the escaping the session's sql_mode needs,
// because the server takes no placeholders in account statements.
func (s *tempServer) connector() (driver.Connector, error) {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net, cfg.Addr = "unix", s.socket
	cfg.InterpolateParams = true
	// The driver logs to stderr by default, e.g. the broken pipe of its COM_QUIT after
	// SHUTDOWN; every error that matters is returned.
	cfg.Logger = discardLogger{}
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = 5*time.Second, 10*time.Minute, time.Minute
	return mysql.NewConnector(cfg)
}

type discardLogger struct{}

func (discardLogger) Print(...any) {}

// waitReady polls until the server answers, exits, or timeout passes.
func (s *tempServer) waitReady(ctx context.Context, timeout time.Duration) error {
	c, err := s.connector()
	if err != nil {
		return err
	}
	db := sql.OpenDB(c)
	defer db.Close()
	deadline := time.Now().Add(timeout)
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := db.PingContext(pctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("the temporary server exited during startup (%v); its last output:\n%s", s.waitErr, s.out.tail())
		case <-ctx.Done():
			return fmt.Errorf("cancelled while the temporary server was starting: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the temporary server did not answer within %v (%v); its last output:\n%s", timeout, err, s.out.tail())
		}
	}
}

// shutdown asks the server to shut down on conn (SHUTDOWN) and waits up to timeout for it to
// exit; then it kills it. It fails unless the server exited 0 by itself.
func (s *tempServer) shutdown(ctx context.Context, conn *sql.Conn, timeout time.Duration) error {
	// The server closes the connection: an error of the statement itself says nothing.
	_, stmtErr := conn.ExecContext(ctx, "SHUTDOWN")
	conn.Close()
	select {
	case <-s.done:
	case <-time.After(timeout):
		return fmt.Errorf("the temporary server did not shut down within %v of SHUTDOWN (%v): %w", timeout, stmtErr, s.kill())
	case <-ctx.Done():
		return fmt.Errorf("cancelled while the temporary server shut down: %w", errors.Join(ctx.Err(), s.stop(30*time.Second)))
	}
	if s.waitErr != nil {
		return fmt.Errorf("the temporary server's shutdown failed (%v); its last output:\n%s", s.waitErr, s.out.tail())
	}
	return nil
}

// stop ends a server that may still run: SIGTERM (a clean shutdown), then SIGKILL after
// timeout. It reports a server that had to be killed; one that exited already is no error.
func (s *tempServer) stop(timeout time.Duration) error {
	select {
	case <-s.done:
		return nil
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("the temporary server did not stop within %v of SIGTERM: %w", timeout, s.kill())
	}
}

// kill sends SIGKILL and waits for the process to exit.
func (s *tempServer) kill() error {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-s.done:
		return errors.New("killed it")
	case <-time.After(killWait):
		return fmt.Errorf("it did not exit within %v of SIGKILL (pid %d)", killWait, s.cmd.Process.Pid)
	}
}

// lineLog is the temporary server's stdout and stderr: every line goes to log, and the last
// ones are kept for error messages.
type lineLog struct {
	log func(string, ...any)
	// onLine, when set, sees every line too.
	onLine  func(string)
	mu      sync.Mutex
	prefix  string
	partial []byte
	lines   []string
}

// tailLines is how many lines of the server's output an error quotes.
const tailLines = 20

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for rest := p; len(rest) > 0; {
		i := strings.IndexByte(string(rest), '\n')
		if i < 0 {
			if len(l.partial) < 64<<10 {
				l.partial = append(l.partial, rest...)
			}
			break
		}
		l.line(string(append(l.partial, rest[:i]...)))
		l.partial, rest = l.partial[:0], rest[i+1:]
	}
	return len(p), nil
}

func (l *lineLog) line(s string) {
	s = strings.TrimRight(s, "\r")
	if strings.TrimSpace(s) == "" {
		return
	}
	l.log("%s%s", l.prefix, s)
	if l.onLine != nil {
		l.onLine(s)
	}
	l.lines = append(l.lines, s)
	if len(l.lines) > 2*tailLines {
		l.lines = append(l.lines[:0], l.lines[len(l.lines)-tailLines:]...)
	}
}

// tail returns the last lines written, or "(no output)".
func (l *lineLog) tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := l.lines
	if len(lines) > tailLines {
		lines = lines[len(lines)-tailLines:]
	}
	if len(lines) == 0 {
		return "(no output)"
	}
	return strings.Join(lines, "\n")
}
