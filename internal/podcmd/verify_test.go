package podcmd

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/restore"
)

// parseVerifyFlags parses args as `dolphin verify` does and maps them with env.
func parseVerifyFlags(t *testing.T, env map[string]string, files map[string]string, args ...string) (restore.VerifyOptions, error) {
	t.Helper()
	var f verifyFlags
	if err := f.command().ParseFlags(args); err != nil {
		t.Fatalf("parsing %q: %v", args, err)
	}
	return f.options(func(k string) string { return env[k] }, func(name string) ([]byte, error) {
		if s, ok := files[name]; ok {
			return []byte(s), nil
		}
		return nil, os.ErrNotExist
	})
}

func TestVerifyFlagsToOptions(t *testing.T) {
	env := map[string]string{envS3AccessKeyID: "AKID", envS3SecretAccessKey: "SECRET"}
	files := map[string]string{"/ca.pem": "-----BEGIN CERTIFICATE-----\n"}

	got, err := parseVerifyFlags(t, env, files,
		"--path=ns/c/b1/", "--s3-endpoint=https://minio:9000", "--s3-bucket=backups", "--s3-prefix=prod/",
		"--s3-region=eu-1", "--s3-path-style", "--s3-part-size=32Mi", "--s3-ca-file=/ca.pem",
		"--scratch-dir=/scratch", "--tmp-dir=/t", "--use-memory=256M", "--table-timeout=5m",
		"--server-option=lower_case_table_names=1", "--server-option", "plugin_load_add=ha_rocksdb")
	if err != nil {
		t.Fatal(err)
	}
	want := restore.VerifyOptions{
		Store: objectstore.Config{S3: &objectstore.S3Config{
			Endpoint: "https://minio:9000", Bucket: "backups", Prefix: "prod/", Region: "eu-1", PathStyle: true,
			AccessKeyID: "AKID", SecretAccessKey: "SECRET", PartSize: 32 << 20, CACertPEM: []byte(files["/ca.pem"]),
		}},
		Path: "ns/c/b1/", ScratchDir: "/scratch", TmpDir: "/t", UseMemory: "256M", TableTimeout: 5 * time.Minute,
		ServerOptions: []string{"lower_case_table_names=1", "plugin_load_add=ha_rocksdb"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("options\n got %+v %+v\nwant %+v %+v", got, got.Store.S3, want, want.Store.S3)
	}

	// A directory store and the defaults.
	got, err = parseVerifyFlags(t, env, nil, "--path=b", "--directory=/backups")
	if err != nil {
		t.Fatal(err)
	}
	want = restore.VerifyOptions{
		Store: objectstore.Config{Directory: "/backups"}, Path: "b",
		ScratchDir: "/tmp/verify", TmpDir: "/tmp", TableTimeout: restore.DefaultTableTimeout,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("options\n got %+v\nwant %+v", got, want)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--directory=/b"}, "--path is required"},
		{[]string{"--path=b", "--directory=/b", "--scratch-dir="}, "--scratch-dir is required"},
		{[]string{"--path=b"}, "no store given"},
		{[]string{"--path=b", "--directory=/b", "--s3-bucket=x"}, "exclusive"},
		{[]string{"--path=b", "--s3-endpoint=http://x"}, "--s3-bucket is required"},
		{[]string{"--path=b", "--s3-bucket=x", "--s3-part-size=lots"}, "--s3-part-size"},
		{[]string{"--path=b", "--s3-bucket=x", "--s3-ca-file=/missing.pem"}, "--s3-ca-file"},
	} {
		if _, err := parseVerifyFlags(t, env, nil, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error saying %q", c.args, err, c.want)
		}
	}
}

// TestVerifyStoreFlagsMatchRestore: both commands take a store the same way.
func TestVerifyStoreFlagsMatchRestore(t *testing.T) {
	env := map[string]string{envS3AccessKeyID: "AKID", envS3SecretAccessKey: "SECRET"}
	for _, args := range [][]string{
		{"--path=b", "--s3-endpoint=https://minio:9000", "--s3-bucket=backups", "--s3-prefix=p/", "--s3-region=r", "--s3-path-style", "--s3-part-size=8Mi"},
		{"--path=b", "--directory=/backups"},
	} {
		r, rerr := parseRestoreFlags(t, env, nil, args...)
		v, verr := parseVerifyFlags(t, env, nil, args...)
		if rerr != nil || verr != nil || !reflect.DeepEqual(r.Store, v.Store) {
			t.Errorf("%q: restore %+v (%v), verify %+v (%v)", args, r.Store, rerr, v.Store, verr)
		}
	}
}

func TestVerifyResultLine(t *testing.T) {
	rep := restore.VerifyReport{GTIDPosition: "0-1-14,1-1-3", Tables: 5, Rows: 315, Duration: 12600 * time.Millisecond}
	if got, want := verifyResult(rep), "ok gtid=0-1-14,1-1-3 tables=5 rows=315 seconds=13"; got != want {
		t.Errorf("verifyResult\n got %q\nwant %q", got, want)
	}
	withArchive := rep
	withArchive.ArchiveReplayedTo, withArchive.ArchiveSegments = "0-1-99,1-1-3", 4
	if got, want := verifyResult(withArchive), "ok gtid=0-1-14,1-1-3 tables=5 rows=315 seconds=13 archive=0-1-99,1-1-3 segments=4"; got != want {
		t.Errorf("verifyResult with an archive = %q, want %q", got, want)
	}
	if got, want := verifyResult(restore.VerifyReport{ArchiveNote: "x"}), "ok gtid= tables=0 rows=0 seconds=0 archive=none (the binlog archive does not reach back to this backup)"; got != want {
		t.Errorf("verifyResult with an archive note = %q, want %q", got, want)
	}
	if got, want := verifyResult(restore.VerifyReport{}), "ok gtid= tables=0 rows=0 seconds=0"; got != want {
		t.Errorf("verifyResult\n got %q\nwant %q", got, want)
	}

	// Success: the last line, also in the result file; the default file is skipped when missing.
	dir := t.TempDir()
	result := filepath.Join(dir, "result")
	var out strings.Builder
	f := verifyFlags{resultFile: result}
	code := recordVerifyExit(t)
	if err := f.finish(&out, rep, nil, true); err != nil || *code != -1 {
		t.Fatalf("finish: %v, exit %d", err, *code)
	}
	if want := "dolphin-verify: ok gtid=0-1-14,1-1-3 tables=5 rows=315 seconds=13\n"; out.String() != want || readString(t, result) != want {
		t.Errorf("output %q, result file %q; want %q in both", out.String(), readString(t, result), want)
	}
	f.resultFile = filepath.Join(dir, "missing")
	if err := f.finish(&out, rep, nil, false); err != nil {
		t.Errorf("finish with a missing default result file: %v", err)
	}
	if _, err := os.Stat(f.resultFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the default result file was created: %v", err)
	}

	// A result file given that cannot be written fails the run.
	out.Reset()
	f.resultFile = filepath.Join(dir, "no-dir", "result")
	if err := f.finish(&out, rep, nil, true); err == nil || *code != 1 {
		t.Errorf("finish with an unwritable result file: %v, exit %d", err, *code)
	}
	if last := lastOutputLine(out.String()); !strings.HasPrefix(last, "dolphin-verify: writing the result to --result-file "+f.resultFile) {
		t.Errorf("last line %q", last)
	}

	// Failure: the error on one line, in full before it, and in the result file.
	out.Reset()
	*code = -1
	f.resultFile = result
	err := errors.New("verify: the temporary server exited; its last output:\n[ERROR] one\n[ERROR] two")
	if got := f.finish(&out, restore.VerifyReport{}, err, true); !errors.Is(got, err) || *code != 1 {
		t.Errorf("finish: %v, exit %d", got, *code)
	}
	want := "dolphin-verify: verify: the temporary server exited; its last output: [ERROR] one | [ERROR] two"
	if last := lastOutputLine(out.String()); last != want || readString(t, result) != want+"\n" ||
		!strings.Contains(out.String(), "dolphin-verify: failed:\n"+err.Error()+"\n") {
		t.Errorf("output %q, result file %q; want the last line %q", out.String(), readString(t, result), want)
	}
}

func TestVerifyCmdFailureEndsWithOneLine(t *testing.T) {
	dir := t.TempDir()
	result := filepath.Join(dir, "result")
	code := recordVerifyExit(t)
	out, err := run(t, "verify", "--directory", dir, "--path", "ns/c/none/", "--scratch-dir", filepath.Join(dir, "scratch"),
		"--result-file", result)
	last := lastOutputLine(out)
	if err == nil || *code != 1 || !strings.HasPrefix(last, "dolphin-verify: verify: ") || !strings.Contains(last, "ns/c/none/") ||
		!strings.Contains(last, backup.ErrIncomplete.Error()) {
		t.Errorf("exit %d (%v), output %q", *code, err, out)
	}
	if got := readString(t, result); got != last+"\n" {
		t.Errorf("result file %q, want the last line %q", got, last)
	}
	if _, err := os.Stat(filepath.Join(dir, "scratch")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the scratch directory is left: %v", err)
	}

	*code = -1
	out, _ = run(t, "verify", "--directory", dir, "--result-file", "")
	if last := lastOutputLine(out); *code != 1 || last != "dolphin-verify: --path is required: the backup's path in the store" {
		t.Errorf("exit %d, output %q", *code, out)
	}
}

// recordVerifyExit replaces verifyExit for the test; the code is -1 until it is called.
func recordVerifyExit(t *testing.T) *int {
	t.Helper()
	code := -1
	verifyExit = func(c int) { code = c }
	t.Cleanup(func() { verifyExit = os.Exit })
	return &code
}

func lastOutputLine(out string) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	return lines[len(lines)-1]
}

func readString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
