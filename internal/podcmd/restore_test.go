package podcmd

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/restore"
)

// parseRestoreFlags parses args as `dolphin restore` does and maps them with env.
func parseRestoreFlags(t *testing.T, env map[string]string, files map[string]string, args ...string) (restore.Options, error) {
	t.Helper()
	var f restoreFlags
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

func TestRestoreFlagsToOptions(t *testing.T) {
	env := map[string]string{
		envS3AccessKeyID: "AKID", envS3SecretAccessKey: "SECRET",
		envOperatorPassword: "op-pw", envRootPassword: "root-pw",
	}
	files := map[string]string{"/ca.pem": "-----BEGIN CERTIFICATE-----\n"}

	got, err := parseRestoreFlags(t, env, files,
		"--path=ns/c/b1/", "--s3-endpoint=https://minio:9000", "--s3-bucket=backups", "--s3-prefix=prod/",
		"--s3-region=eu-1", "--s3-path-style", "--s3-part-size=32Mi", "--s3-ca-file=/ca.pem",
		"--datadir=/data", "--defaults-file=/etc/my.cnf", "--tmp-dir=/scratch", "--use-memory=256M")
	if err != nil {
		t.Fatal(err)
	}
	want := restore.Options{
		Store: objectstore.Config{S3: &objectstore.S3Config{
			Endpoint: "https://minio:9000", Bucket: "backups", Prefix: "prod/", Region: "eu-1", PathStyle: true,
			AccessKeyID: "AKID", SecretAccessKey: "SECRET", PartSize: 32 << 20, CACertPEM: []byte(files["/ca.pem"]),
		}},
		Path: "ns/c/b1/", DataDir: "/data", DefaultsFile: "/etc/my.cnf", TmpDir: "/scratch", UseMemory: "256M",
		Flavor: "mariadb", OperatorUser: "dolphin", OperatorPassword: "op-pw", RootPassword: "root-pw",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("options\n got %+v %+v\nwant %+v %+v", got, got.Store.S3, want, want.Store.S3)
	}

	// A directory store, the defaults, and the operator user from the environment.
	env[envOperatorUser] = "op"
	got, err = parseRestoreFlags(t, env, nil, "--path=b", "--directory=/backups", "--flavor=mysql")
	if err != nil {
		t.Fatal(err)
	}
	want = restore.Options{
		Store: objectstore.Config{Directory: "/backups"}, Path: "b",
		DataDir: "/var/lib/mysql", DefaultsFile: "/etc/mysql/dolphin/my.cnf", TmpDir: "/tmp", Flavor: "mysql",
		OperatorUser: "op", OperatorPassword: "op-pw", RootPassword: "root-pw",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("options\n got %+v\nwant %+v", got, want)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--directory=/b"}, "--path is required"},
		{[]string{"--path=b"}, "no store given"},
		{[]string{"--path=b", "--directory=/b", "--s3-bucket=x"}, "exclusive"},
		{[]string{"--path=b", "--s3-endpoint=http://x"}, "--s3-bucket is required"},
		{[]string{"--path=b", "--s3-bucket=x", "--s3-part-size=lots"}, "--s3-part-size"},
		{[]string{"--path=b", "--s3-bucket=x", "--s3-ca-file=/missing.pem"}, "--s3-ca-file"},
	} {
		if _, err := parseRestoreFlags(t, env, nil, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error saying %q", c.args, err, c.want)
		}
	}
}

// runRestore runs `dolphin restore args...` with restoreExit recorded; it returns the output
// and the exit code (-1: not called).
func runRestore(t *testing.T, args ...string) (string, int) {
	t.Helper()
	code := -1
	restoreExit = func(c int) { code = c }
	t.Cleanup(func() { restoreExit = os.Exit })
	out, err := run(t, append([]string{"restore"}, args...)...)
	if (err != nil) != (code == 1) {
		t.Errorf("dolphin restore returned %v, exit code %d", err, code)
	}
	return out, code
}

func TestRestoreCmdFailureEndsWithOneLine(t *testing.T) {
	dir := t.TempDir()
	out, code := runRestore(t, "--directory", dir, "--datadir", filepath.Join(dir, "data"))
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if last := lines[len(lines)-1]; code != 1 || last != "dolphin-restore: --path is required: the backup's path in the store" {
		t.Errorf("exit %d, output %q", code, out)
	}

	// A store without the backup: the error names it.
	t.Setenv(envOperatorPassword, "op-secret")
	t.Setenv(envRootPassword, "root-secret")
	out, code = runRestore(t, "--directory", dir, "--datadir", filepath.Join(dir, "data"), "--path", "ns/c/none/")
	lines = strings.Split(strings.TrimRight(out, "\n"), "\n")
	last := lines[len(lines)-1]
	if code != 1 || !strings.HasPrefix(last, "dolphin-restore: ") || !strings.Contains(last, "ns/c/none/") ||
		!strings.Contains(last, "restore another backup") {
		t.Errorf("exit %d, output %q", code, out)
	}
	if strings.Contains(out, "op-secret") || strings.Contains(out, "root-secret") {
		t.Errorf("the output shows a password: %q", out)
	}
}

func TestRestoreCmdSkipsInitialized(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, restore.InitializedMarker), nil, 0o640); err != nil {
		t.Fatal(err)
	}
	out, code := runRestore(t, "--directory", filepath.Join(dir, "none"), "--datadir", data, "--path", "b")
	if code != -1 || !strings.Contains(out, "nothing to restore") || !strings.Contains(out, "done: "+data+" was initialised already") {
		t.Errorf("exit %d, output %q", code, out)
	}
}
