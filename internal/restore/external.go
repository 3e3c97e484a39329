package restore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dolphin-operator/dolphin/internal/migrate"
	"github.com/dolphin-operator/dolphin/internal/mycnf"
	"github.com/dolphin-operator/dolphin/internal/nosync"
)

// ExternalOptions configures FromExternal.
type ExternalOptions struct {
	// Source is the server outside the cluster, reached through the migration account
	// (migrate.Check says what it needs). Required.
	Source migrate.Endpoint
	// InstallTool is mariadb-install-db (default: found on PATH, /usr/bin or /usr/sbin);
	// DumpTool and ClientTool are as in migrate.LogicalCopyOptions.
	InstallTool, DumpTool, ClientTool string

	// DataDir, DefaultsFile, ServerBinary, Flavor, OperatorUser, OperatorPassword,
	// RootPassword, TmpDir, StartTimeout, StopTimeout, Progress (the bytes of the dump
	// streamed) and Log are as in Options.
	DataDir, DefaultsFile, ServerBinary, Flavor  string
	OperatorUser, OperatorPassword, RootPassword string
	TmpDir                                       string
	StartTimeout, StopTimeout                    time.Duration
	Progress                                     func(bytes int64)
	Log                                          func(format string, args ...any)
}

// ExternalResult says what FromExternal did.
type ExternalResult struct {
	// Skipped is set when DataDir was initialised already: nothing was touched.
	Skipped bool
	// GTIDPosition is the source's position at the copy's snapshot: the instance's
	// gtid_binlog_state and gtid_slave_pos, from which replication from the source continues.
	GTIDPosition string
	// Accounts says which of the source's accounts were copied, skipped or refused.
	Accounts migrate.AccountsResult
	// Bytes is the size of the dump streamed.
	Bytes int64
}

// logf returns the function progress messages go to.
func (e *ExternalOptions) logf() func(string, ...any) {
	if e.Log != nil {
		return e.Log
	}
	return func(string, ...any) {}
}

// options are the Options the shared steps (the temporary server) run with, on dir.
func (e *ExternalOptions) options(dir string) Options {
	return Options{
		DataDir: dir, DefaultsFile: e.DefaultsFile, ServerBinary: e.ServerBinary, Flavor: e.Flavor,
		OperatorUser: e.OperatorUser, OperatorPassword: e.OperatorPassword, RootPassword: e.RootPassword,
		TmpDir: e.TmpDir, StartTimeout: e.StartTimeout, StopTimeout: e.StopTimeout, Log: e.Log,
	}
}

// FromExternal seeds DataDir — the first instance of a new cluster — with a consistent logical
// copy of a server outside the cluster, unless DataDir holds InitializedMarker (then nothing
// is touched: Skipped). Like a clone, everything happens in StagingDir and the markers come
// last: mariadb-install-db makes an empty server there, a temporary server (no networking)
// takes `mariadb-dump | mariadb` of every user schema at one GTID position
// (migrate.LogicalCopy) and the source's accounts (migrate.CopyAccounts), gets Dolphin's
// operator account and root's password, and its GTID state set to the copy's position (empty
// binary log: gtid_binlog_state and gtid_slave_pos = that position, as a restored backup's);
// it shuts down cleanly, the files move into DataDir, then RestoredMarker and
// InitializedMarker are written. A failure leaves no marker, and the next attempt starts over
// on a cleared directory (ClearUninitialized). Nothing is written on the source.
func FromExternal(ctx context.Context, o ExternalOptions) (ExternalResult, error) {
	switch {
	case o.DataDir == "" || o.DefaultsFile == "":
		return ExternalResult{}, errors.New("external copy: DataDir and DefaultsFile are required")
	case o.OperatorUser == "" || o.OperatorPassword == "":
		return ExternalResult{}, errors.New("external copy: the operator account and its password are required")
	case o.Source.User == "" || (o.Source.Host == "" && o.Source.Socket == ""):
		return ExternalResult{}, errors.New("external copy: the source's address and account are required")
	case o.Flavor == FlavorMySQL:
		return ExternalResult{}, fmt.Errorf("an external copy into MySQL is %w", ErrNotSupported)
	}
	if o.TmpDir == "" {
		o.TmpDir = os.TempDir()
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 5 * time.Minute
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = 5 * time.Minute
	}
	log := o.logf()
	switch _, err := os.Stat(filepath.Join(o.DataDir, InitializedMarker)); {
	case err == nil:
		log("%s exists: the instance has its data already, nothing to copy", InitializedMarker)
		return ExternalResult{Skipped: true}, nil
	case !errors.Is(err, os.ErrNotExist):
		return ExternalResult{}, err
	}
	if err := os.MkdirAll(o.DataDir, 0o750); err != nil {
		return ExternalResult{}, err
	}
	// Option files holding the source's password that a killed attempt could not remove.
	if stale, _ := filepath.Glob(filepath.Join(o.TmpDir, mycnf.ClientFilePattern)); len(stale) > 0 {
		for _, f := range stale {
			_ = os.Remove(f)
		}
		log("removed %d option file(s) a stopped attempt left in %s", len(stale), o.TmpDir)
	}
	if removed, err := ClearUninitialized(o.DataDir); err != nil {
		return ExternalResult{}, fmt.Errorf("clearing the data directory: %w", err)
	} else if len(removed) > 0 {
		log("removed what a failed attempt left in %s (it had no %s): %s", o.DataDir, InitializedMarker, strings.Join(removed, ", "))
	}
	staging := filepath.Join(o.DataDir, StagingDir)
	res, err := o.copyInto(ctx, staging)
	if err != nil {
		if rmErr := os.RemoveAll(staging); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("removing %s: %w", staging, rmErr))
		}
		return res, err
	}
	if err := moveUp(staging, o.DataDir); err != nil {
		return res, fmt.Errorf("external copy: moving the copied files from %s into %s: %w; the next attempt starts over", staging, o.DataDir, err)
	}
	// The temporary server flushed nothing commit by commit, and a clean shutdown does not
	// sync every file (.frm, Aria, the binary log) nor the renames: all of it must be on disk
	// before a marker says the directory holds data.
	if err := nosync.SyncFilesystem(o.DataDir); err != nil {
		return res, fmt.Errorf("external copy: syncing %s: %w", o.DataDir, err)
	}
	mk := Marker{Source: "external copy from " + o.Source.Describe(), GTIDPosition: res.GTIDPosition, RestoredAt: time.Now().UTC()}
	if err := writeMarkers(o.DataDir, mk); err != nil {
		return res, fmt.Errorf("external copy: writing the markers: %w", err)
	}
	log("copied %d bytes from %s at GTID position %q; %d account(s) copied", res.Bytes, o.Source.Describe(), res.GTIDPosition, len(res.Accounts.Copied))
	return res, nil
}

// copyInto initialises staging, copies the source into a temporary server on it and fixes
// its accounts and GTID state up; the server is shut down cleanly.
func (o *ExternalOptions) copyInto(ctx context.Context, staging string) (_ ExternalResult, err error) {
	log := o.logf()
	install, err := findInstallTool(o.InstallTool)
	if err != nil {
		return ExternalResult{}, err
	}
	if err := os.MkdirAll(staging, 0o750); err != nil {
		return ExternalResult{}, err
	}
	cmd := exec.CommandContext(ctx, install, "--defaults-file="+o.DefaultsFile, "--datadir="+staging,
		"--auth-root-authentication-method=normal", "--skip-test-db")
	cmd.WaitDelay = 10 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		return ExternalResult{}, fmt.Errorf("external copy: %s failed: %w: %s", install, err, lastLines(string(out), 5))
	}
	log("initialised an empty server in %s", staging)

	tmpOpts := o.options(staging)
	srv, err := tmpOpts.startTempServer(ctx)
	if err != nil {
		return ExternalResult{}, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, srv.stop(o.StopTimeout))
		}
	}()
	cp, err := migrate.LogicalCopy(ctx, migrate.LogicalCopyOptions{
		Source: o.Source,
		// No grant tables yet (--skip-grant-tables): any name logs in.
		Target:   migrate.Endpoint{Socket: srv.socket, User: "root"},
		DumpTool: o.DumpTool, ClientTool: o.ClientTool, TmpDir: o.TmpDir, Progress: o.Progress,
	})
	res := ExternalResult{GTIDPosition: cp.GTIDPosition, Bytes: cp.Bytes}
	if err != nil {
		return res, fmt.Errorf("external copy: %w", err)
	}
	log("copied %d bytes from %s in %v, at GTID position %q", cp.Bytes, o.Source.Describe(), cp.Took.Round(time.Millisecond), cp.GTIDPosition)

	c, err := srv.connector()
	if err != nil {
		return res, err
	}
	db := sql.OpenDB(c)
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return res, fmt.Errorf("connecting to the temporary server: %w", err)
	}
	defer conn.Close()
	exec := func(q string, args ...any) error {
		if _, err := conn.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("%s: %w", q, err) // q holds placeholders, never a password
		}
		return nil
	}
	for _, s := range []struct {
		q    string
		args []any
	}{
		{sqlLogBinOff, nil},
		{flushPrivileges, nil},
		{replaceOperator, []any{o.OperatorUser, o.OperatorPassword}},
		{grantOperator, []any{o.OperatorUser}},
		{createRoot, []any{o.RootPassword}},
		{alterRoot, []any{o.RootPassword}},
		{grantRoot, nil},
	} {
		if err := exec(s.q, s.args...); err != nil {
			return res, err
		}
	}
	if res.Accounts, err = o.copyAccounts(ctx, srv.socket); err != nil {
		return res, err
	}
	if err := o.noChangesSince(ctx, cp.ScannedTo); err != nil {
		return res, err
	}
	for _, s := range []struct {
		q    string
		args []any
	}{
		{resetMaster, nil},
		{setBinlogState, []any{cp.GTIDPosition}},
		{setSlavePos, []any{cp.GTIDPosition}},
	} {
		if err := exec(s.q, s.args...); err != nil {
			return res, err
		}
	}
	if err := checkState(ctx, conn, cp.GTIDPosition); err != nil {
		return res, err
	}
	if err := srv.shutdown(ctx, conn, o.StopTimeout); err != nil {
		return res, err
	}
	log("the temporary server shut down cleanly")
	return res, nil
}

// copyAccounts copies the source's accounts into the temporary server at socket, as the
// operator account (the grant tables are loaded by now), all but the migration account and
// the reserved ones. An account the target refuses is logged and the copy goes on.
func (o *ExternalOptions) copyAccounts(ctx context.Context, socket string) (migrate.AccountsResult, error) {
	src, err := o.Source.Open()
	if err != nil {
		return migrate.AccountsResult{}, err
	}
	defer src.Close()
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd = o.OperatorUser, o.OperatorPassword
	cfg.Net, cfg.Addr = "unix", socket
	cfg.Logger = discardLogger{}
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = 5*time.Second, 10*time.Minute, time.Minute
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return migrate.AccountsResult{}, err
	}
	dst := sql.OpenDB(c)
	defer dst.Close()
	res, err := migrate.CopyAccounts(ctx, src, dst, func(a migrate.Account) bool { return a.User == o.Source.User })
	if err != nil {
		return res, fmt.Errorf("external copy: the accounts: %w", err)
	}
	log := o.logf()
	for name, reason := range res.Failed {
		log("the source's account %s was not copied: %s", name, reason)
	}
	return res, nil
}

// noChangesSince checks the source's binary log again from where the copy checked it to its
// end, now that the accounts were copied as they are: an account or schema changed meanwhile
// would be applied again by replication from the copy's position (ErrChangedDuringCopy).
func (o *ExternalOptions) noChangesSince(ctx context.Context, from migrate.BinlogCoordinates) error {
	src, err := o.Source.Open()
	if err != nil {
		return err
	}
	defer src.Close()
	changes, _, err := migrate.ChangesSince(ctx, src, from)
	if err != nil {
		return fmt.Errorf("external copy: checking the source's binary log after the accounts: %w", err)
	}
	if len(changes) > 0 {
		return fmt.Errorf("external copy: %w", migrate.ChangedDuringCopyError(changes))
	}
	return nil
}

// findInstallTool returns path when set, else mariadb-install-db from PATH, /usr/bin or
// /usr/sbin.
func findInstallTool(path string) (string, error) {
	return findTool(path, "mariadb-install-db", "/usr/bin", "/usr/sbin")
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
