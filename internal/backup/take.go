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

	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// TakeOptions configures Take.
type TakeOptions struct {
	// Prefix is the backup's key prefix in the store, e.g. "ns/cluster/backup-name/"; a
	// trailing '/' is added when missing. Take refuses a prefix that holds a manifest already.
	Prefix string

	// Name, Namespace, Cluster, SourceInstance and SourceRole ("primary" or "replica") are
	// copied into the manifest.
	Name           string
	Namespace      string
	Cluster        string
	SourceInstance string
	SourceRole     string
	// Flavor of the server: "mariadb" (the default, and the only one Take supports so far).
	Flavor string

	// Socket is the local server's Unix socket. When empty, Host and Port (default 3306) are
	// used over TCP.
	Socket string
	Host   string
	Port   int
	// User and Password of an account with the privileges mariadb-backup needs (RELOAD,
	// PROCESS, LOCK TABLES, BINLOG MONITOR, SLAVE MONITOR for --slave-info). The password
	// never appears on a command line: it is passed in a 0600 option file in TmpDir, removed
	// when Take returns.
	User     string
	Password string

	// DataDir is the server's datadir, which mariadb-backup reads (--datadir). Required.
	DataDir string
	// DefaultsFile, when set, is the server's option file, the only one mariadb-backup reads:
	// the password file then includes it (!include) and is given as --defaults-file. When
	// empty, mariadb-backup reads the usual option files and the password file is given as
	// --defaults-extra-file. Either way it is the first option, as mariadb-backup demands.
	DefaultsFile string
	// Tool is the path of mariadb-backup; by default it is looked up on PATH.
	Tool string
	// TmpDir holds the password file and mariadb-backup's --tmpdir and --target-dir (which
	// stays empty when streaming). Default os.TempDir(). Nothing of the backup is staged there.
	TmpDir string
	// Progress, when set, is called with the number of bytes stored so far each time the
	// upload accepts data. It is called from one goroutine at a time, not necessarily the
	// caller's, and must return quickly.
	Progress func(storedBytes int64)
	// ExtraArgs are appended to mariadb-backup's arguments, e.g. "--parallel=4".
	ExtraArgs []string
}

// Take runs `mariadb-backup --backup --stream=mbstream --slave-info` against the local server
// and streams its output, zstd-compressed and sha256-checksummed on the fly, into the object
// opts.Prefix+DataObjectKey of store; nothing is staged on disk and memory use does not
// depend on the size of the backup. When the tool succeeded and the object is committed,
// Take writes the manifest, the last object of the backup, and returns it.
//
// On any failure (the tool exits non-zero or without "completed OK!", the upload fails, ctx
// is done) the upload is aborted, no manifest is written and the error says what failed,
// quoting the tool's last lines of output.
func Take(ctx context.Context, opts TakeOptions, store objectstore.Store) (*Manifest, error) {
	if err := opts.defaults(); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	prefix := normPrefix(opts.Prefix)
	where := objectstore.Locate(store, prefix)
	tool, err := findTool(opts.Tool, "mariadb-backup")
	if err != nil {
		return nil, fmt.Errorf("backup %s: %w", where, err)
	}
	switch _, err := store.Stat(ctx, prefix+ManifestKey); {
	case err == nil:
		return nil, fmt.Errorf("backup %s exists already (it has a manifest)", where)
	case !errors.Is(err, objectstore.ErrNotFound):
		return nil, fmt.Errorf("backup %s: checking for an existing manifest: %w", where, err)
	}
	m := &Manifest{
		Format: ManifestFormat, Name: opts.Name, Namespace: opts.Namespace, Cluster: opts.Cluster,
		SourceInstance: opts.SourceInstance, SourceRole: opts.SourceRole, Flavor: opts.Flavor,
		Compression: CompressionZstd,
	}
	if m.Tool, err = toolVersion(ctx, tool); err != nil {
		return nil, fmt.Errorf("backup %s: %w", where, err)
	}

	obj, report, err := opts.stream(ctx, tool, store, prefix+DataObjectKey, m)
	if err != nil {
		return nil, fmt.Errorf("backup %s: %w", where, err)
	}
	m.GTIDPosition, m.ReplicaGTIDPosition = report.GTID, report.ReplicaGTID
	m.BinlogFile, m.BinlogPosition = report.BinlogFile, report.BinlogPosition
	m.Objects = []Object{obj}
	// Asked after the tool, so that a connection problem is reported by the tool, in its words.
	m.ServerVersion, err = opts.serverVersion(ctx)
	if err != nil && report.ServerVersion != "" && ctx.Err() == nil {
		m.ServerVersion, err = report.ServerVersion, nil
	}
	if err == nil {
		if err = ctx.Err(); err != nil {
			err = fmt.Errorf("cancelled before the manifest was written: %w", err)
		} else if err = writeManifest(ctx, store, prefix, m); err != nil {
			err = fmt.Errorf("writing the manifest: %w", err)
		}
	}
	if err != nil {
		// Without a manifest the data object is garbage: remove it, even though ctx is done.
		// The manifest goes first, in case a failed Commit did store it.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if delErr := store.Delete(dctx, prefix+ManifestKey, prefix+DataObjectKey); delErr != nil {
			err = errors.Join(err, fmt.Errorf("removing %s: %w", DataObjectKey, delErr))
		}
		return nil, fmt.Errorf("backup %s: %w", where, err)
	}
	return m, nil
}

func (o *TakeOptions) defaults() error {
	if o.Flavor == "" {
		o.Flavor = "mariadb"
	}
	if o.Flavor != "mariadb" {
		return fmt.Errorf("flavor %q: physical backups are implemented for mariadb only", o.Flavor)
	}
	if o.DataDir == "" {
		return errors.New("TakeOptions.DataDir is required")
	}
	if o.User == "" {
		return errors.New("TakeOptions.User is required")
	}
	if o.Socket == "" && o.Host == "" {
		return errors.New("TakeOptions: Socket or Host is required")
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
// mariadb-backup gets. Take falls back on the version the tool printed when this fails.
func (o *TakeOptions) serverVersion(ctx context.Context) (string, error) {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd = o.User, o.Password
	if o.Socket != "" {
		cfg.Net, cfg.Addr = "unix", o.Socket
	} else {
		cfg.Net, cfg.Addr = "tcp", net.JoinHostPort(o.Host, strconv.Itoa(o.Port))
	}
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = 10*time.Second, 30*time.Second, 30*time.Second
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return "", err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	var v string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
		return "", fmt.Errorf("SELECT VERSION() on %s: %w", cfg.Addr, err)
	}
	return v, nil
}

// args returns mariadb-backup's arguments for a run that reads its password from pwFile.
func (o *TakeOptions) args(pwFile, targetDir string) []string {
	first := "--defaults-extra-file=" + pwFile
	if o.DefaultsFile != "" {
		first = "--defaults-file=" + pwFile // which includes DefaultsFile
	}
	a := []string{first,
		"--backup", "--stream=mbstream", "--slave-info",
		"--target-dir=" + targetDir, "--tmpdir=" + o.TmpDir, "--datadir=" + o.DataDir, "--user=" + o.User}
	// A [client] host in an option file would make the client ignore --socket: host
	// "localhost" means the socket (--protocol=socket with an IP host is refused).
	if o.Socket != "" {
		a = append(a, "--host=localhost", "--socket="+o.Socket)
	} else {
		a = append(a, "--protocol=tcp", "--host="+o.Host, "--port="+strconv.Itoa(o.Port))
	}
	return append(a, o.ExtraArgs...)
}

// stream runs the tool into the object key and commits it; it fills m's StartTime and
// EndTime.
func (o *TakeOptions) stream(ctx context.Context, tool string, store objectstore.Store, key string, m *Manifest) (obj Object, report toolReport, err error) {
	pwFile, err := writePasswordFile(o.TmpDir, o.Password, o.DefaultsFile)
	if err != nil {
		return obj, report, fmt.Errorf("writing the password file in %s: %w", o.TmpDir, err)
	}
	defer os.Remove(pwFile)
	targetDir, err := os.MkdirTemp(o.TmpDir, ".dolphin-backup-target-")
	if err != nil {
		return obj, report, err
	}
	defer os.RemoveAll(targetDir)

	up, err := store.Create(ctx, key)
	if err != nil {
		return obj, report, fmt.Errorf("creating %s: %w", key, err)
	}
	committed := false
	defer func() {
		if !committed {
			if abortErr := up.Abort(); abortErr != nil {
				err = errors.Join(err, fmt.Errorf("aborting the upload of %s: %w", key, abortErr))
			}
		}
	}()

	runCtx, kill := context.WithCancel(ctx)
	defer kill()
	cmd := exec.CommandContext(runCtx, tool, o.args(pwFile, targetDir)...)
	cmd.WaitDelay = waitDelay
	stderr := &toolOutput{onLine: report.line}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return obj, report, err
	}
	stored := newDigest()
	sw := &storeWriter{w: up, d: stored, progress: o.Progress}
	enc, err := newEncoder(sw)
	if err != nil {
		return obj, report, err
	}
	raw := &countWriter{w: enc}

	m.StartTime = time.Now().UTC().Truncate(time.Second)
	if err := cmd.Start(); err != nil {
		enc.Close()
		return obj, report, fmt.Errorf("starting %s: %w", tool, err)
	}
	_, copyErr := io.CopyBuffer(raw, stdout, make([]byte, copyBuffer))
	if copyErr != nil {
		kill() // the upload failed or ctx is done: stop the tool, then let it exit
		_, _ = io.Copy(io.Discard, stdout)
	}
	closeErr := enc.Close()
	waitErr := cmd.Wait()
	stderr.flush()
	m.EndTime = time.Now().UTC().Truncate(time.Second)

	switch {
	case ctx.Err() != nil:
		return obj, report, fmt.Errorf("cancelled while mariadb-backup was running: %w", ctx.Err())
	case sw.failure() != nil:
		return obj, report, fmt.Errorf("uploading %s: %w (mariadb-backup was stopped)", key, sw.failure())
	case waitErr != nil:
		return obj, report, exitError("mariadb-backup", waitErr, stderr)
	case copyErr != nil:
		return obj, report, fmt.Errorf("reading mariadb-backup's output: %w", copyErr)
	case closeErr != nil:
		return obj, report, fmt.Errorf("compressing %s: %w", key, closeErr)
	case !report.Completed:
		return obj, report, exitError("mariadb-backup", fmt.Errorf("it exited 0 without printing %q", completedLine), stderr)
	case !report.HasBinlog:
		return obj, report, exitError("mariadb-backup", errors.New("it printed no binlog position (is the binary log enabled?)"), stderr)
	case raw.n == 0:
		return obj, report, exitError("mariadb-backup", errors.New("it wrote nothing to its output"), stderr)
	}
	if _, err := normalizeGTID(report.GTID); err != nil {
		return obj, report, fmt.Errorf("mariadb-backup's position: %w", err)
	}

	info, err := up.Commit()
	committed = true // a failed Commit leaves no object either
	if err != nil {
		return obj, report, fmt.Errorf("committing %s: %w", key, err)
	}
	if info.Size != 0 && info.Size != stored.n {
		return obj, report, fmt.Errorf("%s: the store holds %d bytes, %d were written", key, info.Size, stored.n)
	}
	return Object{Key: DataObjectKey, Size: stored.n, SHA256: stored.sum(), RawSize: raw.n}, report, nil
}
