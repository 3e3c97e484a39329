package podcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/mycnf"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// Environment variables `dolphin backup` reads the server account from.
const (
	envBackupUser        = "DOLPHIN_BACKUP_USER"
	envBackupPassword    = "DOLPHIN_BACKUP_PASSWORD"
	defaultBackupUser    = "root"
	externalSourceRole   = "external"
	backupCommandLogLead = "dolphin-backup: "
)

// backupFlags are the flags of `dolphin backup`.
type backupFlags struct {
	path, name, socket, host, dataDir, defaultsFile, tmpDir string
	port                                                    int
	store                                                   storeFlags
}

// newBackupCmd returns `dolphin backup`: a backup in Dolphin's format (the same objects,
// checksums and manifest as a MySQLBackup's) of a MariaDB server that Dolphin does not run,
// taken on that server's host, for a cluster to start from (spec.bootstrap.from): the
// physical copy of a migration (docs/design/0066).
func newBackupCmd() *cobra.Command {
	var f backupFlags
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Back up a MariaDB server of this host into a backup store, for a cluster to start from",
		Long: "Stream `mariadb-backup --backup` of the server on this host, zstd-compressed and\n" +
			"checksummed, into --path of a store (an S3 bucket or a directory), with a manifest\n" +
			"written last — the format of Dolphin's own backups — so that a new cluster restores it\n" +
			"with spec.bootstrap.from {store, path} and every object is verified as it is read.\n" +
			"Nothing is staged on the host's disk. mariadb-backup of the server's version must be\n" +
			"installed on the host. The account (" + envBackupUser + ", default " + defaultBackupUser + "; password\n" +
			"in " + envBackupPassword + ") needs RELOAD, PROCESS, LOCK TABLES, BINLOG MONITOR and SLAVE\n" +
			"MONITOR, and REPLICATION SLAVE ADMIN when the server is a replica.\n" +
			"S3 credentials come from " + envS3AccessKeyID + " and " + envS3SecretAccessKey + " (else the AWS SDK's chain).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.run(cmd.Context(), cmd.ErrOrStderr(), os.Getenv, os.ReadFile)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.path, "path", "", "the backup's path in the store, e.g. migrations/shop-20261207/ (required; it must not hold a backup yet)")
	fs.StringVar(&f.name, "name", "", "the backup's name in its manifest (default: the last element of --path)")
	fs.StringVar(&f.socket, "socket", "", "the server's Unix socket (default: TCP to --host)")
	fs.StringVar(&f.host, "host", "127.0.0.1", "the server's address, without --socket")
	fs.IntVar(&f.port, "port", 3306, "the server's port, without --socket")
	fs.StringVar(&f.dataDir, "datadir", mycnf.DataDir, "the server's data directory, which mariadb-backup reads")
	fs.StringVar(&f.defaultsFile, "defaults-file", "", "the server's option file, the only one mariadb-backup reads (default: the usual ones)")
	fs.StringVar(&f.tmpDir, "tmp-dir", os.TempDir(), "directory for mariadb-backup's password file and temporary files")
	f.store.register(cmd)
	return cmd
}

// run takes the backup, logging to w.
func (f *backupFlags) run(ctx context.Context, w io.Writer, getenv func(string) string, readFile func(string) ([]byte, error)) error {
	opts, storeCfg, err := f.options(getenv, readFile)
	if err != nil {
		return err
	}
	store, err := objectstore.New(ctx, storeCfg)
	if err != nil {
		return fmt.Errorf("opening the store: %w", err)
	}
	opts.Log = func(format string, args ...any) { _, _ = fmt.Fprintf(w, backupCommandLogLead+format+"\n", args...) }
	m, err := backup.Take(ctx, opts, store)
	if err != nil {
		return err
	}
	opts.Log("done: backup %q of %s (%s) at %s: %d bytes stored, GTID position %q; a cluster starts from it with "+
		"spec.bootstrap.from {store, path: %s}", m.Name, m.SourceInstance, m.ServerVersion, objectstore.Locate(store, opts.Prefix),
		m.StoredBytes(), m.GTIDPosition, opts.Prefix)
	return nil
}

// options maps the flags and the environment to backup.TakeOptions and the store.
func (f *backupFlags) options(getenv func(string) string, readFile func(string) ([]byte, error)) (backup.TakeOptions, objectstore.Config, error) {
	if f.path == "" {
		return backup.TakeOptions{}, objectstore.Config{}, errors.New("--path is required: where in the store the backup goes")
	}
	prefix := strings.TrimSuffix(f.path, "/") + "/"
	if slices.ContainsFunc(strings.Split(strings.TrimSuffix(prefix, "/"), "/"), func(e string) bool { return e == "" || e == "." || e == ".." }) {
		return backup.TakeOptions{}, objectstore.Config{}, fmt.Errorf("--path %q: give a relative path without . or .. elements, e.g. migrations/shop-20261207/", f.path)
	}
	name := f.name
	if name == "" {
		name = path.Base(strings.TrimSuffix(prefix, "/"))
	}
	host, err := os.Hostname()
	if err != nil {
		return backup.TakeOptions{}, objectstore.Config{}, fmt.Errorf("naming this host for the manifest: %w", err)
	}
	o := backup.TakeOptions{
		Prefix: prefix, Name: name, SourceInstance: host, SourceRole: externalSourceRole,
		Socket: f.socket, Host: f.host, Port: f.port,
		User: getenv(envBackupUser), Password: getenv(envBackupPassword),
		DataDir: f.dataDir, DefaultsFile: f.defaultsFile, TmpDir: f.tmpDir,
	}
	if o.Socket != "" {
		o.Host, o.Port = "", 0
	}
	if o.User == "" {
		o.User = defaultBackupUser
	}
	store, err := f.store.config(getenv, readFile)
	if err != nil {
		return o, store, err
	}
	return o, store, nil
}
