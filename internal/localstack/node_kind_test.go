package localstack

import (
	"os"
	"path/filepath"
	"testing"
)

// `dolphin local up` without --node starts a real node in a new folder and keeps the kind a
// folder was started with: a process node's folder (its state records the node agent) stays
// on the process node, a real node's (its node.json) on the real node.
func TestRunningNodeKind(t *testing.T) {
	write := func(t *testing.T, path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string
	}{
		{"a new folder", func(*testing.T, string) {}, nodeReal},
		{"a control plane without a node", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "state.json"), `{"processes":[{"name":"etcd","pid":0,"args":["/bin/etcd"]}]}`)
		}, nodeReal},
		{"a process node's folder", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "state.json"), `{"processes":[{"name":"etcd","pid":0,"args":["/bin/etcd"]},{"name":"`+agentName+`","pid":0,"args":["/bin/dolphin"]}]}`)
		}, nodeProcess},
		{"a real node's folder", func(t *testing.T, dir string) {
			write(t, filepath.Join(dir, "state.json"), `{"processes":[{"name":"etcd","pid":0,"args":["/bin/etcd"]}]}`)
			write(t, filepath.Join(localRealDir(dir), "node.json"), `{"bridge":"dlnode0","podCIDR":"10.244.64.0/24","nodeName":"dolphin-node"}`)
		}, nodeReal},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			got, err := runningNodeKind(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("node kind %q, want %q", got, tc.want)
			}
		})
	}
}
