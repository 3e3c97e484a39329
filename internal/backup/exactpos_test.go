package backup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestDomainsBehind(t *testing.T) {
	for _, c := range []struct {
		pos, ref string
		want     []string
	}{
		{"0-1-156", "0-1-155", nil},
		{"0-1-156,1-1-3", "0-1-156,1-1-3", nil},
		{"0-1-155", "0-1-156", []string{"domain 0 (seq 156)"}},
		{"0-1-156", "0-1-156,1-1-3", []string{"domain 1 (seq 3)"}},
		{"0-2-900", "0-1-150", nil}, // another server, later in the domain
		{"", "", nil},
	} {
		got := domainsBehind(c.pos, c.ref)
		slices.Sort(got)
		if !slices.Equal(got, c.want) {
			t.Errorf("domainsBehind(%q, %q) = %q, want %q", c.pos, c.ref, got, c.want)
		}
	}
}

// TestTakeRecordsTheExactPosition: the manifest holds the position BINLOG_GTID_POS gives for
// the tool's binary log coordinates, not the tool's own GTID, and a backup whose position
// cannot be known exactly is not kept.
func TestTakeRecordsTheExactPosition(t *testing.T) {
	tool := fakeBackupTool(t, t.TempDir(), "head -c 1000 /dev/urandom")
	store, root := newStore(t)
	opts := fakeOptions(t, tool)
	// The tool says 0-1-42 (its in-memory gtid_slave_pos); the data holds one more.
	opts.positionAt = fixedPosition("0-1-43,1-2-3")
	m, err := Take(t.Context(), opts, store)
	if err != nil {
		t.Fatal(err)
	}
	if m.GTIDPosition != "0-1-43,1-2-3" || m.ReplicaGTIDPosition != "0-1-42" || m.BinlogFile != "binlog.000007" || m.BinlogPosition != 99 {
		t.Errorf("manifest position %q (replica %q) at %s:%d, want 0-1-43,1-2-3 at binlog.000007:99",
			m.GTIDPosition, m.ReplicaGTIDPosition, m.BinlogFile, m.BinlogPosition)
	}

	for _, c := range []struct {
		name, pos, want string
	}{
		{"binary log purged", "", "no longer has the binary log binlog.000007"},
		{"behind the tool", "0-1-41,1-2-3", `behind the tool's "0-1-42,1-2-3" in domain 0 (seq 42)`},
		{"a domain missing", "0-1-42", "in domain 1 (seq 3)"},
		{"garbage", "0-1", "is not domain-server-sequence"},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := fakeOptions(t, tool)
			opts.Prefix = "ns/c/" + strings.ReplaceAll(c.name, " ", "-") + "/"
			opts.positionAt = fixedPosition(c.pos)
			_, err := Take(t.Context(), opts, store)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Take: %v, want an error saying %q", err, c.want)
			}
			for _, f := range storeFiles(t, root) {
				if strings.HasPrefix(f, opts.Prefix) {
					t.Errorf("the store holds %s of the failed backup", f)
				}
			}
		})
	}
}

// TestTakeRetriesRedoLogCopy: a run that fell behind copying the redo log (MDEV-39468) is
// retried, up to takeAttempts runs in all, and leaves nothing behind when every run fails.
func TestTakeRetriesRedoLogCopy(t *testing.T) {
	behind := `echo "[00] 2026-12-01 17:16:33 Was only able to copy log from 45518 to 479220, not 524079; try increasing innodb_log_file_size" >&2; exit 1`
	runs := filepath.Join(t.TempDir(), "runs")
	// Fails on its first run only.
	once := fakeBackupTool(t, t.TempDir(), fmt.Sprintf(`echo run >> %[1]s; head -c 100000 /dev/urandom
if [ "$(wc -l < %[1]s)" -eq 1 ]; then %[2]s; fi`, runs, behind))
	store, root := newStore(t)
	opts := fakeOptions(t, once)
	var logged []string
	opts.Log = func(format string, args ...any) { logged = append(logged, fmt.Sprintf(format, args...)) }
	m, err := Take(t.Context(), opts, store)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	if n := lines(t, runs); n != 2 || len(logged) != 1 || !strings.Contains(logged[0], "attempt 1 of 3") ||
		!strings.Contains(logged[0], "Was only able to copy log") {
		t.Errorf("%d runs, logged %q; want 2 runs and one line about attempt 1", n, logged)
	}
	if _, err := Verify(t.Context(), store, "ns/c/b/"); err != nil || m.Objects[0].RawSize != 100000 {
		t.Errorf("Verify: %v; object %+v", err, m.Objects[0])
	}

	// Fails every time: three runs, then the error, and nothing stored.
	runsAlways := filepath.Join(t.TempDir(), "runs")
	always := fakeBackupTool(t, t.TempDir(), fmt.Sprintf(`echo run >> %s; head -c 100000 /dev/urandom; %s`, runsAlways, behind))
	opts = fakeOptions(t, always)
	opts.Prefix = "ns/c/always/"
	_, err = Take(t.Context(), opts, store)
	if !errors.Is(err, ErrRedoLogCopy) || !strings.Contains(err.Error(), "not 524079") {
		t.Errorf("Take: %v, want ErrRedoLogCopy quoting the tool", err)
	}
	if n := lines(t, runsAlways); n != takeAttempts {
		t.Errorf("%d runs, want %d", n, takeAttempts)
	}
	for _, f := range storeFiles(t, root) {
		if strings.HasPrefix(f, "ns/c/always/") {
			t.Errorf("the store holds %s of the failed backup", f)
		}
	}

	// Any other failure is not retried.
	runsOther := filepath.Join(t.TempDir(), "runs")
	other := fakeBackupTool(t, t.TempDir(), fmt.Sprintf(`echo run >> %s; echo "[00] Got error 2013" >&2; exit 1`, runsOther))
	opts = fakeOptions(t, other)
	opts.Prefix = "ns/c/other/"
	if _, err := Take(t.Context(), opts, store); err == nil || errors.Is(err, ErrRedoLogCopy) {
		t.Errorf("Take: %v, want a failure that is not ErrRedoLogCopy", err)
	}
	if n := lines(t, runsOther); n != 1 {
		t.Errorf("%d runs of a tool that failed otherwise, want 1", n)
	}
}

func lines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}
