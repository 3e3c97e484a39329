package binlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestServerReplayToTimeGTIDAndEnd archives a server through two bursts of writes a second
// apart, then replays the archive onto a server restored to an empty state at a base
// position: to a time between the bursts (resolved from the segments' events), to a GTID in
// the second burst, then to the end. Each time exactly the rows committed up to the target
// are present and @@gtid_binlog_pos is the target; at the end the table's checksum is the
// source's. Transactions before the base are in the archive but never replayed.
func TestServerReplayToTimeGTIDAndEnd(t *testing.T) {
	srvs := startServers(t, 3)
	src, target, spare := srvs[0], srvs[1], srvs[2]
	// Before the base position: in the archive, but the target must not get them again.
	src.exec("CREATE DATABASE pre", "CREATE TABLE pre.x (id INT PRIMARY KEY)", "INSERT INTO pre.x VALUES (1)")
	base := src.pos()
	createApp(src)
	store, root := newStore(t)
	var ep atomic.Pointer[Endpoint]
	e := src.endpoint()
	ep.Store(&e)
	a, _ := runArchiver(t, ArchiverOptions{Store: store, Prefix: "r", SegmentMaxBytes: 16 << 10, SegmentMaxAge: 300 * time.Millisecond}, &ep)

	w1 := startWriter(t, src)
	waitFor(t, "the first burst", func() (bool, string) { return w1.count() >= 150, fmt.Sprintf("%d rows", w1.count()) })
	acks1 := w1.halt()
	p1 := src.pos()
	lastAck := acks1[len(acks1)-1].at
	waitFor(t, "the next second", func() (bool, string) { return time.Now().Unix() > lastAck.Unix(), "" })
	second := time.Now()
	// After every commit of the first burst (stamped at most lastAck's second), before any
	// of the second (stamped at least second's second).
	split := time.Unix(second.Unix(), 0).Add(-time.Millisecond)
	w2 := startWriter(t, src)
	waitFor(t, "the second burst", func() (bool, string) { return w2.count() >= 300, fmt.Sprintf("%d rows", w2.count()) })
	acks2 := w2.halt()
	mid := acks2[len(acks2)/2].gtid
	src.exec("UPDATE app.w SET v = CONCAT(v, '!') WHERE id % 7 = 0", "DELETE FROM app.w WHERE id % 11 = 0")
	end := src.pos()
	waitArchived(t, a, end)

	// Times.
	got, err := ResolveTime(t.Context(), store, "r", split)
	if err != nil || got != p1.String() {
		t.Fatalf("ResolveTime(%v) = %q, %v; want %q, the position after the first burst", split, got, err, p1)
	}
	l, _ := archivedTransactions(t, store, "r")
	if got, err := ResolveTime(t.Context(), store, "r", l.Last().MaxCommit); err != nil || got != end.String() {
		t.Errorf("ResolveTime(last commit) = %q, %v; want %q", got, err, end)
	}
	for _, tt := range []time.Time{l.Segments[0].FirstCommit.Add(-time.Second), l.Last().MaxCommit.Add(time.Second)} {
		if _, err := ResolveTime(t.Context(), store, "r", tt); !errors.Is(err, ErrOutsideArchive) || !strings.Contains(err.Error(), "to \""+end.String()+"\"") {
			t.Errorf("ResolveTime(%v) = %v, want ErrOutsideArchive naming the range", tt, err)
		}
	}

	// The restored target: the base holds pre's schema (replaying its transactions again would
	// fail) and nothing of app.
	target.execNoBinlog("CREATE DATABASE pre", "CREATE TABLE pre.x (id INT PRIMARY KEY)")
	target.resetTo(base)
	tmp := t.TempDir()
	replay := func(from, to string) *ReplayResult {
		t.Helper()
		began := time.Now()
		res, err := Replay(t.Context(), ReplayOptions{Store: store, Prefix: "r", From: from, To: to, MySQLArgs: target.mysqlArgs(), TmpDir: tmp})
		if err != nil {
			t.Fatalf("Replay(%q, %q): %v", from, to, err)
		}
		t.Logf("Replay(%q, %q): %d segments, %d bytes, %v", from, to, len(res.Segments), res.RawBytes, time.Since(began).Round(time.Millisecond))
		if got := target.pos(); got.String() != res.Position {
			t.Errorf("target at %q, Replay says %q", got, res.Position)
		}
		if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
			t.Errorf("TmpDir holds %v", ents)
		}
		return res
	}
	wantIDs := func(acks ...[]ack) []int64 {
		var ids []int64
		for _, as := range acks {
			for _, k := range as {
				ids = append(ids, k.id)
			}
		}
		slices.Sort(ids)
		return ids
	}

	if res := replay(base.String(), p1.String()); res.Position != p1.String() {
		t.Errorf("at %q, want %q", res.Position, p1)
	}
	if got, want := target.ids("app.w"), wantIDs(acks1); !slices.Equal(got, want) {
		t.Errorf("after replay to the time: %d rows, want the first burst's %d", len(got), len(want))
	}
	if n := target.str("SELECT COUNT(*) FROM pre.x"); n != "0" {
		t.Errorf("pre.x has %s rows: a transaction before the base was replayed", n)
	}

	midPos := p1.With(MustParse(mid.String()))
	replay(p1.String(), mid.String())
	var upToMid []ack
	for _, k := range acks2 {
		if k.gtid.Seq <= mid.Seq {
			upToMid = append(upToMid, k)
		}
	}
	if got, want := target.ids("app.w"), wantIDs(acks1, upToMid); !slices.Equal(got, want) {
		t.Errorf("after replay to %s: %d rows, want %d", mid, len(got), len(want))
	}

	replay(midPos.String(), "")
	if got, want := target.pos(), end; !got.Equal(want) {
		t.Errorf("target at %q, source at %q", got, want)
	}
	if a, b := target.checksum("app.w"), src.checksum("app.w"); a != b {
		t.Errorf("app.w checksum %s, source %s", a, b)
	}
	if got, want := target.ids("app.w"), src.ids("app.w"); !slices.Equal(got, want) {
		t.Errorf("target has %d rows, source %d", len(got), len(want))
	}

	// Refusals, before anything is applied (spare is a fresh server).
	if _, err := Replay(t.Context(), ReplayOptions{Store: store, Prefix: "r", From: base.String(), MySQLArgs: spare.mysqlArgs()}); err == nil ||
		!strings.Contains(err.Error(), "RESET MASTER") {
		t.Errorf("Replay onto a target not at From: %v", err)
	}
	spare.resetTo(base)
	if _, err := Replay(t.Context(), ReplayOptions{Store: store, Prefix: "r", From: base.String(), To: "0-1-999999", MySQLArgs: spare.mysqlArgs()}); !errors.Is(err, ErrOutsideArchive) ||
		!strings.Contains(err.Error(), end.String()) {
		t.Errorf("Replay beyond the archive: %v, want ErrOutsideArchive naming the range", err)
	}

	damaged := func(t *testing.T, damage func(dir string, l *Listing)) error {
		t.Helper()
		dir := t.TempDir()
		copyTree(t, root, dir)
		ds, err := objectstore.NewDirectory(dir)
		if err != nil {
			t.Fatal(err)
		}
		damage(filepath.Join(dir, "r"), l)
		_, err = Replay(t.Context(), ReplayOptions{Store: ds, Prefix: "r", From: base.String(), MySQLArgs: spare.mysqlArgs(), TmpDir: t.TempDir()})
		t.Logf("Replay: %v", err)
		if got := spare.pos(); !got.Equal(base) || spare.str("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = 'app'") != "0" {
			t.Errorf("a failed replay changed the target: at %q", got)
		}
		return err
	}
	victim := l.Segments[len(l.Segments)/2]
	t.Run("corrupt segment", func(t *testing.T) {
		err := damaged(t, func(dir string, _ *Listing) { testenv.FlipByte(t, filepath.Join(dir, victim.Object)) })
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "r/"+victim.Object) || !strings.Contains(err.Error(), victim.SHA256) {
			t.Errorf("Replay: %v; want ErrCorrupt naming r/%s and its sha256", err, victim.Object)
		}
	})
	t.Run("missing segment object", func(t *testing.T) {
		err := damaged(t, func(dir string, _ *Listing) { os.Remove(filepath.Join(dir, victim.Object)) })
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), victim.Name()) {
			t.Errorf("Replay: %v; want ErrCorrupt naming %s", err, victim.Name())
		}
	})
	t.Run("missing manifest", func(t *testing.T) {
		err := damaged(t, func(dir string, _ *Listing) { os.Remove(filepath.Join(dir, manifestKey(victim.Epoch, victim.Number))) })
		if !errors.Is(err, ErrGap) || !strings.Contains(err.Error(), victim.Start) {
			t.Errorf("Replay: %v; want ErrGap at %s", err, victim.Start)
		}
	})

	// Last, as it leaves spare half-replayed: the client failing is reported, although
	// mariadb-binlog's exit status is 0.
	spare.execNoBinlog("CREATE DATABASE app", "CREATE TABLE app.w (id INT PRIMARY KEY)")
	spare.resetTo(base)
	_, err = Replay(t.Context(), ReplayOptions{Store: store, Prefix: "r", From: base.String(), MySQLArgs: spare.mysqlArgs(), TmpDir: t.TempDir()})
	t.Logf("Replay onto a target that has app.w already: %v", err)
	if err == nil || !strings.Contains(err.Error(), "mariadb failed applying") || !strings.Contains(err.Error(), "1050") {
		t.Errorf("Replay onto a target that has app.w already: %v, want the client's failure", err)
	}
}
