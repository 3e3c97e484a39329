package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// RestoreOptions configures Restore.
type RestoreOptions struct {
	// TargetDir receives the prepared data directory. It must be empty or missing (it is
	// created); Restore refuses a non-empty one. On failure it is left empty.
	TargetDir string
	// Tool is the path of mariadb-backup and MBStream that of mbstream; by default both are
	// looked up on PATH.
	Tool     string
	MBStream string
	// UseMemory is --use-memory for --prepare (the buffer pool used to apply the redo log),
	// e.g. "256M"; empty leaves the tool's default.
	UseMemory string
	// DefaultsFile, when set, is given to mariadb-backup --prepare as --defaults-file (first),
	// so that no other option file is read; the backup's own backup-my.cnf is read anyway.
	DefaultsFile string
	// VerifyFirst downloads and checks every object (see Verify) before extracting anything,
	// at the cost of reading the backup twice.
	VerifyFirst bool
	// Progress, when set, is called with the number of bytes read from the store so far.
	Progress func(readBytes int64)
	// ExtraArgs are appended to mariadb-backup --prepare's arguments.
	ExtraArgs []string
}

// Restore reads the manifest of the backup under prefix and streams each object out of the
// store (sha256 and size counted as it is read), zstd-decodes it and extracts it with
// `mbstream -x -C <TargetDir>`. After each object its size and sha256 are compared with the
// manifest: on a mismatch everything extracted is removed and the error, which wraps
// ErrCorrupt, names the object and both digests. Then `mariadb-backup --prepare` makes the
// directory consistent, and the binlog info file it holds (mariadb_backup_binlog_info, or
// xtrabackup_binlog_info in 10.11) must agree with the manifest's GTIDPosition.
//
// Restore returns the manifest, from which the caller sets the restored server's GTID state.
// A backup without a manifest fails with an error wrapping ErrIncomplete.
func Restore(ctx context.Context, store objectstore.Store, prefix string, opts RestoreOptions) (*Manifest, error) {
	prefix = normPrefix(prefix)
	where := objectstore.Locate(store, prefix)
	m, err := ReadManifest(ctx, store, prefix)
	if err != nil {
		return nil, err
	}
	toolName, extractorName, err := backupTools(m.Flavor)
	if err != nil {
		return nil, fmt.Errorf("restore of %s: %w", where, err)
	}
	tool, err := findTool(opts.Tool, toolName)
	if err != nil {
		return nil, fmt.Errorf("restore of %s: %w", where, err)
	}
	mbstream, err := findTool(opts.MBStream, extractorName)
	if err != nil {
		return nil, fmt.Errorf("restore of %s: %w", where, err)
	}
	target, err := emptyTarget(opts.TargetDir)
	if err != nil {
		return nil, fmt.Errorf("restore of %s: %w", where, err)
	}
	if opts.VerifyFirst {
		if err := verifyObjects(ctx, store, prefix, m); err != nil {
			return nil, fmt.Errorf("restore of %s: %w", where, err)
		}
	}
	if err := restoreInto(ctx, store, prefix, m, opts, tool, mbstream, target); err != nil {
		if cleanErr := emptyDir(target); cleanErr != nil {
			err = errors.Join(err, fmt.Errorf("emptying %s: %w", target, cleanErr))
		}
		return nil, fmt.Errorf("restore of %s into %s: %w", where, target, err)
	}
	return m, nil
}

func restoreInto(ctx context.Context, store objectstore.Store, prefix string, m *Manifest, opts RestoreOptions, tool, mbstream, target string) error {
	var read int64
	progress := func(n int64) {
		read += n
		if opts.Progress != nil {
			opts.Progress(read)
		}
	}
	for _, o := range m.Objects {
		if err := extract(ctx, store, prefix, o, mbstream, target, progress); err != nil {
			return err
		}
	}
	if err := prepare(ctx, tool, target, opts); err != nil {
		return err
	}
	if m.Flavor == FlavorMySQL {
		return checkMySQLBinlogInfo(target, m)
	}
	return checkBinlogInfo(target, m)
}

// emptyTarget returns dir made absolute, creating it when missing and refusing it when it
// holds anything.
func emptyTarget(dir string) (string, error) {
	if dir == "" {
		return "", errors.New("RestoreOptions.TargetDir is required")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	ents, err := os.ReadDir(abs)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return abs, os.MkdirAll(abs, 0o750)
	case err != nil:
		return "", fmt.Errorf("target directory: %w", err)
	case len(ents) > 0:
		return "", fmt.Errorf("target directory %s is not empty (it holds %s…)", abs, ents[0].Name())
	}
	return abs, nil
}

// emptyDir removes everything inside dir, leaving dir itself.
func emptyDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
	}
	return errors.Join(errs...)
}

// extract streams one object through the digest, the decoder and mbstream into target.
func extract(ctx context.Context, store objectstore.Store, prefix string, o Object, mbstream, target string, progress func(int64)) error {
	key := prefix + o.Key
	rc, err := store.Open(ctx, key)
	if errors.Is(err, objectstore.ErrNotFound) {
		return fmt.Errorf("%w: object %s is missing: %w", ErrCorrupt, key, err)
	}
	if err != nil {
		return fmt.Errorf("opening %s: %w", key, err)
	}
	defer rc.Close()
	src := objectstore.NewDigestReader(rc, progress)
	u, err := unpack(ctx, src, mbstream, target)
	if err != nil {
		return err
	}
	if ctx.Err() == nil && src.Err() == nil {
		// Read what the decoder or mbstream left, so that the digest covers the object.
		_, _ = io.CopyN(io.Discard, src, max(o.Size-src.Digest.Size(), 0)+1)
	}
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("cancelled while extracting %s: %w", key, ctx.Err())
	case src.Err() != nil:
		return fmt.Errorf("reading %s: %w", key, src.Err())
	}
	if err := compareObject(key, o, src.Digest); err != nil {
		return err
	}
	switch {
	case u.copyErr != nil:
		return exitError("decoding "+key+" into mbstream", u.copyErr, u.out)
	case u.waitErr != nil:
		return exitError("mbstream -x", u.waitErr, u.out)
	}
	return nil
}

// unpacked is how a run of unpack ended.
type unpacked struct {
	// copyErr is the decoder's error (a damaged frame, or src's read error) or the pipe's
	// (mbstream exited early); waitErr mbstream's exit.
	copyErr, waitErr error
	out              *toolOutput
}

// unpack zstd-decodes src into `mbstream -x -C target` and waits for mbstream. The error is
// a failure to start; how the extraction went is in unpacked. The decoder is closed when it
// returns: nothing reads src after that.
func unpack(ctx context.Context, src io.Reader, mbstream, target string) (unpacked, error) {
	u := unpacked{out: &toolOutput{}}
	dec, err := newDecoder(src)
	if err != nil {
		return u, err
	}
	defer dec.Close()
	cmd := exec.CommandContext(ctx, mbstream, "-x", "-C", target)
	cmd.WaitDelay = waitDelay
	cmd.Stderr, cmd.Stdout = u.out, u.out
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return u, err
	}
	if err := cmd.Start(); err != nil {
		return u, fmt.Errorf("starting %s: %w", mbstream, err)
	}
	_, u.copyErr = io.CopyBuffer(stdin, dec, make([]byte, copyBuffer))
	stdin.Close()
	u.waitErr = cmd.Wait()
	return u, nil
}

// compareObject checks what was read of key against the manifest's entry.
func compareObject(key string, o Object, d *objectstore.Digest) error {
	if sum := d.SHA256(); d.Size() != o.Size || sum != o.SHA256 {
		return fmt.Errorf("%w: object %s: read %d bytes with sha256 %s, the manifest says %d bytes with sha256 %s",
			ErrCorrupt, key, d.Size(), sum, o.Size, o.SHA256)
	}
	return nil
}

// prepare runs mariadb-backup --prepare on target.
func prepare(ctx context.Context, tool, target string, opts RestoreOptions) error {
	var args []string
	if opts.DefaultsFile != "" {
		args = append(args, "--defaults-file="+opts.DefaultsFile)
	}
	args = append(args, "--prepare", "--target-dir="+target)
	if opts.UseMemory != "" {
		args = append(args, "--use-memory="+opts.UseMemory)
	}
	args = append(args, opts.ExtraArgs...)
	var report toolReport
	out := &toolOutput{onLine: report.line}
	cmd := exec.CommandContext(ctx, tool, args...)
	cmd.WaitDelay = waitDelay
	cmd.Stdout, cmd.Stderr = out, out
	err := cmd.Run()
	out.flush()
	what := filepath.Base(tool) + " --prepare"
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("cancelled while %s was running: %w", what, ctx.Err())
	case err != nil:
		return exitError(what, err, out)
	case !report.Completed:
		return exitError(what, fmt.Errorf("it exited 0 without printing %q", completedLine), out)
	}
	return nil
}

// checkBinlogInfo compares the prepared directory's binlog info file with the manifest.
func checkBinlogInfo(target string, m *Manifest) error {
	bi, name, err := ReadBinlogInfo(target)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if err != nil {
		return err
	}
	// The file holds the tool's GTID, which can lag the data on a replica (see exactPosition):
	// the coordinates must be the manifest's, the GTID must not be ahead of it.
	if bi.File != m.BinlogFile || bi.Position != m.BinlogPosition {
		return fmt.Errorf("%w: the restored data's %s is at binary log %s:%d, the manifest says %s:%d",
			ErrCorrupt, name, bi.File, bi.Position, m.BinlogFile, m.BinlogPosition)
	}
	if _, err := normalizeGTID(bi.GTID); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if ahead := domainsBehind(m.GTIDPosition, bi.GTID); len(ahead) > 0 {
		return fmt.Errorf("%w: the restored data's %s holds GTID position %q, ahead of the manifest's %q in %s",
			ErrCorrupt, name, bi.GTID, m.GTIDPosition, strings.Join(ahead, ", "))
	}
	return nil
}

// Verify reads the manifest of the backup under prefix, then downloads every object and
// checks its size and sha256 against the manifest, without extracting anything: a check
// before use and for scheduled verification. A mismatch or a missing object fails with an
// error wrapping ErrCorrupt that names the object and both digests; a backup without a
// manifest with one wrapping ErrIncomplete.
func Verify(ctx context.Context, store objectstore.Store, prefix string) (*Manifest, error) {
	prefix = normPrefix(prefix)
	m, err := ReadManifest(ctx, store, prefix)
	if err != nil {
		return nil, err
	}
	if err := verifyObjects(ctx, store, prefix, m); err != nil {
		return nil, fmt.Errorf("verifying %s: %w", objectstore.Locate(store, prefix), err)
	}
	return m, nil
}

func verifyObjects(ctx context.Context, store objectstore.Store, prefix string, m *Manifest) error {
	for _, o := range m.Objects {
		key := prefix + o.Key
		rc, err := store.Open(ctx, key)
		if errors.Is(err, objectstore.ErrNotFound) {
			return fmt.Errorf("%w: object %s is missing: %w", ErrCorrupt, key, err)
		}
		if err != nil {
			return fmt.Errorf("opening %s: %w", key, err)
		}
		src := objectstore.NewDigestReader(rc, nil)
		_, err = io.CopyBuffer(io.Discard, io.LimitReader(src, o.Size+1), make([]byte, copyBuffer))
		rc.Close()
		if err != nil {
			return fmt.Errorf("reading %s: %w", key, err)
		}
		if err := compareObject(key, o, src.Digest); err != nil {
			return err
		}
	}
	return nil
}
