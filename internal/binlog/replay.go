package binlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// ReplayOptions configures Replay.
type ReplayOptions struct {
	// Store and Prefix hold the archive.
	Store  objectstore.Store
	Prefix string
	// From is the GTID position the target holds: the base backup's position. The target's
	// @@gtid_binlog_pos must equal it before the replay (see Replay).
	From string
	// To is the GTID position to stop at (inclusive); "" replays everything archived. Domains
	// To does not name must stay at From's position: name every domain that has transactions
	// after From (a replay that moved another domain fails its final check).
	To string
	// MySQLArgs run the mariadb client against the target, e.g. "--defaults-file=my.cnf" (it
	// must come first) or "--socket=/run/mysqld.sock", "--user=root". Options only.
	MySQLArgs []string
	// TmpDir receives the decompressed segments while they are replayed (removed after);
	// os.TempDir() when empty. It needs room for the segments' raw bytes.
	TmpDir string
	// MariaDBBinlog and MariaDB are the tools' paths; "mariadb-binlog" and "mariadb" on PATH
	// when empty.
	MariaDBBinlog string
	MariaDB       string
}

// ReplayResult describes a replay that reached its target.
type ReplayResult struct {
	// Position is the target's @@gtid_binlog_pos afterwards: the requested position.
	Position string
	// Segments are the names of the segments replayed, in order.
	Segments []string
	// RawBytes is the size of the binlog files given to mariadb-binlog.
	RawBytes int64
}

// Replay applies archived transactions after From up to To onto the target server: it picks
// the segments covering (From, To] (an error naming the archived range when To or From is
// outside it, or when a gap or damaged segment lies in between), downloads each with its
// sha256 checked (a mismatch is an error naming the object), and pipes
// `mariadb-binlog --start-position=From --stop-position=To <segments>` into `mariadb`,
// checking both exit codes. It then reads the target's @@gtid_binlog_pos and fails unless it
// is exactly the requested position — the tools' exit status alone proves nothing (a stop
// position never reached only warns).
//
// The target must have log_bin on (the replayed transactions keep their GTIDs in its binary
// log) and, before the replay, @@gtid_binlog_pos equal to From: restore the base backup
// without writing to the binary log (sql_log_bin=0), then RESET MASTER and SET GLOBAL
// gtid_binlog_state = From. Any local write before the replay takes a GTID that makes the
// replay fail or skip transactions, so Replay checks this first.
func Replay(ctx context.Context, opts ReplayOptions) (*ReplayResult, error) {
	if opts.Store == nil {
		return nil, errors.New("binlog replay: Store is not set")
	}
	prefix := normPrefix(opts.Prefix)
	from, err := Parse(opts.From)
	if err != nil {
		return nil, fmt.Errorf("binlog replay: From: %w", err)
	}
	to, err := Parse(opts.To)
	if err != nil {
		return nil, fmt.Errorf("binlog replay: To: %w", err)
	}
	binlogTool, err := findTool(opts.MariaDBBinlog, "mariadb-binlog")
	if err != nil {
		return nil, fmt.Errorf("binlog replay: %w", err)
	}
	client, err := findTool(opts.MariaDB, "mariadb")
	if err != nil {
		return nil, fmt.Errorf("binlog replay: %w", err)
	}
	l, err := ListSegments(ctx, opts.Store, prefix)
	if err != nil {
		return nil, fmt.Errorf("binlog replay: %w", err)
	}
	plan, err := planReplay(l, from, to, opts.To == "")
	if err != nil {
		toDesc := fmt.Sprintf("%q", opts.To)
		if opts.To == "" {
			toDesc = "the archive's end"
		}
		return nil, fmt.Errorf("binlog replay from %q to %s in %s: %w", from, toDesc, objectstore.Locate(opts.Store, prefix), err)
	}
	res := &ReplayResult{}
	for _, m := range plan.segments {
		res.Segments = append(res.Segments, m.Name())
		res.RawBytes += m.RawBytes
	}

	// The target must hold exactly From, or the replay would skip or refuse transactions.
	before, err := targetPosition(ctx, client, opts.MySQLArgs)
	if err != nil {
		return nil, fmt.Errorf("binlog replay: %w", err)
	}
	if !before.Equal(from) {
		return nil, fmt.Errorf("binlog replay: the target's @@gtid_binlog_pos is %q, want From %q: restore the base with sql_log_bin=0, then RESET MASTER and SET GLOBAL gtid_binlog_state='%s' before replaying (a write on the target took a GTID)",
			before, from, from)
	}
	if len(plan.segments) > 0 {
		if err := runReplay(ctx, opts, prefix, binlogTool, client, from, plan); err != nil {
			return nil, fmt.Errorf("binlog replay from %q to %q: %w", from, plan.target, err)
		}
		// From here on the target holds what was applied: a failure means restoring the base again.
	}
	after, err := targetPosition(ctx, client, opts.MySQLArgs)
	if err != nil {
		return nil, fmt.Errorf("binlog replay: after replaying %d segments: %w", len(plan.segments), err)
	}
	if !after.Equal(plan.target) {
		return nil, fmt.Errorf("binlog replay: the target's @@gtid_binlog_pos is %q after replaying segments %s, want %q: the replay did not land on its target (restore the base again before another replay)",
			after, strings.Join(res.Segments, ", "), plan.target)
	}
	res.Position = after.String()
	return res, nil
}

// replayPlan is what Replay applies.
type replayPlan struct {
	segments []*Manifest
	// target is the position the target must end at; stop the --stop-position list (only
	// the domains that advance beyond From; empty: no stop position).
	target Position
	stop   Position
}

// planReplay chooses the segments holding the transactions after from up to to (or the
// archive's end when toEnd), refusing positions outside the archive and gaps or damage in
// the chosen range. It is pure.
func planReplay(l *Listing, from, to Position, toEnd bool) (replayPlan, error) {
	if len(l.Segments) == 0 {
		return replayPlan{}, fmt.Errorf("%w: nothing is archived", ErrOutsideArchive)
	}
	first, last := l.Segments[0], l.Last()
	target := last.end
	if !toEnd {
		target = from.With(to)
	}
	switch {
	case !from.Covers(first.start) || !last.end.Covers(from):
		return replayPlan{}, fmt.Errorf("%w: From %q is not inside the archive, %s", ErrOutsideArchive, from, l.Range())
	case !target.Covers(from):
		return replayPlan{}, fmt.Errorf("To %q is before From %q in some domain: a replay only goes forward", to, from)
	case !last.end.Covers(target):
		return replayPlan{}, fmt.Errorf("%w: To %q is beyond the archive, %s", ErrOutsideArchive, to, l.Range())
	}
	lo, hi := -1, -1
	for i, m := range l.Segments {
		if !from.Covers(m.end) && !m.start.Covers(target) {
			if lo < 0 {
				lo = i
			}
			hi = i
		}
	}
	p := replayPlan{target: target}
	for _, d := range target.Domains() {
		g, _ := target.Last(d)
		if !from.Contains(g) {
			if err := p.stop.Advance(g); err != nil {
				return replayPlan{}, err
			}
		}
	}
	if lo < 0 || p.stop.IsEmpty() {
		return p, nil // nothing to apply: From is the target
	}
	p.segments = l.Segments[lo : hi+1]
	if !from.Covers(p.segments[0].start) {
		return replayPlan{}, fmt.Errorf("%w: segment %s starts at %q, after From %q", ErrGap, p.segments[0].Name(), p.segments[0].Start, from)
	}
	for i, m := range p.segments {
		if err := l.damaged[m.Name()]; err != nil {
			return replayPlan{}, fmt.Errorf("%w; a replay can reach %q (the segment's start) at most", err, m.Start)
		}
		if i > 0 && !m.start.Equal(p.segments[i-1].end) {
			return replayPlan{}, fmt.Errorf("%w between segment %s (ends at %q) and segment %s (starts at %q): a replay can reach %q at most",
				ErrGap, p.segments[i-1].Name(), p.segments[i-1].End, m.Name(), m.Start, p.segments[i-1].End)
		}
	}
	return p, nil
}

// runReplay downloads the plan's segments into a private directory and pipes mariadb-binlog
// into mariadb.
func runReplay(ctx context.Context, opts ReplayOptions, prefix, binlogTool, client string, from Position, plan replayPlan) error {
	dir, err := os.MkdirTemp(opts.TmpDir, "binlog-replay-")
	if err != nil {
		return fmt.Errorf("%w (set TmpDir to a writable directory)", err)
	}
	defer os.RemoveAll(dir)
	var files []string
	for _, m := range plan.segments {
		path := filepath.Join(dir, fmt.Sprintf("%04d-%010d.binlog", m.Epoch, m.Number))
		if err := fetchSegment(ctx, opts.Store, prefix, m, path); err != nil {
			if errors.Is(err, ErrCorrupt) {
				return fmt.Errorf("%w; a replay can reach %q (the segment's start) at most", err, m.Start)
			}
			return err
		}
		files = append(files, path)
	}
	args := []string{}
	if !from.IsEmpty() {
		args = append(args, "--start-position="+from.String())
	}
	if !plan.stop.IsEmpty() {
		args = append(args, "--stop-position="+plan.stop.String())
	}
	args = append(args, files...)
	dump := exec.CommandContext(ctx, binlogTool, args...)
	apply := exec.CommandContext(ctx, client, append(append([]string{}, opts.MySQLArgs...), "--binary-mode")...)
	var dumpErr, applyErr tailBuffer
	dump.Stderr, apply.Stderr = &dumpErr, &applyErr
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	dump.Stdout, apply.Stdin = pw, pr
	if err := apply.Start(); err != nil {
		pr.Close()
		pw.Close()
		return fmt.Errorf("starting %s: %w", client, err)
	}
	pr.Close()
	if err := dump.Start(); err != nil {
		pw.Close()
		_ = apply.Wait()
		return fmt.Errorf("starting %s: %w", binlogTool, err)
	}
	pw.Close()
	dErr := dump.Wait()
	aErr := apply.Wait()
	// The client's failure explains the dump's (a broken pipe), so it is reported first.
	if aErr != nil {
		return fmt.Errorf("%s failed applying the segments (the target may hold part of them: restore the base again): %w: %s (mariadb-binlog: %s)",
			filepath.Base(client), aErr, applyErr.text(), dumpErr.text())
	}
	if dErr != nil {
		return fmt.Errorf("%s failed reading the segments (the target may hold part of them: restore the base again): %w: %s",
			filepath.Base(binlogTool), dErr, dumpErr.text())
	}
	return nil
}

// targetPosition reads the target's @@gtid_binlog_pos with the mariadb client and checks
// that it writes a binary log.
func targetPosition(ctx context.Context, client string, mysqlArgs []string) (Position, error) {
	args := append(append([]string{}, mysqlArgs...), "--batch", "--skip-column-names", "-e", "SELECT @@log_bin, @@gtid_binlog_pos")
	cmd := exec.CommandContext(ctx, client, args...)
	var stderr tailBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return Position{}, fmt.Errorf("reading the target's @@gtid_binlog_pos with %s: %w: %s", filepath.Base(client), err, stderr.text())
	}
	fields := strings.SplitN(strings.TrimRight(string(out), "\r\n"), "\t", 2)
	if len(fields) != 2 {
		return Position{}, fmt.Errorf("reading the target's @@gtid_binlog_pos: unexpected output %q", out)
	}
	if fields[0] != "1" {
		return Position{}, errors.New("the target has log_bin off: replayed transactions would leave no GTID position to check; start it with log_bin")
	}
	p, err := Parse(fields[1])
	if err != nil {
		return Position{}, fmt.Errorf("the target's @@gtid_binlog_pos: %w", err)
	}
	return p, nil
}

// findTool returns path, or name looked up on PATH when path is empty.
func findTool(path, name string) (string, error) {
	if path != "" {
		return path, nil
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s not found on PATH (install the MariaDB client, or set its path in ReplayOptions): %w", name, err)
	}
	return p, nil
}

// tailBuffer keeps the last tailMax bytes written to it.
type tailBuffer struct{ b []byte }

const tailMax = 8 << 10

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > tailMax {
		t.b = append(t.b[:0], t.b[len(t.b)-tailMax:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) text() string {
	s := strings.TrimSpace(string(bytes.ToValidUTF8(t.b, []byte("?"))))
	if s == "" {
		return "(no output)"
	}
	return s
}
