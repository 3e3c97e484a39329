package backup

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dolphin-operator/dolphin/internal/engineupgrade"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// TakeOptions configures Take.
type TakeOptions struct {
	// Prefix is the backup's key prefix in the store, e.g. "ns/cluster/backup-name/"; a
	// trailing '/' is added when missing. Take refuses a prefix that holds a manifest already.
	Prefix string

	// Name, Namespace, Cluster, SourceInstance and SourceRole ("primary", "replica", or
	// "external" for a server Dolphin does not run, `dolphin backup`) are
	// copied into the manifest.
	Name           string
	Namespace      string
	Cluster        string
	SourceInstance string
	SourceRole     string
	// Flavor of the server: "mariadb" (the default) or "mysql" (xtrabackup; proven by
	// exact-command tests only, see xtrabackup.go).
	Flavor string

	// Socket is the local server's Unix socket. When empty, Host and Port (default 3306) are
	// used over TCP.
	Socket string
	Host   string
	Port   int
	// User and Password of an account with the privileges mariadb-backup needs (RELOAD,
	// PROCESS, LOCK TABLES, BINLOG MONITOR, SLAVE MONITOR for --slave-info), and on a
	// replica REPLICATION SLAVE ADMIN (see StreamOptions.User). The password never appears on
	// a command line: it is passed in a 0600 option file in TmpDir, removed when Take returns.
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
	// Log, when set, receives what Take does on its own (a new attempt, see ErrRedoLogCopy)
	// and what did not go as it should besides the copy (StreamOptions.Log).
	Log func(format string, args ...any)

	positionAt      positionFunc    // see StreamOptions
	serialApplyHook serialApplyFunc // see StreamOptions
}

// takeAttempts bounds the runs of the tool in one Take when it fails with ErrRedoLogCopy.
const takeAttempts = 3

func (o *TakeOptions) logf(format string, args ...any) {
	if o.Log != nil {
		o.Log(format, args...)
	}
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
	name, _, err := backupTools(opts.Flavor)
	if err != nil {
		return nil, fmt.Errorf("backup %s: %w", where, err)
	}
	tool, err := findTool(opts.Tool, name)
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

	// Read before the copy and again after it: an upgrade running meanwhile makes the two differ.
	record := engineupgrade.TransferableRecord(opts.DataDir)
	var obj Object
	var report toolReport
	for attempt := 1; ; attempt++ {
		obj, report, err = opts.stream(ctx, tool, store, prefix+DataObjectKey, m)
		if err == nil || !errors.Is(err, ErrRedoLogCopy) || attempt == takeAttempts || ctx.Err() != nil {
			break
		}
		opts.logf("backup %s: attempt %d of %d: %v; trying again", where, attempt, takeAttempts, err)
	}
	if err != nil {
		return nil, fmt.Errorf("backup %s: %w", where, err)
	}
	m.GTIDPosition, m.ReplicaGTIDPosition = report.GTID, report.ReplicaGTID
	m.BinlogFile, m.BinlogPosition = report.BinlogFile, report.BinlogPosition
	m.Objects = []Object{obj}
	if record != "" && record == engineupgrade.TransferableRecord(opts.DataDir) {
		m.UpgradeRecord = record
	}
	// Asked after the tool, so that a connection problem is reported by the tool, in its words.
	so := opts.streamOptions()
	m.ServerVersion, err = so.serverVersion(ctx)
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
		o.Flavor = FlavorMariaDB
	}
	so := o.streamOptions()
	if err := so.defaults(); err != nil {
		return err
	}
	o.Port, o.TmpDir, o.DefaultsFile = so.Port, so.TmpDir, so.DefaultsFile
	return nil
}

// streamOptions are the options of the tool's run.
func (o *TakeOptions) streamOptions() StreamOptions {
	return StreamOptions{
		Socket: o.Socket, Host: o.Host, Port: o.Port, User: o.User, Password: o.Password,
		DataDir: o.DataDir, DefaultsFile: o.DefaultsFile, Flavor: o.Flavor, Tool: o.Tool, TmpDir: o.TmpDir,
		ExtraArgs: o.ExtraArgs, Progress: o.Progress, Log: o.Log, positionAt: o.positionAt, serialApplyHook: o.serialApplyHook,
	}
}

// stream runs the tool into the object key and commits it; it fills m's StartTime and
// EndTime.
func (o *TakeOptions) stream(ctx context.Context, tool string, store objectstore.Store, key string, m *Manifest) (obj Object, report toolReport, err error) {
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

	stored := objectstore.NewDigest()
	sw := &storeWriter{w: up, d: stored, progress: o.Progress}
	so := o.streamOptions()
	run, err := so.run(ctx, tool, sw, "uploading "+key)
	m.StartTime, m.EndTime = run.start, run.end
	if err != nil {
		return obj, run.report, err
	}

	info, err := up.Commit()
	committed = true // a failed Commit leaves no object either
	if err != nil {
		return obj, run.report, fmt.Errorf("committing %s: %w", key, err)
	}
	if info.Size != 0 && info.Size != stored.Size() {
		return obj, run.report, fmt.Errorf("%s: the store holds %d bytes, %d were written", key, info.Size, stored.Size())
	}
	return Object{Key: DataObjectKey, Size: stored.Size(), SHA256: stored.SHA256(), RawSize: run.raw}, run.report, nil
}

// args returns mariadb-backup's arguments for a run that reads its password from pwFile
// (StreamOptions.args with these options).
func (o *TakeOptions) args(pwFile, targetDir string) []string {
	so := o.streamOptions()
	return so.args(pwFile, targetDir)
}
