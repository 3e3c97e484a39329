package binlog

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/objectstore/s3test"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// Settings of TestBenchPITR (make bench-pitr sets them).
const (
	benchPITRSecondsEnv = "DOLPHIN_BENCH_PITR_SECONDS"     // how long the writers write (required)
	benchPITRWritersEnv = "DOLPHIN_BENCH_PITR_WRITERS"     // concurrent writers (default 4)
	benchPITRAgeEnv     = "DOLPHIN_BENCH_PITR_SEGMENT_AGE" // the archiver's SegmentMaxAge (default: Dolphin's)
)

// archiveLagTarget is the RPO target for the archive lag under load.
const archiveLagTarget = 5 * time.Second

// TestBenchPITR measures point-in-time recovery as Dolphin deploys it: a primary with lossless
// semi-sync to one replica, concurrent writers on the primary, and the archiver reading from
// the replica into a real S3 server (versitygw) with Dolphin's default segment settings.
//
//   - Archive lag, per acknowledged write: from the client's acknowledgement to the first
//     moment the archiver reports a stored segment holding its GTID (polled every 10 ms).
//   - Replay speed: the whole archive applied to an empty server (configured as a restore's
//     temporary server: commits not flushed one by one) by Dolphin's Replay
//     (download from S3, sha256, zstd, `mariadb-binlog | mariadb`) against the engine's own
//     `mariadb-binlog <files> | mariadb` on the same segments already on local disk; twice
//     each, alternating targets, best of two. replay_ratio is Dolphin's speed over the tool's.
//   - Exact restores: replays to two GTIDs, a time and the end each give exactly the rows
//     that target holds (by GTID from the writers' acknowledgements; a time resolves to the
//     last commit before it, checked against the acknowledgement and statement times that
//     bound each commit), the end the source's table and checksum.
//
// The figures go to the test log and DOLPHIN_BENCH_OUT, ending with
// `pitr archive_lag_p50=…s archive_lag_p99=…s replay_ratio=… restores_exact=K/K`.
// The test fails on an inexact restore or a lost acknowledged write, never on speed.
func TestBenchPITR(t *testing.T) {
	secs, _ := strconv.Atoi(os.Getenv(benchPITRSecondsEnv))
	if secs <= 0 {
		t.Skip("set " + benchPITRSecondsEnv + " (make bench-pitr)")
	}
	s3test.RequireVersitygw(t)
	writers := 4
	if v, err := strconv.Atoi(os.Getenv(benchPITRWritersEnv)); err == nil && v > 0 {
		writers = v
	}
	age := DefaultSegmentMaxAge
	if v := os.Getenv(benchPITRAgeEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a duration such as 5s", benchPITRAgeEnv, v)
		}
		age = d
	}
	rep := testenv.NewBenchReport(t)

	srvs := startServers(t, 2)
	primary, replica := srvs[0], srvs[1]
	// The restore targets run as a restore's temporary server does (internal/restore):
	// commits not flushed one by one.
	targets := startServersWith(t, 2, map[string]string{"sync_binlog": "0", "innodb_flush_log_at_trx_commit": "2"})
	replicateSemiSync(t, primary, replica)
	createApp(primary)

	gw := s3test.Start(t)
	store, err := objectstore.NewS3(t.Context(), gw.Config(""))
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "pitr/"
	var ep atomic.Pointer[Endpoint]
	e := replica.endpoint()
	ep.Store(&e)
	a, _ := runArchiver(t, ArchiverOptions{Store: store, Prefix: prefix, SegmentMaxAge: age}, &ep)
	samples := sampleArchived(t, a)

	t.Logf("step: %d writers for %ds through lossless semi-sync; the archiver reads the replica (segment max age %v)", writers, secs, age)
	ws := make([]*writer, writers)
	for i := range ws {
		ws[i] = startWriter(t, primary)
	}
	began := time.Now()
	time.Sleep(time.Duration(secs) * time.Second)
	var acks []ack
	var failed int64
	for _, w := range ws {
		acks = append(acks, w.halt()...)
		failed += w.failed.Load()
	}
	wrote := time.Since(began)
	if failed > 0 {
		t.Fatalf("%d writes failed without a fault injected: the restores could not be checked exactly", failed)
	}
	slices.SortFunc(acks, func(x, y ack) int { return cmp.Compare(x.gtid.Seq, y.gtid.Seq) })
	end := primary.pos()
	waitArchived(t, a, end)
	archived := samples.stop()

	lags := archiveLags(acks, archived)
	l, err := ListSegments(t.Context(), store, prefix)
	if err != nil || l.Err() != nil {
		t.Fatalf("ListSegments: %v %v", err, l.Err())
	}
	var stored, raw int64
	for _, m := range l.Segments {
		stored += m.StoredBytes
		raw += m.RawBytes
	}
	rep.Add("load: writers=%d seconds=%.1f acknowledged=%d tx/s=%.0f segments=%d raw_bytes=%d stored_bytes=%d segment_max_age=%v",
		writers, wrote.Seconds(), len(acks), float64(len(acks))/wrote.Seconds(), len(l.Segments), raw, stored, age)
	p50, p90, p99, worst := percentile(lags, 50), percentile(lags, 90), percentile(lags, 99), percentile(lags, 100)
	met := "met"
	if p99 > archiveLagTarget {
		met = "NOT met"
	}
	rep.Add("archive lag (client ack → stored segment, %d writes): p50=%.2fs p90=%.2fs p99=%.2fs max=%.2fs; target p99 ≤ %v %s",
		len(lags), p50.Seconds(), p90.Seconds(), p99.Seconds(), worst.Seconds(), archiveLagTarget, met)

	// Replay speed: the same segments, Dolphin's Replay from S3 against the tool on local files.
	files, events := localSegments(t, store, prefix, l)
	var dolphinBest, toolBest time.Duration
	for round := range 2 {
		for i, who := range []string{"mariadb-binlog | mariadb", "dolphin Replay"} {
			tg := targets[(round+i)%2]
			tg.emptyApp()
			began := time.Now()
			if i == 0 {
				replayWithTool(t, tg, files)
			} else if _, err := Replay(t.Context(), ReplayOptions{Store: store, Prefix: prefix, MySQLArgs: tg.mysqlArgs(), TmpDir: t.TempDir()}); err != nil {
				t.Fatalf("Replay: %v", err)
			}
			took := time.Since(began)
			if got := tg.pos(); !got.Equal(end) {
				t.Fatalf("%s left %s at %q, the source is at %q", who, tg.inst.Name, got, end)
			}
			if x, y := tg.checksum("app.w"), primary.checksum("app.w"); x != y {
				t.Fatalf("%s: app.w checksum %s, the source's %s", who, x, y)
			}
			t.Logf("step: round %d: %s onto %s: %.2fs", round+1, who, tg.inst.Name, took.Seconds())
			best := &toolBest
			if i == 1 {
				best = &dolphinBest
			}
			if *best == 0 || took < *best {
				*best = took
			}
		}
	}
	rep.Add("replay (best of 2, %d events, %d raw bytes): dolphin seconds=%.2f events/s=%.0f MB/s=%.1f (download, sha256, zstd and apply); mariadb-binlog | mariadb on local files seconds=%.2f events/s=%.0f MB/s=%.1f",
		events, raw, dolphinBest.Seconds(), float64(events)/dolphinBest.Seconds(), testenv.MBps(raw, dolphinBest),
		toolBest.Seconds(), float64(events)/toolBest.Seconds(), testenv.MBps(raw, toolBest))
	ratio := toolBest.Seconds() / dolphinBest.Seconds()

	// Exact restores.
	exact, total := 0, 0
	restore := func(what, to string, want []int64) {
		t.Helper()
		total++
		tg := targets[0]
		tg.emptyApp()
		res, err := Replay(t.Context(), ReplayOptions{Store: store, Prefix: prefix, To: to, MySQLArgs: tg.mysqlArgs(), TmpDir: t.TempDir()})
		if err != nil {
			t.Errorf("restore to %s: %v", what, err)
			return
		}
		got := tg.ids("app.w")
		if !slices.Equal(got, want) {
			t.Errorf("restore to %s (%s): %d rows, want %d (%s)", what, res.Position, len(got), len(want), firstDifference(got, want))
			rep.Add("restore to %s: position %s, %d rows, want %d: NOT exact", what, res.Position, len(got), len(want))
			return
		}
		exact++
		rep.Add("restore to %s: position %s, %d rows, exact", what, res.Position, len(got))
	}
	upTo := func(seq uint64) []int64 {
		var ids []int64
		for _, k := range acks {
			if k.gtid.Seq <= seq {
				ids = append(ids, k.id)
			}
		}
		slices.Sort(ids)
		return ids
	}
	for _, k := range []ack{acks[len(acks)/3], acks[len(acks)*2/3]} {
		restore("GTID "+k.gtid.String(), k.gtid.String(), upTo(k.gtid.Seq))
	}
	// A time: just before a whole second in the middle of the run. It resolves to the last
	// transaction whose commit event (stamped in whole seconds) is before that second, and the
	// restore must hold exactly the rows up to that GTID. The resolution itself is checked
	// against both clocks that bound a commit: every row acknowledged before the second was
	// committed before it and is in; no row whose statement started (NOW(6)) at or after the
	// second can have committed before it and is out.
	second := acks[len(acks)/2].at.Truncate(time.Second).Add(time.Second)
	at := second.Add(-time.Millisecond)
	resolved, err := ResolveTime(t.Context(), store, prefix, at)
	if err != nil {
		t.Fatalf("ResolveTime(%v): %v", at, err)
	}
	resolvedPos, err := Parse(resolved)
	if err != nil {
		t.Fatal(err)
	}
	byTime := upTo(resolvedPos.lastSeq(t))
	for _, k := range acks {
		if _, in := slices.BinarySearch(byTime, k.id); k.at.Before(second) && !in {
			t.Errorf("time %v resolved to %s, without row %d acknowledged at %v", at, resolved, k.id, k.at)
		}
	}
	for _, id := range primary.idsWhere(fmt.Sprintf("at >= FROM_UNIXTIME(%d)", second.Unix())) {
		if _, in := slices.BinarySearch(byTime, id); in {
			t.Errorf("time %v resolved to %s, with row %d whose statement started after it", at, resolved, id)
		}
	}
	restore(fmt.Sprintf("time %s (GTID %s)", at.UTC().Format(time.RFC3339Nano), resolved), resolved, byTime)
	all := upTo(end.lastSeq(t))
	if src := primary.ids("app.w"); !slices.Equal(src, all) {
		t.Errorf("the source holds %d rows, the writers acknowledged %d", len(src), len(all))
	}
	restore("latest", "", all)
	if x, y := targets[0].checksum("app.w"), primary.checksum("app.w"); x != y {
		t.Errorf("latest restore: app.w checksum %s, the source's %s", x, y)
	}
	lost := 0
	restored := targets[0].ids("app.w")
	for _, k := range acks {
		if _, ok := slices.BinarySearch(restored, k.id); !ok {
			lost++
		}
	}
	rep.Add("lost_acked_writes=%d (acknowledged rows missing from the latest restore)", lost)
	rep.Summary = fmt.Sprintf("pitr archive_lag_p50=%.2fs archive_lag_p99=%.2fs replay_ratio=%.2f restores_exact=%d/%d",
		p50.Seconds(), p99.Seconds(), ratio, exact, total)
}

// replicateSemiSync makes replica replicate from primary by GTID with lossless semi-sync, as
// Dolphin configures them, and waits until the primary has its semi-sync client.
func replicateSemiSync(t *testing.T, primary, replica *server) {
	t.Helper()
	primary.execNoBinlog("CREATE USER 'bench-repl'@'%' IDENTIFIED BY 'repl-pw'", "GRANT REPLICATION SLAVE ON *.* TO 'bench-repl'@'%'")
	primary.exec("SET GLOBAL rpl_semi_sync_master_enabled = ON", "SET GLOBAL rpl_semi_sync_master_wait_point = AFTER_SYNC")
	replica.exec("SET GLOBAL rpl_semi_sync_slave_enabled = ON",
		fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='%s', MASTER_PORT=%d, MASTER_USER='bench-repl', MASTER_PASSWORD='repl-pw', MASTER_USE_GTID=slave_pos",
			primary.inst.Host, primary.inst.Port),
		"START SLAVE")
	waitFor(t, "the semi-sync replica", func() (bool, string) {
		var name, v string
		if err := primary.db.QueryRow("SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_clients'").Scan(&name, &v); err != nil {
			return false, err.Error()
		}
		return v == "1", "Rpl_semi_sync_master_clients=" + v
	})
}

// emptyApp makes s an empty restore target: no app database, an empty binary log.
func (s *server) emptyApp() {
	s.t.Helper()
	s.execNoBinlog("DROP DATABASE IF EXISTS app")
	s.resetTo(Position{})
}

// idsWhere returns app.w's ids matching cond, in order.
func (s *server) idsWhere(cond string) []int64 {
	s.t.Helper()
	return s.idList("SELECT id FROM app.w WHERE " + cond + " ORDER BY id")
}

// lastSeq is the sequence number of the position's last GTID in domain 0.
func (p Position) lastSeq(t *testing.T) uint64 {
	g, ok := p.Last(0)
	if !ok {
		t.Fatalf("position %q has no domain 0", p)
	}
	return g.Seq
}

// archivedAt is the archiver's reported position at a moment.
type archivedAt struct {
	at  time.Time
	pos Position
}

// archiveSampler polls an archiver's position.
type archiveSampler struct {
	mu      sync.Mutex
	samples []archivedAt
	done    chan struct{}
	stopped chan struct{}
}

// sampleArchived records every change of a's archived position (polled every 10 ms) until
// stop is called.
func sampleArchived(t *testing.T, a *Archiver) *archiveSampler {
	s := &archiveSampler{done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(s.stopped)
		last := ""
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.done:
				return
			case now := <-tick.C:
				if p := a.Status().Position; p != last {
					pos, err := Parse(p)
					if err != nil {
						t.Errorf("archiver position %q: %v", p, err)
						return
					}
					last = p
					s.mu.Lock()
					s.samples = append(s.samples, archivedAt{at: now, pos: pos})
					s.mu.Unlock()
				}
			}
		}
	}()
	t.Cleanup(func() { s.stop() })
	return s
}

func (s *archiveSampler) stop() []archivedAt {
	select {
	case <-s.done:
	default:
		close(s.done)
	}
	<-s.stopped
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.samples)
}

// archiveLags is, for each acknowledged write, the time from its acknowledgement to the first
// sample whose archived position holds it (0 when the archive had it first). samples are in
// time order and their positions only grow.
func archiveLags(acks []ack, samples []archivedAt) []time.Duration {
	var out []time.Duration
	for _, k := range acks {
		i, _ := slices.BinarySearchFunc(samples, k.gtid, func(s archivedAt, g GTID) int {
			if s.pos.Contains(g) {
				return 1
			}
			return -1
		})
		if i == len(samples) {
			continue // never seen archived: the test fails on the restores
		}
		out = append(out, max(samples[i].at.Sub(k.at), 0))
	}
	return out
}

// percentile returns the p-th percentile (nearest rank) of ds; 0 for none.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[min(max(i-1, 0), len(s)-1)]
}

// localSegments downloads every segment of l (sha256 checked) into a directory and counts
// their events, for the tool's baseline replay.
func localSegments(t *testing.T, store objectstore.Store, prefix string, l *Listing) ([]string, int) {
	t.Helper()
	dir := t.TempDir()
	var files []string
	events := 0
	parser := newParser()
	for _, m := range l.Segments {
		path := filepath.Join(dir, fmt.Sprintf("%04d-%010d.binlog", m.Epoch, m.Number))
		if err := fetchSegment(t.Context(), store, normPrefix(prefix), m, path); err != nil {
			t.Fatal(err)
		}
		if err := parser.ParseFile(path, 4, func(*replication.BinlogEvent) error { events++; return nil }); err != nil {
			t.Fatalf("parsing %s: %v", path, err)
		}
		files = append(files, path)
	}
	return files, events
}

// replayWithTool runs `mariadb-binlog files | mariadb --binary-mode` against s, as an
// operator without Dolphin would.
func replayWithTool(t *testing.T, s *server, files []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	script := `mariadb-binlog "$@" | mariadb --defaults-file="$DEFAULTS" --binary-mode; rc=$?; [ "${PIPESTATUS[0]}" = 0 ] && exit $rc; exit 1`
	cmd := exec.CommandContext(ctx, "bash", append([]string{"-c", script, "replay"}, files...)...)
	cmd.Env = append(os.Environ(), "DEFAULTS="+s.inst.ConfigFile)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mariadb-binlog | mariadb onto %s: %v\n%s", s.inst.Name, err, out)
	}
}

// firstDifference describes where two sorted id lists first differ.
func firstDifference(got, want []int64) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("first difference at row %d: got id %d, want %d", i, got[i], want[i])
		}
	}
	if len(got) > len(want) {
		return fmt.Sprintf("extra ids from %d", got[len(want)])
	}
	if len(want) > len(got) {
		return fmt.Sprintf("missing ids from %d", want[len(got)])
	}
	return "equal"
}
