package restore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// Restore verification: proof that a backup can actually be restored. Verify restores a backup
// into a throwaway data directory exactly as IntoDataDir does (same store handling, sha256
// checked while reading, prepared), starts a temporary server on it and checks every table,
// then throws everything away. It never writes to the store.

// Names inside VerifyOptions.ScratchDir.
const (
	// VerifyMarker is written first into the scratch directory: a non-empty scratch
	// directory that holds it is what an earlier, interrupted Verify left, which Verify may
	// remove; one without it is refused.
	VerifyMarker = ".dolphin-verify"
	// verifyConfig is the temporary server's option file (and mariadb-backup --prepare's).
	verifyConfig = "verify.cnf"
	// verifyDataDir is the throwaway data directory.
	verifyDataDir = "data"
	// verifyBinlog is the binary log's base name inside the throwaway data directory (only
	// written when an archive is replayed).
	verifyBinlog = "verify-bin"
	// verifyServerID is the temporary server's server_id when it writes a binary log: a
	// replayed transaction keeps its own server id, so it only has to be non-zero.
	verifyServerID = "4000000001"
	// backupConfig is the option file mariadb-backup writes into every backup: the InnoDB
	// settings the data files were written with.
	backupConfig = "backup-my.cnf"
)

// DefaultTableTimeout bounds CHECK TABLE and SELECT COUNT(*) of one table.
const DefaultTableTimeout = time.Hour

// systemSchemas are not checked: they are the server's own, and most are not even tables.
var systemSchemas = []string{"mysql", "sys", "performance_schema", "information_schema"}

// uncheckedEngines keep no data of their own in the data directory (or none at all): CHECK
// TABLE and COUNT(*) would test another server, or nothing. Their tables are listed in
// VerifyReport.SkippedTables.
var uncheckedEngines = map[string]bool{
	"BLACKHOLE": true, "FEDERATED": true, "CONNECT": true, "SPIDER": true,
}

// backupConfigKeys are the settings of backup-my.cnf the temporary server takes over: the
// data files' layout, without which InnoDB refuses them. Its innodb_log_file_size is not one:
// the prepared redo log is empty and the server resizes it to verifyLogFileSize.
var backupConfigKeys = []string{
	"innodb_page_size", "innodb_data_file_path", "innodb_undo_tablespaces", "innodb_checksum_algorithm",
}

// verifyLogFileSize is the temporary server's redo log: the checks write next to nothing, and
// the source's size (gigabytes, maybe) would only take room in the scratch directory.
const verifyLogFileSize = "32M"

// VerifyOptions configures Verify.
type VerifyOptions struct {
	// Store is where the backup is: an S3 bucket or a directory (see objectstore.New). It is
	// only read.
	Store objectstore.Config
	// Path is the backup's prefix inside the store, the one that holds its manifest.json.
	// Required.
	Path string
	// ScratchDir receives the throwaway data directory: it must be missing or empty (but
	// for lost+found, or what an earlier Verify left: see VerifyMarker). Everything Verify
	// puts there is removed when it returns, success or not; a directory it created is
	// removed too. It needs room for the whole restored data. Required.
	ScratchDir string
	// TmpDir holds a directory of the temporary server's socket, pid file and tmpdir,
	// removed when Verify returns; default os.TempDir(). Keep it short: the socket path
	// must stay under 108 bytes.
	TmpDir string
	// UseMemory is mariadb-backup --prepare's --use-memory and the temporary server's
	// innodb_buffer_pool_size, e.g. "256M"; empty leaves the defaults of both.
	UseMemory string
	// ServerBinary is mariadbd; by default it is looked up on PATH, /usr/sbin and /usr/bin.
	// BackupTool and MBStream are mariadb-backup and mbstream, by default found on PATH.
	ServerBinary, BackupTool, MBStream string
	// ServerOptions are extra [mysqld] lines of the temporary server's option file, "key" or
	// "key=value", written last so that they win: settings the data needs and that no backup
	// records, e.g. "lower_case_table_names=1" or "plugin_load_add=ha_rocksdb".
	ServerOptions []string
	// StartTimeout bounds how long the temporary server may take to accept connections,
	// StopTimeout how long its clean shutdown may take. Defaults DefaultStartTimeout and
	// DefaultStopTimeout.
	StartTimeout, StopTimeout time.Duration
	// TableTimeout bounds CHECK TABLE, and then SELECT COUNT(*), of each table. Default
	// DefaultTableTimeout.
	TableTimeout time.Duration
	// Log, when set, receives progress messages, one call at a time. Logger, when set
	// instead, gets them at V(0). Neither: silence.
	Log    func(format string, args ...any)
	Logger logr.Logger
	// Archive, when set, takes the check past the backup: the binlog archive is replayed onto
	// the restored data up to its end before the tables are checked.
	Archive *VerifyArchive
}

// VerifyReport is what Verify proved about a backup.
type VerifyReport struct {
	// Manifest of the backup verified.
	Manifest *backup.Manifest
	// GTIDPosition the restored data holds (see heldPosition): the manifest's, or further
	// for a backup taken before Dolphin recorded exact positions.
	GTIDPosition string
	// Tables is how many tables were checked (CHECK TABLE said OK), Rows how many rows they
	// hold in all (SELECT COUNT(*)).
	Tables int
	Rows   int64
	// SkippedTables are the tables, as `schema`.`table`, whose engine keeps no data in the
	// data directory (see uncheckedEngines): neither checked nor counted.
	SkippedTables []string
	// ArchiveReplayedTo is the GTID position the archive was replayed to (its end), and
	// ArchiveSegments how many segments that took; both empty when no archive was replayed.
	// ArchiveNote says why not when an archive was given but does not reach back to the
	// backup (archiving began after it, or nothing is archived).
	ArchiveReplayedTo string
	ArchiveSegments   int
	ArchiveNote       string
	// Duration of the whole verification, from reading the manifest to removing the data.
	Duration time.Duration
	// CheckedAt is when the verification completed (UTC, to the second).
	CheckedAt time.Time
}

// Verify proves that the backup opts.Path of opts.Store can be restored, and reports what the
// restored data holds.
//
// It restores the backup into a data directory in opts.ScratchDir the way IntoDataDir does:
// every object is streamed out of the store with its size and sha256 checked against the
// manifest (a mismatch fails with an error wrapping backup.ErrCorrupt that names the object),
// extracted and prepared with mariadb-backup. The prepared data's binlog info file must be at
// the manifest's binary log coordinates and not ahead of its GTIDPosition. A temporary mariadbd then starts on it with an option file of
// its own, the cluster's being unknown here: no networking, no grant tables, no replication
// threads, no events, no binary log (unless opts.Archive is replayed: see below), the InnoDB layout recorded in the backup's
// backup-my.cnf, then opts.ServerOptions. Every base table of every schema but mysql, sys,
// performance_schema and information_schema goes through CHECK TABLE, which must report
// nothing but OK, and SELECT COUNT(*). The server must then shut down cleanly.
//
// With opts.Archive, the binlog archive is replayed onto the data before the tables are
// checked, from the position the data holds to the archive's end (replayArchive): the server
// must land exactly there. An archive that does not reach back to the backup is noted in the
// report; a gap, a damaged segment or a failing transaction fails the check.
//
// Whatever happens, the temporary server is stopped and everything Verify put in
// opts.ScratchDir is removed before it returns. Errors name the failing object or tables and
// say what to do.
func Verify(ctx context.Context, opts VerifyOptions) (rep VerifyReport, err error) {
	began := time.Now()
	if opts.Path == "" {
		return rep, errors.New("verify: missing the backup's path")
	}
	if opts.ScratchDir == "" {
		return rep, errors.New("verify: missing the scratch directory")
	}
	scratch, err := filepath.Abs(opts.ScratchDir)
	if err != nil {
		return rep, fmt.Errorf("verify: %w", err)
	}
	opts.ScratchDir = scratch
	logOpts := Options{Log: opts.Log, Logger: opts.Logger}
	log := serialized(logOpts.logf())
	opts.Log = log
	if opts.TmpDir == "" {
		opts.TmpDir = os.TempDir()
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = DefaultStopTimeout
	}
	if opts.TableTimeout <= 0 {
		opts.TableTimeout = DefaultTableTimeout
	}
	for _, o := range opts.ServerOptions {
		if strings.TrimSpace(o) == "" || strings.ContainsAny(o, "\r\n") || strings.HasPrefix(strings.TrimSpace(o), "[") {
			return rep, fmt.Errorf("verify: server option %q: want one \"key\" or \"key=value\"", o)
		}
	}

	var where string // the backup's location, once the store is open
	created, err := claimScratch(scratch, log)
	if err != nil {
		return rep, fmt.Errorf("verify: %w", err)
	}
	defer func() {
		if rmErr := releaseScratch(scratch, created); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("verify: removing the restored data from %s: %w", scratch, rmErr))
			return
		}
		log("removed the restored data from %s", scratch)
		if err == nil {
			rep.CheckedAt = time.Now().UTC().Truncate(time.Second)
			rep.Duration = time.Since(began)
			log("verified %s: %d table(s) OK, %d row(s), GTID position %q, in %v",
				where, rep.Tables, rep.Rows, rep.GTIDPosition, rep.Duration.Round(time.Millisecond))
		}
	}()
	tmp, err := os.MkdirTemp(opts.TmpDir, "verify-")
	if err != nil {
		return rep, fmt.Errorf("verify: creating the temporary server's directory: %w", err)
	}
	defer os.RemoveAll(tmp)

	cnf := filepath.Join(scratch, verifyConfig)
	// mariadb-backup --prepare reads this file and the backup's own backup-my.cnf, nothing of
	// the pod's image.
	if err := os.WriteFile(cnf, []byte(configHeader+"[mysqld]\n"), 0o640); err != nil {
		return rep, fmt.Errorf("verify: %w", err)
	}
	ro := Options{
		Store: opts.Store, Path: opts.Path, DataDir: filepath.Join(scratch, verifyDataDir), DefaultsFile: cnf,
		ServerBinary: opts.ServerBinary, BackupTool: opts.BackupTool, MBStream: opts.MBStream,
		TmpDir: tmp, UseMemory: opts.UseMemory, StartTimeout: opts.StartTimeout, StopTimeout: opts.StopTimeout,
		Log: log,
	}
	if err := os.Mkdir(ro.DataDir, 0o750); err != nil {
		return rep, fmt.Errorf("verify: %w", err)
	}
	m, w, err := ro.extract(ctx)
	where = w
	if err != nil {
		return rep, fmt.Errorf("verify: %w", err)
	}
	rep.Manifest = m

	// backup.Restore checked the data's binlog info file against the manifest; checkTables
	// compares the manifest's position with what the data holds (heldPosition).
	rep.GTIDPosition = m.GTIDPosition

	conf, err := serverConfig(ro.DataDir, tmp, opts)
	if err != nil {
		return rep, fmt.Errorf("verify: %w", err)
	}
	if err := os.WriteFile(cnf, []byte(conf), 0o640); err != nil {
		return rep, fmt.Errorf("verify: %w", err)
	}
	log("the temporary server's option file %s: %s", cnf, settings(conf))
	if err := ro.checkTables(ctx, opts.TableTimeout, opts.Archive, &rep); err != nil {
		return rep, fmt.Errorf("verify: backup %s: %w", where, err)
	}
	return rep, nil // the deferred function completes rep
}

// configHeader starts the option file Verify writes.
const configHeader = "# Written by dolphin verify: the temporary server of a restore check, on a throwaway\n" +
	"# data directory. Nothing else is read (--defaults-file).\n"

// serverConfig returns the temporary server's option file: tempServerArgs add the data
// directory, socket, pid file, no networking, no grant tables, no replication threads and no
// events on the command line.
func serverConfig(dataDir, tmp string, opts VerifyOptions) (string, error) {
	var b strings.Builder
	b.WriteString(configHeader)
	b.WriteString("[mysqld]\n")
	layout, err := readBackupConfig(filepath.Join(dataDir, backupConfig))
	if err != nil {
		return "", err
	}
	if len(layout) > 0 {
		b.WriteString("# The InnoDB layout the data was written with (" + backupConfig + ").\n")
		for _, kv := range layout {
			b.WriteString(kv + "\n")
		}
	}
	if opts.Archive != nil {
		// The archive's transactions are replayed with their GTIDs: the binary log must be
		// on for the position to be checked (binlog.Replay).
		b.WriteString("# The binlog archive is replayed onto the data; its GTIDs go to this binary log.\n")
		b.WriteString("log_bin=" + filepath.Join(dataDir, verifyBinlog) + "\n")
		b.WriteString("server_id=" + verifyServerID + "\n")
	} else {
		b.WriteString("# Nothing of the check is logged or replicated.\n")
		b.WriteString("skip_log_bin\n")
	}
	b.WriteString("# It needs little memory.\n")
	b.WriteString("performance_schema=OFF\n")
	b.WriteString("innodb_log_file_size=" + verifyLogFileSize + "\n")
	if opts.UseMemory != "" {
		b.WriteString("innodb_buffer_pool_size=" + opts.UseMemory + "\n")
	}
	b.WriteString("tmpdir=" + tmp + "\n")
	if os.Geteuid() == 0 {
		b.WriteString("# Started as root, mariadbd refuses to run without user=root.\n")
		b.WriteString("user=root\n")
	}
	if len(opts.ServerOptions) > 0 {
		b.WriteString("# VerifyOptions.ServerOptions.\n")
		for _, o := range opts.ServerOptions {
			b.WriteString(strings.TrimSpace(o) + "\n")
		}
	}
	return b.String(), nil
}

// settings lists the settings of an option file on one line, without comments.
func settings(conf string) string {
	var out []string
	for l := range strings.Lines(conf) {
		if l = strings.TrimSpace(l); l != "" && l[0] != '#' {
			out = append(out, l)
		}
	}
	return strings.Join(out, " ")
}

// readBackupConfig returns the lines "key=value" of backupConfigKeys in the [mysqld] group of
// the backup's backup-my.cnf, in the file's order; none when there is no such file.
func readBackupConfig(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	group := ""
	for l := range strings.Lines(string(data)) {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || l[0] == '#' || l[0] == ';':
			continue
		case l[0] == '[':
			group = strings.TrimSpace(strings.Trim(l, "[]"))
			continue
		case group != "mysqld":
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		k = strings.ReplaceAll(strings.TrimSpace(k), "-", "_")
		if !ok || !slices.Contains(backupConfigKeys, k) {
			continue
		}
		out = append(out, k+"="+strings.TrimSpace(v))
	}
	return out, nil
}

// claimScratch makes dir an empty scratch directory holding VerifyMarker, and says whether it
// created dir. A non-empty dir is refused unless it holds VerifyMarker: then it holds what an
// earlier Verify left, which is removed.
func claimScratch(dir string, log func(string, ...any)) (created bool, err error) {
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return false, fmt.Errorf("creating the scratch directory: %w", err)
		}
		created = true
	case err != nil:
		return false, fmt.Errorf("the scratch directory: %w", err)
	default:
		var names []string
		marked := false
		for _, e := range ents {
			switch e.Name() {
			case lostAndFound:
				continue
			case VerifyMarker:
				marked = true
			}
			names = append(names, e.Name())
		}
		if len(names) > 0 && !marked {
			return false, fmt.Errorf("the scratch directory %s is not empty (it holds %s) and not an earlier verification's: give an empty or missing directory, everything in it is removed",
				dir, summarize(names))
		}
		if len(names) > 0 {
			if err := emptyScratch(dir); err != nil {
				return false, fmt.Errorf("removing what an earlier verification left in %s: %w", dir, err)
			}
			log("removed what an earlier verification left in %s: %s", dir, summarize(names))
		}
	}
	if err := os.WriteFile(filepath.Join(dir, VerifyMarker), []byte("a throwaway data directory of dolphin verify\n"), 0o640); err != nil {
		if created {
			err = errors.Join(err, os.RemoveAll(dir))
		}
		return false, err
	}
	return created, nil
}

// releaseScratch removes what Verify put into dir, and dir itself when Verify created it (a
// directory given may be a mount point).
func releaseScratch(dir string, created bool) error {
	if created {
		return os.RemoveAll(dir)
	}
	return emptyScratch(dir)
}

// emptyScratch removes every entry of dir but lost+found, VerifyMarker last.
func emptyScratch(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		if e.Name() != lostAndFound && e.Name() != VerifyMarker {
			errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(dir, VerifyMarker)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// verifiedTable is one table Verify looks at.
type verifiedTable struct {
	schema, name, engine string
}

func (t verifiedTable) String() string { return quoteName(t.schema) + "." + quoteName(t.name) }

// quoteName quotes an identifier for the server (backquotes, doubled inside).
func quoteName(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// tablesQuery lists the tables to check: base tables (system-versioned ones too) outside the
// system schemas.
var tablesQuery = "SELECT TABLE_SCHEMA, TABLE_NAME, COALESCE(ENGINE, '') FROM information_schema.TABLES " +
	"WHERE TABLE_TYPE IN ('BASE TABLE', 'SYSTEM VERSIONED') AND TABLE_SCHEMA NOT IN ('" +
	strings.Join(systemSchemas, "', '") + "') ORDER BY TABLE_SCHEMA, TABLE_NAME"

// maxFailedTables bounds how many failed tables an error describes.
const maxFailedTables = 10

// checkTables starts the temporary server on the restored data directory, checks and counts
// every table into rep, and shuts the server down cleanly.
func (o *Options) checkTables(ctx context.Context, tableTimeout time.Duration, archive *VerifyArchive, rep *VerifyReport) (err error) {
	log := o.logf()
	srv, err := o.startTempServer(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, srv.stop(o.StopTimeout))
		}
	}()
	// withTail adds the server's last output to an error of a statement: the server may
	// have died of the data (InnoDB aborts on some corruption).
	withTail := func(err error) error {
		select {
		case <-srv.done:
			return fmt.Errorf("%w; the temporary server exited (%v), its last output:\n%s", err, srv.waitErr, srv.out.tail())
		case <-time.After(200 * time.Millisecond):
			return err
		}
	}
	c, err := srv.connector()
	if err != nil {
		return err
	}
	db := sql.OpenDB(c)
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("connecting to the temporary server: %w", err)
	}
	defer conn.Close()

	var version, slavePos string
	if err := conn.QueryRowContext(ctx, "SELECT VERSION(), @@gtid_slave_pos").Scan(&version, &slavePos); err != nil {
		return withTail(fmt.Errorf("reading the temporary server's version: %w", err))
	}
	log("the temporary server %s runs on the restored data (its gtid_slave_pos, the source's replication position: %q)", version, slavePos)
	// What the data holds must be the manifest's position, as a restore checks it.
	info, infoName, err := backup.ReadBinlogInfo(o.DataDir)
	if err != nil {
		return fmt.Errorf("%w: %w", backup.ErrCorrupt, err)
	}
	holds, err := heldPosition(info.GTID, infoName, slavePos, rep.Manifest, log)
	if err != nil {
		return err
	}
	rep.GTIDPosition = holds
	log("the restored data holds GTID position %q", holds)
	if archive != nil {
		if err := replayArchive(ctx, conn, srv, o, archive, holds, rep); err != nil {
			return withTail(err)
		}
	}

	tables, err := listTables(ctx, conn)
	if err != nil {
		return withTail(err)
	}
	log("checking %d table(s)", len(tables))
	var failed []string
	for _, t := range tables {
		if uncheckedEngines[strings.ToUpper(t.engine)] {
			rep.SkippedTables = append(rep.SkippedTables, t.String())
			log("skipping %s: its engine %s keeps no data in the data directory", t, t.engine)
			continue
		}
		tctx, cancel := context.WithTimeout(ctx, tableTimeout)
		problems, err := checkTable(tctx, conn, t)
		if err == nil && len(problems) == 0 {
			var n int64
			q := "SELECT COUNT(*) FROM " + t.String()
			if err = conn.QueryRowContext(tctx, q).Scan(&n); err != nil {
				err = fmt.Errorf("%s: %w", q, err)
			}
			rep.Rows += n
		}
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				err = fmt.Errorf("%w (the limit for one table is %v)", err, tableTimeout)
			}
			return withTail(fmt.Errorf("checking table %s: %w", t, err))
		}
		if len(problems) > 0 {
			failed = append(failed, t.String()+": "+strings.Join(problems, "; "))
			log("CHECK TABLE %s: %s", t, strings.Join(problems, "; "))
			continue
		}
		rep.Tables++
	}
	if n := len(failed); n > 0 {
		more := ""
		if n > maxFailedTables {
			more = fmt.Sprintf(" | and %d more", n-maxFailedTables)
			failed = failed[:maxFailedTables]
		}
		return fmt.Errorf("%w: CHECK TABLE failed on %d of %d table(s): %s%s: restore another backup",
			backup.ErrCorrupt, n, len(tables), strings.Join(failed, " | "), more)
	}
	log("CHECK TABLE said OK for %d table(s) holding %d row(s)", rep.Tables, rep.Rows)
	if err := srv.shutdown(ctx, conn, o.StopTimeout); err != nil {
		return err
	}
	log("the temporary server shut down cleanly")
	return nil
}

// listTables returns the tables of tablesQuery.
func listTables(ctx context.Context, conn *sql.Conn) ([]verifiedTable, error) {
	rows, err := conn.QueryContext(ctx, tablesQuery)
	if err != nil {
		return nil, fmt.Errorf("listing the tables: %w", err)
	}
	defer rows.Close()
	var out []verifiedTable
	for rows.Next() {
		var t verifiedTable
		if err := rows.Scan(&t.schema, &t.name, &t.engine); err != nil {
			return nil, fmt.Errorf("listing the tables: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing the tables: %w", err)
	}
	return out, nil
}

// checkTable runs CHECK TABLE on t and returns what it reported besides OK: every message
// of type error, and a status other than OK. Notes and warnings are not problems (e.g. "The
// storage engine for the table doesn't support check", after which COUNT(*) still reads it).
func checkTable(ctx context.Context, conn *sql.Conn, t verifiedTable) ([]string, error) {
	q := "CHECK TABLE " + t.String()
	rows, err := conn.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", q, err)
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var table, op, typ, text sql.NullString
		if err := rows.Scan(&table, &op, &typ, &text); err != nil {
			return nil, fmt.Errorf("%s: %w", q, err)
		}
		msg := strings.Join(strings.Fields(text.String), " ")
		switch strings.ToLower(typ.String) {
		case "status":
			if !strings.EqualFold(msg, "OK") {
				problems = append(problems, "status "+msg)
			}
		case "error":
			problems = append(problems, "error "+msg)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", q, err)
	}
	return problems, nil
}
