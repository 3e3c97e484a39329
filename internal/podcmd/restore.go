package podcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dolphin-operator/dolphin/internal/mycnf"
	"github.com/dolphin-operator/dolphin/internal/restore"
	"github.com/dolphin-operator/dolphin/internal/termination"
)

// Environment variables `dolphin restore` reads its secrets from (never flags: a command line
// is visible to every process of the node).
const (
	envS3AccessKeyID     = "S3_ACCESS_KEY_ID"
	envS3SecretAccessKey = "S3_SECRET_ACCESS_KEY"
	envOperatorUser      = "DOLPHIN_OPERATOR_USER"
	envOperatorPassword  = "DOLPHIN_OPERATOR_PASSWORD"
	envRootPassword      = "DOLPHIN_ROOT_PASSWORD"
	defaultOperatorUser  = "dolphin"
)

// restoreExit ends the process after a failure has been reported; tests replace it.
var restoreExit = os.Exit

// restoreFlags are the flags of `dolphin restore`.
type restoreFlags struct {
	path, dataDir, defaultsFile, tmpDir, flavor, useMemory string
	// archivePrefix and replayTo take the restore to a point in time (restore.PointInTime).
	archivePrefix, replayTo string

	store storeFlags
}

// newRestoreCmd returns `dolphin restore`, run by an init container of every instance pod of a
// cluster created from a backup (spec.bootstrap), after the per-instance config is written
// and before the server starts.
func newRestoreCmd() *cobra.Command {
	var f restoreFlags
	return f.command()
}

func (f *restoreFlags) command() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "restore",
		Short: "Restore a backup into this instance's empty data directory (init container)",
		Long: "Restore the backup at --path of a store (an S3 bucket, or a directory) into the data\n" +
			"directory, unless it holds .dolphin-initialized already. Every object's checksum is\n" +
			"verified while it is read; a temporary server without networking then sets the new\n" +
			"cluster's operator account and root password, removes the source's replication\n" +
			"settings and sets the GTID state to the backup's, without writing to the binary log.\n" +
			"A failed attempt is cleaned up and started over by the next one.\n\n" +
			"Secrets come from the environment: " + envS3AccessKeyID + ", " + envS3SecretAccessKey + ",\n" +
			envOperatorUser + " (default " + defaultOperatorUser + "), " + envOperatorPassword + " and " + envRootPassword + ".\n" +
			"Progress goes to stderr; on failure the last line is \"" + termination.RestorePrefix + "<error>\".",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			err := f.run(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				termination.Report(cmd.ErrOrStderr(), termination.RestorePrefix, err)
				restoreExit(1)
			}
			return err
		},
	}
	f.addFlags(cmd.Flags())
	return cmd
}

// addFlags registers the flags of the data directory, the server and the backup's store on
// fs (`dolphin restore` and `dolphin seed`).
func (f *restoreFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.path, "path", "", "the backup's path in the store, the prefix holding its manifest.json (required to restore)")
	fs.StringVar(&f.dataDir, "datadir", mycnf.DataDir, "the server's data directory")
	fs.StringVar(&f.defaultsFile, "defaults-file", path.Join(mycnf.ConfigDir, "my.cnf"), "the server's option file")
	fs.StringVar(&f.tmpDir, "tmp-dir", "/tmp", "directory for the temporary server's socket and pid file")
	fs.StringVar(&f.flavor, "flavor", restore.FlavorMariaDB, `database flavor: "mariadb" or "mysql" (restores and clones are implemented for mariadb only)`)
	fs.StringVar(&f.useMemory, "use-memory", "", "memory for mariadb-backup --prepare, e.g. 256M (default: the tool's)")
	fs.StringVar(&f.archivePrefix, "archive-prefix", "", "the binlog archive's prefix in the same store, replayed after the backup (with --replay-to)")
	fs.StringVar(&f.replayTo, "replay-to", "", "the GTID position to replay the archive up to (with --archive-prefix)")
	f.store.registerOn(fs)
}

// run restores with the flags and the environment, logging to w.
func (f *restoreFlags) run(ctx context.Context, w io.Writer) error {
	opts, err := f.options(os.Getenv, os.ReadFile)
	if err != nil {
		return err
	}
	opts.Log = func(format string, args ...any) {
		_, _ = fmt.Fprintf(w, termination.RestorePrefix+format+"\n", args...)
	}
	res, err := restore.IntoDataDir(ctx, opts)
	if err != nil && (opts.OperatorPassword == "" || opts.RootPassword == "") {
		return fmt.Errorf("%w (the passwords come from %s and %s)", err, envOperatorPassword, envRootPassword)
	}
	if err != nil {
		return err
	}
	if res.Skipped {
		opts.Log("done: %s was initialised already", opts.DataDir)
	} else {
		opts.Log("done: %s holds backup %s at GTID position %q", opts.DataDir, opts.Path, res.GTIDPosition)
	}
	return nil
}

// options maps the flags, and the secrets from getenv, to restore.Options. readFile reads the
// CA file.
func (f *restoreFlags) options(getenv func(string) string, readFile func(string) ([]byte, error)) (restore.Options, error) {
	o := restore.Options{
		Path: f.path, DataDir: f.dataDir, DefaultsFile: f.defaultsFile, TmpDir: f.tmpDir,
		Flavor: f.flavor, UseMemory: f.useMemory,
		OperatorUser: getenv(envOperatorUser), OperatorPassword: getenv(envOperatorPassword),
		RootPassword: getenv(envRootPassword),
	}
	if o.OperatorUser == "" {
		o.OperatorUser = defaultOperatorUser
	}
	if f.path == "" {
		return o, errors.New("--path is required: the backup's path in the store")
	}
	store, err := f.store.config(getenv, readFile)
	if err != nil {
		return o, err
	}
	o.Store = store
	switch {
	case f.archivePrefix != "" && f.replayTo != "":
		o.PointInTime = &restore.PointInTime{Archive: store, Prefix: f.archivePrefix, To: f.replayTo}
	case f.archivePrefix != "" || f.replayTo != "":
		return o, errors.New("--archive-prefix and --replay-to go together: the archive to replay and the GTID position to stop at")
	}
	return o, nil
}
