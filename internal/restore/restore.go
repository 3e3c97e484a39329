// Package restore fills an instance's empty data directory from a backup: the in-pod side of
// creating a cluster from a backup (spec.bootstrap). An init container of every instance pod
// runs it (`dolphin restore`) after the per-instance config is written and before the server
// starts.
//
// IntoDataDir streams the backup out of the store into a staging directory inside the data
// volume, verifying every object's sha256 as it goes (backup.Restore), moves the prepared
// files into the data directory, and then, on a temporary server that neither listens on the
// network nor writes to its binary log, makes the data the new cluster's: its operator account
// and root password, no replication settings of the source, and the GTID state of the backup.
// The markers it writes last make it idempotent and safe to retry; see IntoDataDir.
package restore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/nosync"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// Names of the files and directories IntoDataDir keeps at the top of the data directory.
const (
	// InitializedMarker is written last, once the data directory holds a complete, fixed-up
	// restore; the instance init script writes it too when it initialises an empty data
	// directory. A data directory with it is never touched.
	InitializedMarker = ".dolphin-initialized"
	// RestoredMarker records what was restored (JSON, see Marker). It is written after the
	// fix-up and before InitializedMarker.
	RestoredMarker = ".dolphin-restored"
	// ReseedMarker, written by the agent when the operator decided to discard the instance's
	// data (an errant replica, one whose primary purged the binlogs it needs), makes the next
	// seed container treat the directory as uninitialised: it is emptied and seeded again.
	ReseedMarker = ".dolphin-reseed"
	// KeptPrefix begins the names of the copies of transactions kept before a re-clone
	// (binlog.Keep), files in the data directory's root: the server does not take them for
	// databases, backups and clones do not copy them, and emptying the directory for a
	// re-clone or a restore leaves them (docs/design/0044).
	KeptPrefix = "dolphin-kept-"
	// StagingDir is where the backup is extracted and prepared, inside the data volume so
	// that moving the result into place is a rename.
	StagingDir = ".dolphin-restore"
	// lostAndFound is made by mkfs on the root of a volume; it is never removed.
	lostAndFound = "lost+found"
)

// Flavors accepted in Options.Flavor.
const (
	FlavorMariaDB = "mariadb"
	FlavorMySQL   = "mysql"
)

// ErrNotSupported is wrapped by the error IntoDataDir returns for a flavor it cannot restore
// yet (MySQL).
var ErrNotSupported = errors.New("not supported yet")

// Default timeouts of the temporary server.
const (
	DefaultStartTimeout = 10 * time.Minute
	DefaultStopTimeout  = 10 * time.Minute
)

// Options configures IntoDataDir.
type Options struct {
	// Store is where the backup is: an S3 bucket or a directory (see objectstore.New).
	Store objectstore.Config
	// Path is the backup's prefix inside the store, the one that holds its manifest.json,
	// for example "ns/cluster/backup-name/". Required.
	Path string
	// DataDir is the server's data directory, the root of the instance's data volume, e.g.
	// /var/lib/mysql. It is created when missing. Required.
	DataDir string
	// DefaultsFile is the server's option file, e.g. /etc/mysql/dolphin/my.cnf: the temporary
	// server and mariadb-backup --prepare read it, and nothing else (--defaults-file).
	// Required.
	DefaultsFile string
	// ServerBinary is mariadbd; by default it is looked up on PATH, /usr/sbin and /usr/bin.
	ServerBinary string
	// BackupTool and MBStream are mariadb-backup and mbstream; by default backup.Restore looks
	// them up on PATH.
	BackupTool, MBStream string
	// Flavor of the cluster: "mariadb" (the default). "mysql" fails with ErrNotSupported.
	Flavor string
	// OperatorUser and OperatorPassword are Dolphin's operator account of the NEW cluster.
	// The account is replaced ('%', ALL PRIVILEGES ON *.* WITH GRANT OPTION, this password):
	// the source cluster's password for it stops working. Both required.
	OperatorUser     string
	OperatorPassword string
	// RootPassword becomes root@localhost's password (the account is created when the backup
	// has none). Required.
	RootPassword string
	// TmpDir holds the temporary server's socket (restore.sock) and pid file (restore.pid);
	// default os.TempDir(). The socket path must stay under 108 bytes.
	TmpDir string
	// UseMemory is mariadb-backup --prepare's --use-memory, e.g. "256M"; empty leaves the
	// tool's default.
	UseMemory string
	// StartTimeout bounds how long the temporary server may take to accept connections,
	// StopTimeout how long its clean shutdown may take before it is killed. Defaults
	// DefaultStartTimeout and DefaultStopTimeout.
	StartTimeout, StopTimeout time.Duration
	// Progress, when set, is called with the bytes read from the store so far (FromPeer:
	// received from the peer), from the goroutine that reads them.
	Progress func(bytes int64)
	// Log, when set, receives progress messages (never passwords), one call at a time.
	// Logger, when set instead, gets them at V(0). Neither: silence.
	Log    func(format string, args ...any)
	Logger logr.Logger
	// PointInTime, when set, replays the binlog archive after the backup up to a position
	// (IntoDataDir only).
	PointInTime *PointInTime
}

// Result says what IntoDataDir did.
type Result struct {
	// Skipped is true when the data directory was initialised already (it holds
	// InitializedMarker) and was left untouched.
	Skipped bool
	// Manifest of the backup restored; nil when Skipped or cloned.
	Manifest *backup.Manifest
	// GTIDPosition the restored server continues from: the backup's (or the peer's), which
	// is now its gtid_binlog_pos, gtid_slave_pos and gtid_current_pos.
	GTIDPosition string
	// Source says where the data came from, as RestoredMarker records it: "backup <where>"
	// or "clone from <url>"; empty when Skipped.
	Source string
}

// IntoDataDir restores the backup opts.Path of opts.Store into opts.DataDir, unless DataDir
// holds InitializedMarker: then the instance has its data already and nothing is touched
// (Result.Skipped), whatever the other options say.
//
// Otherwise DataDir holds no complete data and may only hold leftovers of a failed attempt
// (a crash, an error, a corrupt backup): everything in it except lost+found is removed first.
// The backup is extracted into StagingDir with backup.Restore, which checks every object's
// size and sha256 while reading it, and prepared; its entries are then renamed into DataDir
// and StagingDir is removed. A temporary mariadbd on DataDir, without networking, grant
// tables or replication threads, then replaces the operator account and root's password,
// drops every replication connection of the source and sets the GTID state to the backup's
// position, all without writing to the binary log (RESET MASTER leaves it empty but for
// that state); it is shut down cleanly. Last RestoredMarker (what was restored) and then
// InitializedMarker are written. A crash at any point before that leaves a directory that
// the next attempt empties and restores again; one between the two markers is finished by
// the next attempt, which only writes InitializedMarker.
//
// A corrupt backup fails with an error wrapping backup.ErrCorrupt that names the object, and
// leaves no restored data; so does any other failure. Errors say what to do.
func IntoDataDir(ctx context.Context, opts Options) (Result, error) {
	mysql := fmt.Errorf("restoring a MySQL cluster from a backup is %w: only MariaDB clusters can be bootstrapped from a backup", ErrNotSupported)
	return opts.seed(ctx, "restore", mysql, []field{{"the backup's path", opts.Path}}, func(ctx context.Context) (Marker, error) {
		m, where, err := opts.extract(ctx)
		if err != nil {
			return Marker{}, err
		}
		return Marker{Source: "backup " + where, Path: opts.Path, Store: where, Name: m.Name,
			GTIDPosition: m.GTIDPosition, Manifest: m}, nil
	})
}

// field is an option's name and value, for the list of missing ones.
type field struct{ name, v string }

// seed is what IntoDataDir and FromPeer share. Unless DataDir is initialised already, it
// checks the options (mysql is the error for the MySQL flavor; required are options of the
// caller's that must be set), empties DataDir of a failed attempt's leftovers and calls fill,
// which puts the prepared data into DataDir and describes it; then it fixes the data up at
// the marker's GTID position and writes the markers. what names the operation in errors.
func (o *Options) seed(ctx context.Context, what string, mysql error, required []field, fill func(context.Context) (Marker, error)) (Result, error) {
	if o.DataDir == "" {
		return Result{}, fmt.Errorf("%s: no data directory given", what)
	}
	dataDir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", what, err)
	}
	o.DataDir = dataDir
	o.Log = serialized(o.logf())
	log := o.Log
	switch _, err := os.Stat(filepath.Join(dataDir, InitializedMarker)); {
	case err == nil:
		log("%s holds %s: the instance has its data already, nothing to restore", dataDir, InitializedMarker)
		return Result{Skipped: true}, nil
	case !errors.Is(err, os.ErrNotExist):
		return Result{}, fmt.Errorf("%s: checking %s: %w", what, dataDir, err)
	}
	if err := o.check(mysql, required); err != nil {
		return Result{}, fmt.Errorf("%s: %w", what, err)
	}
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return Result{}, fmt.Errorf("%s: creating the data directory: %w", what, err)
	}

	// Restored and fixed up, but the last marker is missing: only that is left to do.
	if mk, err := readMarker(dataDir); err == nil {
		log("%s says %s was restored already (at %s); writing %s", RestoredMarker, mk.describe(),
			mk.RestoredAt.Format(time.RFC3339), InitializedMarker)
		if err := writeInitialized(dataDir, mk); err != nil {
			return Result{}, fmt.Errorf("%s: %w", what, err)
		}
		return Result{Manifest: mk.Manifest, GTIDPosition: mk.GTIDPosition, Source: mk.Source}, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return Result{}, fmt.Errorf("%s: %w; remove the file (or the whole data volume) to restore again", what, err)
	}

	removed, err := removeLeftovers(dataDir)
	if err != nil {
		return Result{}, fmt.Errorf("%s: removing what a failed attempt left in %s: %w", what, dataDir, err)
	}
	if len(removed) > 0 {
		log("removed what a failed attempt left in %s (it had no %s): %s", dataDir, InitializedMarker, summarize(removed))
	}

	mk, err := fill(ctx)
	if err != nil {
		return Result{}, err
	}
	if mk.GTIDPosition, err = o.fixUp(ctx, mk.Manifest); err != nil {
		return Result{}, fmt.Errorf("%s: fixing up the restored data: %w; the next attempt starts over", what, err)
	}
	mk.RestoredAt = time.Now().UTC().Truncate(time.Second)
	// The markers say the data is complete: it must be on disk before they are.
	if err := nosync.SyncFilesystem(dataDir); err != nil {
		return Result{}, fmt.Errorf("%s: %w; the next attempt starts over", what, err)
	}
	if err := writeMarkers(dataDir, mk); err != nil {
		return Result{}, fmt.Errorf("%s: %w", what, err)
	}
	log("%s complete: %s continues from GTID position %q", what, dataDir, mk.GTIDPosition)
	return Result{Manifest: mk.Manifest, GTIDPosition: mk.GTIDPosition, Source: mk.Source}, nil
}

// check validates the options and fills the defaults. mysql is the error for the MySQL
// flavor; required are the caller's own options that must be set.
func (o *Options) check(mysql error, required []field) error {
	switch o.Flavor {
	case "", FlavorMariaDB:
		o.Flavor = FlavorMariaDB
	case FlavorMySQL:
		return mysql
	default:
		return fmt.Errorf("unknown flavor %q: want %q", o.Flavor, FlavorMariaDB)
	}
	var missing []string
	for _, f := range append(required,
		field{"the server's option file", o.DefaultsFile},
		field{"the operator user", o.OperatorUser}, field{"the operator password", o.OperatorPassword},
		field{"the root password", o.RootPassword},
	) {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s", joinList(missing))
	}
	if o.TmpDir == "" {
		o.TmpDir = os.TempDir()
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = DefaultStopTimeout
	}
	return nil
}

// logf returns the function progress messages go to.
func (o *Options) logf() func(string, ...any) {
	switch {
	case o.Log != nil:
		return o.Log
	case o.Logger.GetSink() != nil:
		l := o.Logger
		return func(format string, args ...any) { l.Info(fmt.Sprintf(format, args...)) }
	default:
		return func(string, ...any) {}
	}
}

// serialized makes log safe to call from several goroutines (the temporary server's output
// is logged from another one), one call at a time.
func serialized(log func(string, ...any)) func(string, ...any) {
	var mu sync.Mutex
	return func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		log(format, args...)
	}
}

// joinList joins "a", "b" and "c" as "a, b and c".
func joinList(s []string) string {
	switch len(s) {
	case 0:
		return ""
	case 1:
		return s[0]
	}
	out := s[0]
	for _, x := range s[1 : len(s)-1] {
		out += ", " + x
	}
	return out + " and " + s[len(s)-1]
}
