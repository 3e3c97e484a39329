package localstack

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/localcluster"
)

func TestLocalUpS3Flags(t *testing.T) {
	up := newLocalUpCmd()
	for flag, def := range map[string]string{"s3": "false", "s3-port": "7070", "versitygw": ""} {
		f := up.Flags().Lookup(flag)
		if f == nil {
			t.Errorf("dolphin local up has no --%s", flag)
			continue
		}
		if f.DefValue != def {
			t.Errorf("--%s defaults to %q, want %q", flag, f.DefValue, def)
		}
	}
	out, err := run(t, "local", "up", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--s3", "--s3-port", "--versitygw", "hack/versitygw.sh", "default/dolphin-s3", "access-key-id", "secret-access-key", "<dir>/s3"} {
		if !strings.Contains(out, want) {
			t.Errorf("dolphin local up --help does not mention %s", want)
		}
	}
}

// TestLocalUpS3FailsEarly checks that --s3 problems are reported before anything starts.
func TestLocalUpS3FailsEarly(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("DOLPHIN_CACHE_DIR", filepath.Join(dir, "cache"))
	t.Setenv(localcluster.EnvVersitygw, "")
	stack := filepath.Join(dir, "stack")
	_, err := run(t, "local", "up", "--dir", stack, "--s3")
	if err == nil || !strings.Contains(err.Error(), "hack/versitygw.sh") || !strings.Contains(err.Error(), "make versitygw") {
		t.Errorf("--s3 without versitygw: %v, want how to build it", err)
	}
	if _, err := run(t, "local", "up", "--dir", stack, "--s3", "--s3-port", "70000"); err == nil || !strings.Contains(err.Error(), "--s3-port") {
		t.Errorf("--s3-port 70000: %v", err)
	}
	gw := filepath.Join(dir, "gw")
	if err := os.WriteFile(gw, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "local", "up", "--dir", stack, "--s3", "--versitygw", gw, "--pod-cidr", "fd00::/64"); err == nil || !strings.Contains(err.Error(), "--pod-cidr") {
		t.Errorf("--pod-cidr fd00::/64: %v", err)
	}
	if _, err := os.Stat(stack); err == nil {
		t.Errorf("a failed --s3 check created %s", stack)
	}
}

// TestLocalS3Snippets checks that the printed spec.backup (patch and YAML) is a valid
// MySQLCluster spec.backup pointing at the local S3 server.
func TestLocalS3Snippets(t *testing.T) {
	const endpoint = "http://10.244.0.1:7070"
	want := dolphinv1.S3Store{Endpoint: endpoint, Bucket: "dolphin", Prefix: "local/", ForcePathStyle: true, CredentialsSecret: "dolphin-s3"}

	patch, err := localS3Patch(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(patch, "'") {
		t.Fatalf("the patch %s holds a quote, which breaks the printed shell command", patch)
	}
	var c dolphinv1.MySQLCluster
	dec := json.NewDecoder(strings.NewReader(patch))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("the patch %s is not a MySQLCluster: %v", patch, err)
	}
	if c.Spec.Backup == nil || c.Spec.Backup.Store == nil || c.Spec.Backup.Store.S3 == nil || *c.Spec.Backup.Store.S3 != want {
		t.Errorf("patch spec.backup %+v, want store.s3 %+v", c.Spec.Backup, want)
	}

	snippet := localS3YAML(endpoint)
	var spec dolphinv1.MySQLClusterSpec
	if err := yaml.UnmarshalStrict([]byte(snippet), &spec); err != nil {
		t.Fatalf("the YAML snippet is not a MySQLCluster spec: %v\n%s", err, snippet)
	}
	if spec.Backup == nil || spec.Backup.Store == nil || spec.Backup.Store.S3 == nil || *spec.Backup.Store.S3 != want {
		t.Errorf("YAML spec.backup %+v, want store.s3 %+v", spec.Backup, want)
	}

	var out bytes.Buffer
	if err := printLocalS3(&out, &localcluster.S3Server{Endpoint: endpoint, Bucket: "dolphin", Dir: "/d/s3"}); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"S3 for backups: " + endpoint + ", bucket dolphin, credentials in Secret default/dolphin-s3",
		"kubectl patch mysqlcluster demo --type=merge -p '" + patch + "'",
		"        forcePathStyle: true",
	} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("printed lines lack %q:\n%s", line, out.String())
		}
	}
}
