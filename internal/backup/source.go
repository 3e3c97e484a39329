package backup

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"
)

// StreamOptions configures Stream: the server to back up and how to run mariadb-backup. Take
// runs the tool the same way, with the same fields of TakeOptions.
type StreamOptions struct {
	// Socket is the local server's Unix socket. When empty, Host and Port (default 3306) are
	// used over TCP.
	Socket string
	Host   string
	Port   int
	// User and Password of an account with the privileges mariadb-backup needs (RELOAD,
	// PROCESS, LOCK TABLES, BINLOG MONITOR, SLAVE MONITOR for --slave-info), and on a
	// replica REPLICATION SLAVE ADMIN (its applier is made serial for the run, see
	// serialApply). The password
	// never appears on a command line: it is passed in a 0600 option file in TmpDir, removed
	// when the run ends.
	User     string
	Password string

	// DataDir is the server's datadir, which mariadb-backup reads (--datadir). Required.
	DataDir string
	// DefaultsFile, when set, is the server's option file, the only one mariadb-backup reads
	// (see TakeOptions.DefaultsFile).
	DefaultsFile string
	// Flavor is the server's: "mariadb" (default; mariadb-backup, mbstream) or "mysql"
	// (xtrabackup, xbstream).
	Flavor string
	// Tool is the path of the backup tool; by default it is looked up on PATH.
	Tool string
	// TmpDir holds the password file and mariadb-backup's --tmpdir and --target-dir (which
	// stays empty when streaming). Default os.TempDir().
	TmpDir string
	// ExtraArgs are appended to mariadb-backup's arguments, e.g. "--parallel=4".
	ExtraArgs []string
	// Progress, when set, is called with the number of compressed bytes written so far each
	// time the writer accepted data. It is called from one goroutine at a time, not
	// necessarily the caller's, and must return quickly.
	Progress func(writtenBytes int64)
	// Log, when set, receives what the run does to the server besides the copy that did not
	// go as it should (a replica's applier not given its threads back, see serialApply).
	// Without it such an error fails the run.
	Log func(format string, args ...any)

	// positionAt, when set, replaces asking the server for BINLOG_GTID_POS (tests of fake
	// tools, which have no server).
	positionAt positionFunc
	// serialApplyHook, when set, replaces serialApply (tests of fake tools).
	serialApplyHook serialApplyFunc
}

// StreamReport says what Stream wrote: the position the streamed data contains, as
// mariadb-backup reported it (consistent with its lock point), and how much.
type StreamReport struct {
	// GTIDPosition is the server's gtid_binlog_pos at the lock point: what the data holds.
	GTIDPosition string
	// ReplicaGTIDPosition is the server's gtid_slave_pos, when it is a replica.
	ReplicaGTIDPosition string
	// BinlogFile and BinlogPosition are the server's own binary log coordinates (informative).
	BinlogFile     string
	BinlogPosition uint64
	// ServerVersion is the server's version; Tool mariadb-backup's, e.g.
	// "mariadb-backup 10.11.14-MariaDB".
	ServerVersion string
	Tool          string
	// RawBytes is the size of the tool's mbstream, Bytes what was written (zstd-compressed).
	RawBytes int64
	Bytes    int64
	// StartTime and EndTime bound the tool's run (UTC, to the second).
	StartTime, EndTime time.Time
}

// Stream runs `mariadb-backup --backup --stream=mbstream --slave-info` against the local
// server, as Take does, and writes its output zstd-compressed into w (the format of a
// backup's data object, which backup.RestoreStream extracts). Nothing is staged on disk and
// memory use does not depend on the size of the data. It returns once the tool succeeded
// and everything is written: w then holds a complete stream.
//
// On any failure (the tool exits non-zero or without "completed OK!", a write to w fails, ctx
// is done) the tool is stopped and the error says what failed, quoting the tool's last lines
// of output; what was written to w so far is an incomplete stream that must be thrown away.
func Stream(ctx context.Context, opts StreamOptions, w io.Writer) (*StreamReport, error) {
	if err := opts.defaults(); err != nil {
		return nil, fmt.Errorf("backup stream: %w", err)
	}
	name, _, err := backupTools(opts.Flavor)
	if err != nil {
		return nil, fmt.Errorf("backup stream: %w", err)
	}
	tool, err := findTool(opts.Tool, name)
	if err != nil {
		return nil, fmt.Errorf("backup stream: %w", err)
	}
	version, err := toolVersion(ctx, tool)
	if err != nil {
		return nil, fmt.Errorf("backup stream: %w", err)
	}
	sink := &storeWriter{w: w, progress: opts.Progress}
	run, err := opts.run(ctx, tool, sink, "writing the stream")
	if err != nil {
		return nil, fmt.Errorf("backup stream of %s: %w", opts.DataDir, err)
	}
	r := run.report
	rep := &StreamReport{
		GTIDPosition: r.GTID, ReplicaGTIDPosition: r.ReplicaGTID,
		BinlogFile: r.BinlogFile, BinlogPosition: r.BinlogPosition,
		ServerVersion: r.ServerVersion, Tool: version,
		RawBytes: run.raw, Bytes: sink.n, StartTime: run.start, EndTime: run.end,
	}
	if rep.ServerVersion == "" {
		// Informative only: the stream is complete whatever this says.
		rep.ServerVersion, _ = opts.serverVersion(ctx)
	}
	return rep, nil
}

func (o *StreamOptions) defaults() error {
	if _, _, err := backupTools(o.Flavor); err != nil {
		return err
	}
	if o.DataDir == "" {
		return errors.New("the server's data directory is required")
	}
	if o.User == "" {
		return errors.New("the database user is required")
	}
	if o.Socket == "" && o.Host == "" {
		return errors.New("the server's socket or host is required")
	}
	if o.Port == 0 {
		o.Port = 3306
	}
	if o.TmpDir == "" {
		o.TmpDir = os.TempDir()
	}
	if o.DefaultsFile != "" {
		abs, err := filepath.Abs(o.DefaultsFile) // !include wants a full path
		if err != nil {
			return err
		}
		o.DefaultsFile = abs
	}
	return nil
}

// serverVersion asks the server for SELECT VERSION() with the connection parameters
// mariadb-backup gets.
func (o *StreamOptions) serverVersion(ctx context.Context) (string, error) {
	db, addr, err := o.openDB()
	if err != nil {
		return "", err
	}
	defer db.Close()
	var v string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
		return "", fmt.Errorf("SELECT VERSION() on %s: %w", addr, err)
	}
	return v, nil
}

// openDB opens a pool on the server with the connection parameters mariadb-backup gets, and
// returns it with the server's address for errors. The caller closes it.
func (o *StreamOptions) openDB() (*sql.DB, string, error) {
	return o.openDBWithReadTimeout(30 * time.Second)
}

// openDBWithReadTimeout is openDB with another read timeout (0: none, the context bounds it).
func (o *StreamOptions) openDBWithReadTimeout(readTimeout time.Duration) (*sql.DB, string, error) {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd = o.User, o.Password
	if o.Socket != "" {
		cfg.Net, cfg.Addr = "unix", o.Socket
	} else {
		cfg.Net, cfg.Addr = "tcp", net.JoinHostPort(o.Host, strconv.Itoa(o.Port))
	}
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = 10*time.Second, readTimeout, 30*time.Second
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, "", err
	}
	return sql.OpenDB(conn), cfg.Addr, nil
}

// args returns mariadb-backup's arguments for a run that reads its password from pwFile.
func (o *StreamOptions) args(pwFile, targetDir string) []string {
	return o.toolArgs(pwFile, "--backup", "--stream=mbstream", "--slave-info", "--target-dir="+targetDir)
}

// toolArgs are a backup tool's arguments: the option file holding the password (which
// includes DefaultsFile), mode, then the directories, account, connection and ExtraArgs that
// mariadb-backup and xtrabackup take alike.
func (o *StreamOptions) toolArgs(pwFile string, mode ...string) []string {
	first := "--defaults-extra-file=" + pwFile
	if o.DefaultsFile != "" {
		first = "--defaults-file=" + pwFile // which includes DefaultsFile
	}
	a := append([]string{first}, mode...)
	a = append(a, "--tmpdir="+o.TmpDir, "--datadir="+o.DataDir, "--user="+o.User)
	// A [client] host in an option file would make the client ignore --socket: host
	// "localhost" means the socket (--protocol=socket with an IP host is refused).
	if o.Socket != "" {
		a = append(a, "--host=localhost", "--socket="+o.Socket)
	} else {
		a = append(a, "--protocol=tcp", "--host="+o.Host, "--port="+strconv.Itoa(o.Port))
	}
	return append(a, o.ExtraArgs...)
}

// toolRun is what one run of mariadb-backup produced.
type toolRun struct {
	report     toolReport
	raw        int64 // bytes of the tool's mbstream
	start, end time.Time
}

// run runs mariadb-backup and writes its output, zstd-compressed, into sink; sinkWhat names
// the sink in errors ("uploading <key>"). It succeeds only when the tool exited 0, said
// "completed OK!", printed a binlog position with a valid GTID position and wrote something,
// and everything reached the sink.
func (o *StreamOptions) run(ctx context.Context, tool string, sink *storeWriter, sinkWhat string) (res toolRun, err error) {
	pwFile, err := writePasswordFile(o.TmpDir, o.Password, o.DefaultsFile)
	if err != nil {
		return res, fmt.Errorf("writing the password file in %s: %w", o.TmpDir, err)
	}
	defer os.Remove(pwFile)
	targetDir, err := os.MkdirTemp(o.TmpDir, ".dolphin-backup-target-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(targetDir)
	name, _, err := backupTools(o.Flavor)
	if err != nil {
		return res, err
	}
	args := o.args(pwFile, targetDir)
	var infoDir string
	if o.Flavor == FlavorMySQL {
		if infoDir, err = os.MkdirTemp(o.TmpDir, ".dolphin-backup-info-"); err != nil {
			return res, err
		}
		defer os.RemoveAll(infoDir)
		args = o.xtrabackupArgs(pwFile, targetDir, infoDir)
	}

	runCtx, kill := context.WithCancel(ctx)
	defer kill()
	cmd := exec.CommandContext(runCtx, tool, args...)
	cmd.WaitDelay = waitDelay
	stderr := &toolOutput{onLine: res.report.line}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return res, err
	}
	growPipe(stdout)
	gate := &gateWriter{w: sink}
	enc, err := newEncoder(gate)
	if err != nil {
		return res, err
	}
	raw := &countReader{r: stdout, gate: gate}

	if o.Flavor != FlavorMySQL {
		serial := o.serialApplyHook
		if serial == nil {
			serial = o.serialApply
		}
		release, serialErr := serial(ctx)
		if serialErr != nil {
			enc.Close()
			return res, serialErr
		}
		defer func() {
			// Also when ctx is done: the applier must get its threads back.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), applierRestoreTimeout)
			defer cancel()
			if rerr := release(rctx); rerr != nil {
				// The copy is not worse for it: said, not turned into a failed backup.
				if o.Log == nil {
					err = errors.Join(err, rerr)
				} else {
					o.Log("%v", rerr)
				}
			}
		}()
	}
	res.start = time.Now().UTC().Truncate(time.Second)
	if err := cmd.Start(); err != nil {
		enc.Close()
		return res, fmt.Errorf("starting %s: %w", tool, err)
	}
	// The encoder reads the pipe straight into the section it compresses next (no copy).
	_, copyErr := enc.ReadFrom(raw)
	if copyErr != nil {
		kill() // the sink failed or ctx is done: stop the tool, then let it exit
		_, _ = io.Copy(io.Discard, stdout)
	}
	closeErr := enc.Close()
	waitErr := cmd.Wait()
	stderr.flush()
	res.end = time.Now().UTC().Truncate(time.Second)
	res.raw = raw.n

	report := res.report
	switch {
	case ctx.Err() != nil:
		return res, fmt.Errorf("cancelled while %s was running: %w", name, ctx.Err())
	case sink.failure() != nil:
		return res, fmt.Errorf("%s: %w (%s was stopped)", sinkWhat, sink.failure(), name)
	case waitErr != nil && report.RedoLogBehind:
		return res, fmt.Errorf("%w: %w", ErrRedoLogCopy, exitError(name, waitErr, stderr))
	case waitErr != nil:
		return res, exitError(name, waitErr, stderr)
	case copyErr != nil:
		return res, fmt.Errorf("reading %s's output: %w", name, copyErr)
	case closeErr != nil:
		return res, fmt.Errorf("compressing %s's output: %w", name, closeErr)
	case !report.Completed:
		return res, exitError(name, fmt.Errorf("it exited 0 without printing %q", completedLine), stderr)
	case raw.n == 0:
		return res, exitError(name, errors.New("it wrote nothing to its output"), stderr)
	}
	if o.Flavor == FlavorMySQL {
		// The position comes from the summary file, which holds the whole GTID set.
		info, err := readXtrabackupInfo(infoDir)
		if err != nil {
			return res, exitError(name, fmt.Errorf("its %s: %w", xtrabackupInfoFile, err), stderr)
		}
		res.report.HasBinlog, res.report.BinlogFile, res.report.BinlogPosition = true, info.BinlogFile, info.BinlogPosition
		res.report.GTID = info.GTIDSet
		if res.report.ServerVersion == "" {
			res.report.ServerVersion = info.ServerVersion
		}
		return res, nil
	}
	if !report.HasBinlog {
		return res, exitError(name, errors.New("it printed no binlog position (is the binary log enabled?)"), stderr)
	}
	if _, err := normalizeGTID(report.GTID); err != nil {
		return res, fmt.Errorf("%s's position: %w", name, err)
	}
	exact, err := o.exactPosition(ctx, report)
	if err != nil {
		return res, err
	}
	res.report.GTID = exact
	return res, nil
}

// GTIDBinlogState reads the server's @@gtid_binlog_state (MariaDB) with the connection
// parameters of o: what a copy of transactions beyond this server is measured against
// (binlog.Keep).
func GTIDBinlogState(ctx context.Context, o StreamOptions) (string, error) {
	db, addr, err := o.openDB()
	if err != nil {
		return "", err
	}
	defer db.Close()
	var v string
	if err := db.QueryRowContext(ctx, "SELECT @@gtid_binlog_state").Scan(&v); err != nil {
		return "", fmt.Errorf("SELECT @@gtid_binlog_state on %s: %w", addr, err)
	}
	return v, nil
}
