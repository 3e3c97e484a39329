package binlog

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// ListKept reads the manifests of the kept copies under prefix, oldest first. A manifest
// that cannot be read is an error naming it (a copy is never silently left out).
func ListKept(ctx context.Context, store objectstore.Store, prefix string) ([]KeptCopy, error) {
	objs, err := store.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("listing kept copies: %w", err)
	}
	var out []KeptCopy
	for _, o := range objs {
		if !strings.HasSuffix(o.Key, keptManifestSuffix) {
			continue
		}
		m, err := readKept(ctx, store, o.Key)
		if err != nil {
			return nil, err
		}
		out = append(out, *m)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

// GetKept reads the manifest of the copy named name.
func GetKept(ctx context.Context, store objectstore.Store, prefix, name string) (*KeptCopy, error) {
	return readKept(ctx, store, prefix+name+keptManifestSuffix)
}

func readKept(ctx context.Context, store objectstore.Store, key string) (*KeptCopy, error) {
	where := objectstore.Locate(store, key)
	rc, err := store.Open(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", where, err)
	}
	defer rc.Close()
	var m KeptCopy
	dec := json.NewDecoder(io.LimitReader(rc, 1<<20))
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s is not a kept copy's manifest: %w", where, err)
	}
	if m.Format < 1 || m.Format > KeptFormat {
		return nil, fmt.Errorf("%s: format %d, this version reads 1 to %d", where, m.Format, KeptFormat)
	}
	return &m, nil
}

// CopyKept copies a kept copy from one store to another: its binlog object, then its
// manifest (a copy without a manifest does not exist), the object checked against the
// manifest's size and sha256 on the way.
func CopyKept(ctx context.Context, from objectstore.Store, fromPrefix string, to objectstore.Store, toPrefix string, m *KeptCopy) error {
	rc, err := from.Open(ctx, fromPrefix+m.Object)
	if err != nil {
		return err
	}
	defer rc.Close()
	up, err := to.Create(ctx, toPrefix+m.Object)
	if err != nil {
		return err
	}
	h := objectstore.NewDigestReader(rc, nil)
	if _, err := io.Copy(up, h); err != nil {
		return errors.Join(err, up.Abort())
	}
	if sum := h.Digest.SHA256(); h.Digest.Size() != m.StoredBytes || sum != m.SHA256 {
		return errors.Join(fmt.Errorf("%w: %s has %d bytes with sha256 %s, the manifest says %d and %s",
			ErrCorrupt, objectstore.Locate(from, fromPrefix+m.Object), h.Digest.Size(), sum, m.StoredBytes, m.SHA256), up.Abort())
	}
	if _, err := up.Commit(); err != nil {
		return err
	}
	return writeJSON(ctx, to, toPrefix+m.Name+keptManifestSuffix, m)
}

// FetchKept downloads and decompresses the copy's binlog file into path, its size and
// sha256 checked against the manifest (an error wrapping ErrCorrupt otherwise).
func FetchKept(ctx context.Context, store objectstore.Store, prefix string, m *KeptCopy, path string) error {
	if m.Transactions == 0 {
		return fmt.Errorf("kept copy %s holds no transaction", m.Name)
	}
	if err := fetchObject(ctx, store, prefix+m.Object, m.StoredBytes, m.SHA256, m.RawBytes, path); err != nil {
		return fmt.Errorf("kept copy %s: %w", m.Name, err)
	}
	return nil
}

// KeptReplayOptions configures ReplayKept.
type KeptReplayOptions struct {
	Store  objectstore.Store
	Prefix string
	Name   string
	// MySQLArgs run the mariadb client against the primary (options only; a
	// --defaults-file first). The account needs the privileges of the transactions and of
	// BINLOG statements (BINLOG REPLAY) and of setting session variables (SUPER or the
	// narrower ones of the server version).
	MySQLArgs []string
	// After, an original GTID of the copy, replays only the transactions after it: the rest
	// of a replay that stopped at a conflict, once resolved.
	After string
	// TmpDir receives the copy while it is replayed; os.TempDir() when empty.
	TmpDir string
	// MariaDBBinlog and MariaDB are the tools; found on PATH when empty.
	MariaDBBinlog, MariaDB string
}

// KeptReplayResult says what a replay did.
type KeptReplayResult struct {
	// Before and After are the primary's @@gtid_binlog_pos around the replay.
	Before, After string
	// Transactions is how many transactions the copy held.
	Transactions int64
	// FailedAt is the original GTID of the transaction a stopped replay failed at ("" when it
	// did not stop, or the client's error named no line).
	FailedAt string
}

// sessionGTID matches the lines mariadb-binlog prints to give a replayed transaction its
// original GTID: a server id and a sequence number the primary's history has used already,
// which gtid_strict_mode refuses.
var sessionGTID = regexp.MustCompile(`^/\*M?!100001 SET @@session\.(server_id|gtid_seq_no)=\d+\*/`)

// ReplayKept applies a kept copy's transactions to the primary as new transactions: the
// primary gives each its own next GTID (the originals are history it has diverged from), so
// replicas and the archive receive them like any write. It pipes `mariadb-binlog <copy>`,
// without the statements that set the original server id and sequence number, into
// `mariadb`, one transaction after another; the first that fails stops the replay (the ones
// before it are committed: the error says so, with the primary's position before and after).
// Review the copy first (mariadb-binlog --verbose on FetchKept's file): a transaction that
// conflicts with what the primary wrote since is refused or, worse, applied.
func ReplayKept(ctx context.Context, opts KeptReplayOptions) (*KeptReplayResult, error) {
	m, err := GetKept(ctx, opts.Store, opts.Prefix, opts.Name)
	if err != nil {
		return nil, err
	}
	binlogTool, err := findTool(opts.MariaDBBinlog, "mariadb-binlog")
	if err != nil {
		return nil, err
	}
	client, err := findTool(opts.MariaDB, "mariadb")
	if err != nil {
		return nil, err
	}
	before, err := targetPosition(ctx, client, opts.MySQLArgs)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(opts.TmpDir, "kept-replay-")
	if err != nil {
		return nil, fmt.Errorf("%w (set TmpDir to a writable directory)", err)
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, m.Name+".binlog")
	if err := FetchKept(ctx, opts.Store, opts.Prefix, m, file); err != nil {
		return nil, err
	}
	res := &KeptReplayResult{Before: before.String(), Transactions: m.Transactions}
	dumpArgs := []string{file}
	if opts.After != "" {
		if _, err := ParseGTID(opts.After); err != nil {
			return nil, fmt.Errorf("after: %w", err)
		}
		dumpArgs = []string{"--start-position=" + opts.After, file}
	}
	marks, applyErr := pipeFiltered(ctx, exec.CommandContext(ctx, binlogTool, dumpArgs...),
		exec.CommandContext(ctx, client, append(append([]string{}, opts.MySQLArgs...), "--binary-mode")...))
	after, err := targetPosition(ctx, client, opts.MySQLArgs)
	if err != nil {
		return nil, errors.Join(applyErr, err)
	}
	res.After = after.String()
	if applyErr != nil {
		next := "resolve the conflict, then replay with --after <the original GTID of the last one applied>"
		failed, before := failedAt(applyErr.Error(), marks)
		res.FailedAt = failed
		switch {
		case failed != "" && before != "":
			next = fmt.Sprintf("transaction %s failed, those before it up to %s are committed: resolve the conflict, then replay with --after %s to go on from %s, or --after %s to skip it",
				failed, before, before, failed, failed)
		case failed != "" && opts.After != "":
			next = fmt.Sprintf("transaction %s, the first after %s, failed: nothing more is committed; resolve the conflict, then replay with --after %s again", failed, opts.After, opts.After)
		case failed != "":
			next = fmt.Sprintf("transaction %s, the first, failed: nothing is committed; resolve the conflict and replay again", failed)
		}
		return res, fmt.Errorf("replaying kept copy %s (%d transactions, %s) stopped: %w; the primary moved from %s to %s; %s",
			m.Name, m.Transactions, m.GTIDs, applyErr, res.Before, res.After, next)
	}
	return res, nil
}

// pipeFiltered runs dump | (drop sessionGTID lines) | apply and reports the apply side's
// failure first (it explains a broken pipe on the dump side), with where each transaction
// began in the input the client read.
func pipeFiltered(ctx context.Context, dump, apply *exec.Cmd) ([]gtidMark, error) {
	var dumpErr, applyErr tailBuffer
	dump.Stderr, apply.Stderr = &dumpErr, &applyErr
	out, err := dump.StdoutPipe()
	if err != nil {
		return nil, err
	}
	in, err := apply.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := apply.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", filepath.Base(apply.Path), err)
	}
	if err := dump.Start(); err != nil {
		in.Close()
		_ = apply.Wait()
		return nil, fmt.Errorf("starting %s: %w", filepath.Base(dump.Path), err)
	}
	marks, copyErr := filterLines(out, in)
	in.Close()
	dErr := dump.Wait()
	aErr := apply.Wait()
	switch {
	case aErr != nil:
		return marks, fmt.Errorf("%s: %w: %s", filepath.Base(apply.Path), aErr, applyErr.text())
	case dErr != nil:
		return marks, fmt.Errorf("%s: %w: %s", filepath.Base(dump.Path), dErr, dumpErr.text())
	case copyErr != nil:
		return marks, copyErr
	}
	return marks, ctx.Err()
}

// gtidMark is where a transaction begins in the filtered output: mariadb-binlog's comment
// line naming its original GTID, by line number (from 1).
type gtidMark struct {
	line int
	gtid string
}

// gtidComment finds the original GTID in the comment mariadb-binlog prints before a
// transaction ("#261205  2:17:00 server id 1  end_log_pos 123 ... GTID 0-1-23 trans").
var gtidComment = regexp.MustCompile(`^#.*\sGTID (\d+-\d+-\d+)`)

// filterLines copies r to w without the lines sessionGTID matches, and returns where each
// transaction begins in what it wrote. On a write error it drains r, so that the writer of r
// is not left blocked.
func filterLines(r io.Reader, w io.Writer) ([]gtidMark, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	bw := bufio.NewWriterSize(w, 1<<16)
	var marks []gtidMark
	fail := func(err error) ([]gtidMark, error) {
		_, _ = io.Copy(io.Discard, br)
		return marks, err
	}
	midLine, line := false, 0
	for {
		chunk, err := br.ReadSlice('\n')
		full := errors.Is(err, bufio.ErrBufferFull)
		// A long line (a BINLOG statement's base64) comes in pieces; only a line's start can
		// match.
		if len(chunk) > 0 && (midLine || !sessionGTID.Match(chunk)) {
			if !midLine {
				line++
				if m := gtidComment.FindSubmatch(chunk); m != nil {
					marks = append(marks, gtidMark{line: line, gtid: string(m[1])})
				}
			}
			if _, werr := bw.Write(chunk); werr != nil {
				return fail(werr)
			}
		}
		midLine = full
		switch {
		case full:
		case err == io.EOF:
			if werr := bw.Flush(); werr != nil {
				return fail(werr)
			}
			return marks, nil
		case err != nil:
			return fail(err)
		}
	}
}

// errorLine finds "at line N" in the mariadb client's error message.
var errorLine = regexp.MustCompile(`at line (\d+)`)

// failedAt names, from the client's error and the marks, the transaction that failed and the
// one before it ("" when the failure is not in a transaction the marks know).
func failedAt(msg string, marks []gtidMark) (failed, before string) {
	m := errorLine.FindStringSubmatch(msg)
	if m == nil {
		return "", ""
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		return "", ""
	}
	for i, mk := range marks {
		if mk.line > n {
			break
		}
		failed, before = mk.gtid, ""
		if i > 0 {
			before = marks[i-1].gtid
		}
	}
	return failed, before
}
