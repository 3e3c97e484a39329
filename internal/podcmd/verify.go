package podcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/dolphin-operator/dolphin/internal/restore"
	"github.com/dolphin-operator/dolphin/internal/termination"
)

// defaultResultFile is the Kubernetes termination message file. The kubelet reads a pod's
// logs into the termination message only on failure (FallbackToLogsOnError), so the last
// line goes here too: the operator reads it from the pod's status either way.
const defaultResultFile = "/dev/termination-log"

// verifyExit ends the process after a failure has been reported; tests replace it.
var verifyExit = os.Exit

// verifyFlags are the flags of `dolphin verify`.
type verifyFlags struct {
	store storeFlags

	path, scratchDir, tmpDir, useMemory, resultFile string
	// archivePrefix is the binlog archive, in the same store, replayed after the backup.
	archivePrefix string
	serverOptions []string
	tableTimeout  time.Duration
}

// newVerifyCmd returns `dolphin verify`, run by the operator in a throwaway pod to prove that a
// backup can be restored.
func newVerifyCmd() *cobra.Command {
	var f verifyFlags
	return f.command()
}

func (f *verifyFlags) command() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Prove that a backup can be restored: restore it into a scratch directory and check every table",
		Long: "Restore the backup at --path of a store (an S3 bucket, or a directory) into a throwaway\n" +
			"data directory in --scratch-dir, checking every object's checksum while it is read, and\n" +
			"prepare it; check that it holds the manifest's GTID position; start a temporary server on\n" +
			"it (no networking, no grant tables, no binary log) and run CHECK TABLE and SELECT COUNT(*)\n" +
			"on every table outside the system schemas; shut it down cleanly. With --archive-prefix, the\n" +
			"binlog archive in the same store is first replayed onto the data from the backup's position\n" +
			"to its end, and the server must land exactly there. The restored data is\n" +
			"removed whatever happens, and nothing is written to the store.\n\n" +
			"The S3 credentials come from the environment: " + envS3AccessKeyID + " and " + envS3SecretAccessKey + ".\n" +
			"Progress goes to stderr. The last line is \"" + termination.VerifyPrefix + "ok gtid=<position> tables=<n>\n" +
			"rows=<n> seconds=<s>[ archive=<position> segments=<n>]\" on success (exit 0), \"" + termination.VerifyPrefix + "<error>\" on failure (exit 1);\n" +
			"it is written to --result-file too.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.ErrOrStderr()
			rep, err := f.run(cmd.Context(), w)
			return f.finish(w, rep, err, cmd.Flags().Changed("result-file"))
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.path, "path", "", "the backup's path in the store, the prefix holding its manifest.json (required)")
	fs.StringVar(&f.scratchDir, "scratch-dir", "/tmp/verify", "directory for the throwaway data directory: missing or empty, with room for the restored data")
	fs.StringVar(&f.tmpDir, "tmp-dir", "/tmp", "directory for the temporary server's socket and pid file")
	fs.StringVar(&f.useMemory, "use-memory", "", "memory for mariadb-backup --prepare and the server's buffer pool, e.g. 256M (default: theirs)")
	fs.StringVar(&f.resultFile, "result-file", defaultResultFile, "file that receives the last line too; the default is skipped when it is missing or not writable, \"\" skips it")
	fs.StringArrayVar(&f.serverOptions, "server-option", nil, "extra [mysqld] setting of the temporary server, key or key=value, e.g. lower_case_table_names=1 (repeatable)")
	fs.StringVar(&f.archivePrefix, "archive-prefix", "", "the binlog archive's prefix in the same store: replayed after the backup to its end before the tables are checked")
	fs.DurationVar(&f.tableTimeout, "table-timeout", restore.DefaultTableTimeout, "limit of CHECK TABLE, and of SELECT COUNT(*), on one table")
	f.store.register(cmd)
	return cmd
}

// run verifies with the flags and the environment, logging to w.
func (f *verifyFlags) run(ctx context.Context, w io.Writer) (restore.VerifyReport, error) {
	opts, err := f.options(os.Getenv, os.ReadFile)
	if err != nil {
		return restore.VerifyReport{}, err
	}
	opts.Log = func(format string, args ...any) {
		_, _ = fmt.Fprintf(w, termination.VerifyPrefix+format+"\n", args...)
	}
	return restore.Verify(ctx, opts)
}

// options maps the flags, and the secrets from getenv, to restore.VerifyOptions. readFile
// reads the CA file.
func (f *verifyFlags) options(getenv func(string) string, readFile func(string) ([]byte, error)) (restore.VerifyOptions, error) {
	o := restore.VerifyOptions{
		Path: f.path, ScratchDir: f.scratchDir, TmpDir: f.tmpDir, UseMemory: f.useMemory,
		ServerOptions: f.serverOptions, TableTimeout: f.tableTimeout,
	}
	if f.path == "" {
		return o, errors.New("--path is required: the backup's path in the store")
	}
	if f.scratchDir == "" {
		return o, errors.New("--scratch-dir is required: a directory for the throwaway data directory")
	}
	store, err := f.store.config(getenv, readFile)
	if err != nil {
		return o, err
	}
	o.Store = store
	if f.archivePrefix != "" {
		o.Archive = &restore.VerifyArchive{Store: store, Prefix: f.archivePrefix}
	}
	return o, nil
}

// verifyResult is the last line of a successful verification, after termination.VerifyPrefix.
func verifyResult(rep restore.VerifyReport) string {
	line := fmt.Sprintf(termination.VerifiedResult+" gtid=%s tables=%d rows=%d seconds=%d",
		rep.GTIDPosition, rep.Tables, rep.Rows, int64(math.Round(rep.Duration.Seconds())))
	switch {
	case rep.ArchiveReplayedTo != "":
		line += fmt.Sprintf(" archive=%s segments=%d", rep.ArchiveReplayedTo, rep.ArchiveSegments)
	case rep.ArchiveNote != "":
		line += " archive=none (the binlog archive does not reach back to this backup)"
	}
	return line
}

// finish writes the last line for rep or err to w and to the result file, and ends the
// process with status 1 on failure. A result file given explicitly that cannot be written
// fails the run: the operator would not learn its result.
func (f *verifyFlags) finish(w io.Writer, rep restore.VerifyReport, err error, explicitResult bool) error {
	resultFailed := false
	if err == nil {
		line := termination.VerifyPrefix + verifyResult(rep)
		if err = writeResult(f.resultFile, line, explicitResult); err == nil {
			_, _ = fmt.Fprintln(w, line)
			return nil
		}
		resultFailed = true
	}
	if !resultFailed {
		if werr := writeResult(f.resultFile, termination.Line(termination.VerifyPrefix, err), explicitResult); werr != nil {
			_, _ = fmt.Fprintln(w, termination.Line(termination.VerifyPrefix, werr))
		}
	}
	termination.Report(w, termination.VerifyPrefix, err)
	verifyExit(1)
	return err
}

// writeResult writes line to path, the whole file. An empty path is skipped; so is the
// default one (not explicit) when it is missing or not writable: outside a pod there is no
// termination message file.
func writeResult(path, line string, explicit bool) error {
	if path == "" {
		return nil
	}
	flags := os.O_WRONLY | os.O_TRUNC
	if explicit {
		flags |= os.O_CREATE
	}
	file, err := os.OpenFile(path, flags, 0o644)
	if err != nil && !explicit {
		return nil
	}
	if err == nil {
		_, err = file.WriteString(line + "\n")
		if cerr := file.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("writing the result to --result-file %s: %w", path, err)
	}
	return nil
}
