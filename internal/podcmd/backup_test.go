package podcmd

import (
	"strings"
	"testing"
)

// TestBackupPath: the backup's path is relative and clean; its name defaults to its last
// element.
func TestBackupPath(t *testing.T) {
	env := func(k string) string {
		if k == envBackupPassword {
			return "pw"
		}
		return ""
	}
	for path, want := range map[string]string{
		"migrations/shop-1": "shop-1", "migrations/shop-1/": "shop-1",
		"/abs/": "", "a/../b": "", "./x": "", ".": "", "a//b": "",
	} {
		f := backupFlags{path: path, dataDir: "/var/lib/mysql"}
		f.store.directory = t.TempDir()
		o, _, err := f.options(env, nil)
		switch {
		case want == "" && (err == nil || !strings.Contains(err.Error(), "relative path")):
			t.Errorf("--path %q: %v; want refused", path, err)
		case want != "" && (err != nil || o.Name != want || o.Prefix != "migrations/shop-1/" || o.User != "root" || o.Password != "pw"):
			t.Errorf("--path %q: %+v, %v; want name %q", path, o, err, want)
		}
	}
}
