package backup

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeXtrabackup writes a stand-in for xtrabackup: it records its arguments (one per line)
// in argsFile, answers --version, writes infoText into --extra-lsndir's xtrabackup_info,
// streams a few bytes and ends with stderrTail on stderr.
func fakeXtrabackup(t *testing.T, argsFile, infoText, stderrTail string) string {
	t.Helper()
	dir := t.TempDir()
	info := filepath.Join(dir, "info.txt")
	if err := os.WriteFile(info, []byte(infoText), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `#!/bin/sh
if [ "$1" = "--version" ]; then
  echo "xtrabackup version 8.4.0-2 based on MySQL server 8.4.0 Linux (x86_64) (revision id: 0a4b2c3)" >&2
  exit 0
fi
: > '` + argsFile + `'
for a in "$@"; do
  printf '%s\n' "$a" >> '` + argsFile + `'
  case "$a" in --extra-lsndir=*) lsn="${a#--extra-lsndir=}";; esac
done
[ -n "$lsn" ] && cp '` + info + `' "$lsn/xtrabackup_info"
printf 'XBSTREAM-STAND-IN-DATA'
echo "2026-12-01T15:00:00 0 [Note] [MY-011825] [Xtrabackup] ` + stderrTail + `" >&2
`
	path := filepath.Join(dir, "xtrabackup")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

const xtrabackupInfoSample = `uuid = 5bd9a2b2-cf70-11ef-9a31-0242ac120002
name =
tool_name = xtrabackup
tool_command = --backup --stream=xbstream
tool_version = 8.4.0-2
ibbackup_version = 8.4.0-2
server_version = 8.4.3
start_time = 2026-12-01 15:00:00
end_time = 2026-12-01 15:00:02
lock_time = 0
binlog_pos = filename 'binlog.000002', position '156', GTID of the last change '3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5,
9b2d4a1c-0000-11ef-8000-000000000001:orders:1-3'
innodb_from_lsn = 0
innodb_to_lsn = 20250123
partial = N
`

// TestTakeMySQLRunsXtrabackup: for the mysql flavor Take runs exactly
// `xtrabackup --backup --stream=xbstream --slave-info --extra-lsndir=…` with the password in an
// option file, streams its output into the store, and records the whole (multi-line) GTID set
// of xtrabackup_info in the manifest. No MySQL server runs here: the tool is a stand-in.
func TestTakeMySQLRunsXtrabackup(t *testing.T) {
	argsFile := filepath.Join(t.TempDir(), "args")
	tool := fakeXtrabackup(t, argsFile, xtrabackupInfoSample, "completed OK!")
	store, root := newStore(t)
	tmp := t.TempDir()
	m, err := Take(context.Background(), TakeOptions{
		Prefix: "ns/c/b/", Name: "b", SourceInstance: "db-1", SourceRole: "replica", Flavor: FlavorMySQL,
		Socket: "/nonexistent/mysqld.sock", User: "dolphin", Password: "s3cret",
		DataDir: "/var/lib/mysql", Tool: tool, TmpDir: tmp,
	}, store)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(argsFile)
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(args) == 0 || !strings.HasPrefix(args[0], "--defaults-extra-file="+tmp+"/") {
		t.Fatalf("first argument %q: want the password option file in TmpDir", args[0])
	}
	var lsn, target string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--extra-lsndir="); ok {
			lsn = v
		}
		if v, ok := strings.CutPrefix(a, "--target-dir="); ok {
			target = v
		}
	}
	want := []string{"--backup", "--stream=xbstream", "--slave-info", "--extra-lsndir=" + lsn,
		"--target-dir=" + target, "--tmpdir=" + tmp, "--datadir=/var/lib/mysql", "--user=dolphin",
		"--host=localhost", "--socket=/nonexistent/mysqld.sock"}
	if strings.Join(args[1:], " ") != strings.Join(want, " ") {
		t.Fatalf("xtrabackup ran with\n %q\nwant\n %q", args[1:], want)
	}
	if !strings.HasPrefix(lsn, tmp+"/") || strings.Contains(string(b), "s3cret") {
		t.Fatalf("--extra-lsndir %q outside TmpDir, or the password on the command line", lsn)
	}
	if m.Flavor != FlavorMySQL || m.Tool != "xtrabackup 8.4.0-2" || m.ServerVersion != "8.4.3" ||
		m.GTIDPosition != "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5,9b2d4a1c-0000-11ef-8000-000000000001:orders:1-3" ||
		m.BinlogFile != "binlog.000002" || m.BinlogPosition != 156 {
		t.Fatalf("manifest %+v", m)
	}
	if len(m.Objects) != 1 || m.Objects[0].RawSize != int64(len("XBSTREAM-STAND-IN-DATA")) {
		t.Fatalf("objects %+v: want the tool's output", m.Objects)
	}
	if files := storeFiles(t, root); len(files) != 2 {
		t.Fatalf("store holds %q: want the data object and the manifest", files)
	}
	if ents := dirEntries(t, tmp); len(ents) != 0 {
		t.Fatalf("TmpDir holds %q after the run", ents)
	}
}

// TestTakeMySQLRefusesAnIncompleteRun: without "completed OK!", or without a binary log
// position in xtrabackup_info, nothing is stored.
func TestTakeMySQLRefusesAnIncompleteRun(t *testing.T) {
	for _, tc := range []struct{ name, info, tail, want string }{
		{"not completed", xtrabackupInfoSample, "copying ./ibdata1", `exited 0 without printing "completed OK!"`},
		{"no binary log", strings.ReplaceAll(xtrabackupInfoSample, "binlog_pos = ", "binlog_pos_x = "), "completed OK!", "no binary log position"},
		{"bad GTID set", strings.ReplaceAll(xtrabackupInfoSample, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5", "0-1-5"), "completed OK!", "is not a MySQL GTID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tool := fakeXtrabackup(t, filepath.Join(t.TempDir(), "args"), tc.info, tc.tail)
			store, root := newStore(t)
			_, err := Take(context.Background(), TakeOptions{
				Prefix: "ns/c/b/", Flavor: FlavorMySQL, Socket: "/nonexistent.sock", User: "dolphin",
				DataDir: "/var/lib/mysql", Tool: tool, TmpDir: t.TempDir(),
			}, store)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Take: %v, want %q", err, tc.want)
			}
			if files := storeFiles(t, root); len(files) != 0 {
				t.Fatalf("store holds %q", files)
			}
		})
	}
}

func TestParseXtrabackupInfo(t *testing.T) {
	info, err := parseXtrabackupInfo(xtrabackupInfoSample)
	if err != nil {
		t.Fatal(err)
	}
	if info.GTIDSet != "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5,9b2d4a1c-0000-11ef-8000-000000000001:orders:1-3" || info.BinlogPosition != 156 {
		t.Fatalf("%+v", info)
	}
	noGTID, err := parseXtrabackupInfo("binlog_pos = filename 'binlog.000001', position '4'\n")
	if err != nil || noGTID.GTIDSet != "" || noGTID.BinlogFile != "binlog.000001" {
		t.Fatalf("%+v, %v", noGTID, err)
	}
}

// fakeXBStream writes a stand-in for xbstream -x -C <dir>: it records its arguments, checks
// that stdin is the stream the stand-in xtrabackup wrote, and leaves binlogInfo in <dir>.
func fakeXBStream(t *testing.T, argsFile, binlogInfo string) string {
	t.Helper()
	dir := t.TempDir()
	info := filepath.Join(dir, "binlog_info")
	if err := os.WriteFile(info, []byte(binlogInfo), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `#!/bin/sh
printf '%s\n' "$@" > '` + argsFile + `'
[ "$(cat)" = "XBSTREAM-STAND-IN-DATA" ] || { echo "unexpected stream" >&2; exit 1; }
cp '` + info + `' "$3/xtrabackup_binlog_info"
`
	path := filepath.Join(dir, "xbstream")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRestoreMySQLRunsXBStreamAndPrepare: a mysql-flavor backup is restored with exactly
// `xbstream -x -C <dir>` and `xtrabackup --prepare --target-dir=<dir> --use-memory=…`, and the
// prepared data's xtrabackup_binlog_info (a multi-line GTID set) must match the manifest; a
// different set is refused as corrupt and the directory left empty. Stand-in tools only.
func TestRestoreMySQLRunsXBStreamAndPrepare(t *testing.T) {
	backupArgs := filepath.Join(t.TempDir(), "args")
	tool := fakeXtrabackup(t, backupArgs, xtrabackupInfoSample, "completed OK!")
	store, _ := newStore(t)
	if _, err := Take(context.Background(), TakeOptions{
		Prefix: "ns/c/b/", Flavor: FlavorMySQL, Socket: "/nonexistent.sock", User: "dolphin",
		DataDir: "/var/lib/mysql", Tool: tool, TmpDir: t.TempDir(),
	}, store); err != nil {
		t.Fatal(err)
	}
	good := "binlog.000002\t156\t3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5,\n9b2d4a1c-0000-11ef-8000-000000000001:orders:1-3\n"
	xbArgs := filepath.Join(t.TempDir(), "xbargs")
	target := filepath.Join(t.TempDir(), "data")
	m, err := Restore(context.Background(), store, "ns/c/b/", RestoreOptions{
		TargetDir: target, Tool: tool, MBStream: fakeXBStream(t, xbArgs, good), UseMemory: "128M",
	})
	if err != nil {
		t.Fatal(err)
	}
	if m.Flavor != FlavorMySQL {
		t.Fatalf("manifest flavor %q", m.Flavor)
	}
	read := func(f string) string {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(strings.Fields(string(b)), " ")
	}
	if got := read(xbArgs); got != "-x -C "+target {
		t.Fatalf("xbstream ran with %q", got)
	}
	if got := read(backupArgs); got != "--prepare --target-dir="+target+" --use-memory=128M" {
		t.Fatalf("xtrabackup ran with %q, want the prepare", got)
	}

	bad := strings.Replace(good, ":1-5", ":1-4", 1)
	other := filepath.Join(t.TempDir(), "data")
	_, err = Restore(context.Background(), store, "ns/c/b/", RestoreOptions{
		TargetDir: other, Tool: tool, MBStream: fakeXBStream(t, filepath.Join(t.TempDir(), "a"), bad),
	})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "1-4") {
		t.Fatalf("restore with another GTID set: %v, want ErrCorrupt naming it", err)
	}
	if ents := dirEntries(t, other); len(ents) != 0 {
		t.Fatalf("the failed restore left %q", ents)
	}
}
