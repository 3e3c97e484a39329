package migrate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dolphin-operator/dolphin/internal/mycnf"
)

// Endpoint is how a client tool reaches a server and as whom.
type Endpoint struct {
	// Host and Port (default 3306) over TCP, or Socket.
	Host   string
	Port   int
	Socket string
	// User and Password of the account; the password is handed to the tools in a 0600
	// option file, never on a command line.
	User, Password string
	// CAFile, when set, makes the connection use TLS and verify the server's certificate
	// (its name included) against this CA; the client tools need it as a file.
	CAFile string
	// CACertPEM is the same CA in memory, for Open only: a process without a writable
	// temporary directory (the operator) checks a source with it.
	CACertPEM []byte
}

// clientOptions are the endpoint's [client] options.
func (e Endpoint) clientOptions() []mycnf.ClientOption {
	var o []mycnf.ClientOption
	add := func(k, v string) { o = append(o, mycnf.ClientOption{Key: k, Value: v}) }
	if e.Socket != "" {
		add("socket", e.Socket)
	} else {
		add("host", e.Host)
		add("port", strconv.Itoa(e.port()))
		add("protocol", "TCP")
	}
	add("user", e.User)
	add("password", e.Password)
	if e.CAFile != "" {
		add("ssl-ca", e.CAFile)
		add("ssl-verify-server-cert", "1")
	}
	return o
}

// LogicalCopyOptions configures LogicalCopy.
type LogicalCopyOptions struct {
	// Source is the server copied from, through the migration account.
	Source Endpoint
	// Target is the server copied into: a new instance's server, before it serves anyone.
	Target Endpoint
	// DumpTool and ClientTool are the paths of mariadb-dump and mariadb; by default they are
	// looked up on PATH.
	DumpTool, ClientTool string
	// TmpDir holds the tools' option files (0600), removed when LogicalCopy returns.
	// Default os.TempDir().
	TmpDir string
	// Progress, when set, is called with the number of bytes copied so far, from the copying
	// goroutine; it must return quickly.
	Progress func(bytes int64)
}

// CopyResult says what LogicalCopy did.
type CopyResult struct {
	// GTIDPosition is the source's position at the copy's snapshot: the target holds every
	// transaction up to it and none after, and its gtid_slave_pos is set to it, so that
	// replication from the source (MASTER_USE_GTID=slave_pos) continues exactly there.
	GTIDPosition string
	// Bytes is the size of the dump streamed.
	Bytes int64
	// Took is how long the copy took.
	Took time.Duration
	// ScannedTo is how far the source's binary log was read for changes of schemas and
	// accounts made during the copy (none were found up to there): a caller that copies
	// more afterwards (the accounts) checks again from there with ChangesSince.
	ScannedTo BinlogCoordinates
}

// maxPacket is both tools' largest packet: a row of up to 1 GiB.
const maxPacket = "--max-allowed-packet=1073741824"

// toolWaitDelay bounds how long Wait waits for a killed tool's output to close.
const toolWaitDelay = 10 * time.Second

// dumpArgs are mariadb-dump's arguments after its option file: one consistent snapshot of
// every user schema (START TRANSACTION WITH CONSISTENT SNAPSHOT: no global lock, no RELOAD
// privilege on MariaDB), with the snapshot's GTID position as a comment, routines, events,
// triggers and binary strings in hex.
var dumpArgs = []string{
	"--single-transaction", "--master-data=2", "--gtid",
	"--all-databases", "--ignore-database=mysql", "--ignore-database=sys",
	"--routines", "--events", "--triggers", "--hex-blob",
}

// LogicalCopy copies every user schema of the source into the target in one stream,
// `mariadb-dump … | mariadb`, nothing staged on disk: the dump is a consistent snapshot of
// the source's transactional tables at one GTID position (Check refuses a source with
// others), loaded with sql_log_bin=0 so that the target's binary log stays empty of the copy;
// the target's gtid_slave_pos is then set to that position in the same session. On any
// failure the target holds part of the copy and must be discarded (the seed starts over on
// a fresh data directory); the error quotes the failing tool's last lines.
func LogicalCopy(ctx context.Context, o LogicalCopyOptions) (CopyResult, error) {
	began := time.Now()
	dumpTool, err := lookTool(o.DumpTool, "mariadb-dump")
	if err != nil {
		return CopyResult{}, err
	}
	clientTool, err := lookTool(o.ClientTool, "mariadb")
	if err != nil {
		return CopyResult{}, err
	}
	srcFile, err := mycnf.WriteClientFile(o.TmpDir, "one mariadb-dump of a migration", o.Source.clientOptions()...)
	if err != nil {
		return CopyResult{}, fmt.Errorf("writing the source's option file: %w", err)
	}
	defer os.Remove(srcFile)
	tgtFile, err := mycnf.WriteClientFile(o.TmpDir, "one load of a migration", o.Target.clientOptions()...)
	if err != nil {
		return CopyResult{}, fmt.Errorf("writing the target's option file: %w", err)
	}
	defer os.Remove(tgtFile)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	// --max-allowed-packet on both: the host's option files ([mysqldump] on Debian) may say 16M.
	dump := exec.CommandContext(runCtx, dumpTool, append([]string{"--defaults-extra-file=" + srcFile, maxPacket}, dumpArgs...)...)
	// --skip-reconnect: a reconnected session would run without the init command's
	// sql_log_bin=0 if a client ever skipped it; batch mode does not reconnect anyway.
	load := exec.CommandContext(runCtx, clientTool, "--defaults-extra-file="+tgtFile, "--binary-mode", "--skip-reconnect",
		maxPacket, "--init-command=SET SESSION sql_log_bin=0")
	var dumpErr, loadErr tail
	dump.Stderr, load.Stderr = &dumpErr, &loadErr
	// A killed tool's children could hold its output open: Wait returns anyway after this.
	dump.WaitDelay, load.WaitDelay = toolWaitDelay, toolWaitDelay
	dumpOut, err := dump.StdoutPipe()
	if err != nil {
		return CopyResult{}, err
	}
	loadIn, err := load.StdinPipe()
	if err != nil {
		return CopyResult{}, err
	}
	if err := load.Start(); err != nil {
		return CopyResult{}, fmt.Errorf("starting %s: %w", clientTool, err)
	}
	if err := dump.Start(); err != nil {
		cancel()
		_ = load.Wait()
		return CopyResult{}, fmt.Errorf("starting %s: %w", dumpTool, err)
	}

	sniff := &gtidSniffer{}
	counter := &progressWriter{progress: o.Progress}
	n, copyErr := io.Copy(io.MultiWriter(loadIn, sniff, counter), dumpOut)
	if copyErr != nil {
		// The loader stopped taking the stream: stop the dump before waiting for it, which
		// would otherwise block writing into a pipe nobody reads.
		cancel()
	}
	dumpWaitErr := dump.Wait()
	pos, found := sniff.position()
	coords, coordsFound := sniff.coordinates()
	var scanned BinlogCoordinates
	var changedErr error
	switch {
	case copyErr != nil:
	case dumpWaitErr != nil:
		cancel()
	case !found:
		cancel()
	case !coordsFound:
		cancel()
	default:
		// A schema or account change after the snapshot may be in the copy already
		// (the dump reads each table's definition when it reaches the table): then the
		// position is never set and the copy is refused.
		if scanned, changedErr = o.changesDuring(ctx, coords); changedErr != nil {
			break
		}
		// The position, in the loader's own session, after everything the dump held.
		_, copyErr = io.WriteString(loadIn, "SET GLOBAL gtid_slave_pos = '"+pos+"';\n")
	}
	closeErr := loadIn.Close()
	loadWaitErr := load.Wait()

	res := CopyResult{GTIDPosition: pos, Bytes: n, Took: time.Since(began), ScannedTo: scanned}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("the copy was stopped: %w", err)
	}
	switch {
	case copyErr != nil && loadWaitErr != nil:
		// The loader stopped taking the stream: its error, not the dump's (killed after it).
		return res, fmt.Errorf("loading the copy: mariadb failed: %w: %s", loadWaitErr, loadErr.String())
	case dumpWaitErr != nil:
		return res, fmt.Errorf("copying from the source: mariadb-dump failed: %w: %s", dumpWaitErr, dumpErr.String())
	case loadWaitErr != nil:
		return res, fmt.Errorf("loading the copy: mariadb failed: %w: %s", loadWaitErr, loadErr.String())
	case copyErr != nil:
		return res, fmt.Errorf("streaming the copy: %w", copyErr)
	case closeErr != nil:
		return res, fmt.Errorf("streaming the copy: %w", closeErr)
	case !found:
		return res, errors.New("the dump carried no GTID position (is the source's binary log on?): nothing to replicate from")
	case !coordsFound:
		return res, errors.New("the dump carried no binary log coordinates: the changes made during the copy cannot be checked")
	case changedErr != nil:
		return res, changedErr
	}
	return res, nil
}

// changesDuring checks the source's binary log from the copy's snapshot (at) to its end for
// changes of schemas or accounts (ChangesSince): an ErrChangedDuringCopy error lists them.
func (o *LogicalCopyOptions) changesDuring(ctx context.Context, at BinlogCoordinates) (BinlogCoordinates, error) {
	db, err := o.Source.Open()
	if err != nil {
		return at, fmt.Errorf("reading the source's binary log after the copy: %w", err)
	}
	defer db.Close()
	changes, scanned, err := ChangesSince(ctx, db, at)
	if err != nil {
		return at, fmt.Errorf("checking the source's binary log for changes made during the copy: %w", err)
	}
	if len(changes) > 0 {
		return scanned, ChangedDuringCopyError(changes)
	}
	return scanned, nil
}

func lookTool(path, name string) (string, error) {
	if path != "" {
		return path, nil
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("finding %s: %w", name, err)
	}
	return p, nil
}

// gtidSniffer watches the dump for the comment --master-data=2 --gtid writes with the
// snapshot's position, "-- SET GLOBAL gtid_slave_pos='…';", looking only at lines that
// start with "-- " (the data lines can be megabytes long).
type gtidSniffer struct {
	midLine bool   // the last byte written was not a newline
	line    []byte // the current comment line, while it is one
	inLine  bool   // the current line is being kept
	pos     string
	found   bool
	// coords is the snapshot's binary log file and offset.
	coords      BinlogCoordinates
	coordsFound bool
}

// gtidComment matches the comment; the position is MariaDB's domain-server-sequence list
// (empty when the source has written no transaction).
var gtidComment = regexp.MustCompile(`^-- SET GLOBAL gtid_slave_pos='([0-9]+-[0-9]+-[0-9]+(?:,[0-9]+-[0-9]+-[0-9]+)*)?';\s*$`)

// coordinatesComment matches the snapshot's binary log coordinates, which --master-data=2
// writes as a comment too.
var coordinatesComment = regexp.MustCompile(`^-- CHANGE MASTER TO MASTER_LOG_FILE='([^']+)', MASTER_LOG_POS=([0-9]+);\s*$`)

// maxCommentLine bounds a kept comment line.
const maxCommentLine = 64 << 10

func (s *gtidSniffer) Write(p []byte) (int, error) {
	for _, b := range p {
		if !s.midLine {
			s.line, s.inLine = s.line[:0], true
		}
		if s.inLine {
			s.line = append(s.line, b)
			if len(s.line) == 3 && !bytes.Equal(s.line, []byte("-- ")) || len(s.line) > maxCommentLine {
				s.inLine = false
			}
		}
		s.midLine = b != '\n'
		if b == '\n' && s.inLine {
			if m := gtidComment.FindSubmatch(s.line); m != nil {
				s.pos, s.found = string(m[1]), true
			}
			if m := coordinatesComment.FindSubmatch(s.line); m != nil {
				if p, err := strconv.ParseUint(string(m[2]), 10, 64); err == nil {
					s.coords, s.coordsFound = BinlogCoordinates{File: string(m[1]), Pos: p}, true
				}
			}
			s.inLine = false
		}
	}
	return len(p), nil
}

func (s *gtidSniffer) position() (string, bool) { return s.pos, s.found }

func (s *gtidSniffer) coordinates() (BinlogCoordinates, bool) { return s.coords, s.coordsFound }

// progressWriter counts bytes for Progress.
type progressWriter struct {
	n        int64
	progress func(int64)
}

func (w *progressWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	if w.progress != nil {
		w.progress(w.n)
	}
	return len(p), nil
}

// tail keeps the last lines a tool wrote to its standard error, for an error message.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

const tailBytes = 4 << 10

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > tailBytes {
		t.buf = t.buf[len(t.buf)-tailBytes:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}
