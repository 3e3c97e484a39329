package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/dolphin-operator/dolphin/internal/mycnf"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/restore"
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

// restoreLogPrefix starts every line `dolphin restore` writes; the last line of a failure is
// restoreLogPrefix + the error, which the pod's termination message shows.
const restoreLogPrefix = "dolphin-restore: "

// maxLastLine bounds the last line of a failure, so that the termination message (the log's
// last 2048 bytes) holds all of it.
const maxLastLine = 1500

// restoreExit ends the process after a failure has been reported; tests replace it.
var restoreExit = os.Exit

// restoreFlags are the flags of `dolphin restore`.
type restoreFlags struct {
	path, dataDir, defaultsFile, tmpDir, flavor, useMemory string

	directory string

	s3Endpoint, s3Bucket, s3Prefix, s3Region, s3PartSize, s3CAFile string
	s3PathStyle                                                    bool
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
			"Progress goes to stderr; on failure the last line is \"" + restoreLogPrefix + "<error>\".",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			err := f.run(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				reportFailure(cmd.ErrOrStderr(), err)
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
	fs.StringVar(&f.directory, "directory", "", "a directory store (a mounted volume) holding the backup, instead of S3")
	fs.StringVar(&f.s3Endpoint, "s3-endpoint", "", "URL of the S3 API (default: Amazon S3 for the region)")
	fs.StringVar(&f.s3Bucket, "s3-bucket", "", "the S3 bucket holding the backup")
	fs.StringVar(&f.s3Prefix, "s3-prefix", "", "key prefix of the store in the bucket")
	fs.StringVar(&f.s3Region, "s3-region", "", "region of the bucket (default "+objectstore.DefaultS3Region+")")
	fs.BoolVar(&f.s3PathStyle, "s3-path-style", false, "address the bucket as <endpoint>/<bucket> (most S3-compatible servers)")
	fs.StringVar(&f.s3PartSize, "s3-part-size", "", "multipart part size of the store, e.g. 16Mi (default 16Mi)")
	fs.StringVar(&f.s3CAFile, "s3-ca-file", "", "PEM file of certificate authorities for the endpoint (a private CA)")
}

// run restores with the flags and the environment, logging to w.
func (f *restoreFlags) run(ctx context.Context, w io.Writer) error {
	opts, err := f.options(os.Getenv, os.ReadFile)
	if err != nil {
		return err
	}
	opts.Log = func(format string, args ...any) {
		_, _ = fmt.Fprintf(w, restoreLogPrefix+format+"\n", args...)
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
	s3Set := f.s3Endpoint != "" || f.s3Prefix != "" || f.s3Region != "" || f.s3PathStyle || f.s3PartSize != "" || f.s3CAFile != ""
	switch {
	case f.directory != "" && (f.s3Bucket != "" || s3Set):
		return o, errors.New("--directory and the --s3-* flags are exclusive: give one store")
	case f.directory != "":
		o.Store.Directory = f.directory
		return o, nil
	case f.s3Bucket == "" && s3Set:
		return o, errors.New("--s3-bucket is required with the other --s3-* flags")
	case f.s3Bucket == "":
		return o, errors.New("no store given: set --s3-bucket (and --s3-endpoint, ...) or --directory")
	}
	s3 := &objectstore.S3Config{
		Endpoint: f.s3Endpoint, Bucket: f.s3Bucket, Prefix: f.s3Prefix, Region: f.s3Region,
		PathStyle:   f.s3PathStyle,
		AccessKeyID: getenv(envS3AccessKeyID), SecretAccessKey: getenv(envS3SecretAccessKey),
	}
	if f.s3PartSize != "" {
		q, err := resource.ParseQuantity(f.s3PartSize)
		if err != nil {
			return o, fmt.Errorf("--s3-part-size %q: %w (want a size such as 16Mi)", f.s3PartSize, err)
		}
		s3.PartSize = q.Value()
	}
	if f.s3CAFile != "" {
		pem, err := readFile(f.s3CAFile)
		if err != nil {
			return o, fmt.Errorf("--s3-ca-file: %w", err)
		}
		if len(pem) == 0 {
			return o, fmt.Errorf("--s3-ca-file %s is empty", f.s3CAFile)
		}
		s3.CACertPEM = pem
	}
	o.Store.S3 = s3
	return o, nil
}

// reportFailure writes err to w: in full when it spans lines, then as one last line
// restoreLogPrefix + the error on a single line, at most maxLastLine bytes.
func reportFailure(w io.Writer, err error) { reportFailureAs(w, restoreLogPrefix, err) }

// reportFailureAs is reportFailure with another prefix.
func reportFailureAs(w io.Writer, prefix string, err error) {
	msg := err.Error()
	if strings.Contains(msg, "\n") {
		_, _ = fmt.Fprintf(w, "%sfailed:\n%s\n", prefix, msg)
	}
	_, _ = fmt.Fprintln(w, prefix+lastLine(msg))
}

// lastLine puts msg on one line ("a:\nb\nc" → "a: b | c") and, when it is longer than
// maxLastLine, cuts out its middle.
func lastLine(msg string) string {
	var parts []string
	for l := range strings.Lines(msg) {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			if strings.HasSuffix(parts[i-1], ":") {
				b.WriteString(" ")
			} else {
				b.WriteString(" | ")
			}
		}
		b.WriteString(p)
	}
	s := b.String()
	if len(s) > maxLastLine {
		head, tail := maxLastLine*2/3, maxLastLine/3-len(" … ")
		s = strings.ToValidUTF8(s[:head]+" … "+s[len(s)-tail:], "")
	}
	return s
}
