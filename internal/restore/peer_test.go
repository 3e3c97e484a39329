package restore

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dolphin-operator/dolphin/internal/agent"
)

func TestFromPeerRefusesMySQLAndMissingOptions(t *testing.T) {
	dir := t.TempDir()
	valid := PeerOptions{URL: "https://127.0.0.1:1", Token: "t", CACertPEM: []byte("ca"), SourceDB: agent.DBConn{User: "u"},
		DataDir: filepath.Join(dir, "data"), DefaultsFile: "/nonexistent/my.cnf",
		OperatorUser: "dolphin", OperatorPassword: "op", RootPassword: "root", TmpDir: dir}
	o := valid
	o.Flavor = FlavorMySQL
	if _, err := FromPeer(t.Context(), o); !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "MySQL") {
		t.Errorf("flavor mysql: %v, want ErrNotSupported", err)
	}
	o = valid
	o.URL, o.Token, o.SourceDB, o.RootPassword = "", "", agent.DBConn{}, ""
	_, err := FromPeer(t.Context(), o)
	if err == nil || err.Error() != "clone: missing the peer's URL, the agent token, the source database user and the root password" {
		t.Errorf("missing options: %v", err)
	}
	if _, err := os.Stat(o.DataDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused clone created the data directory: %v", err)
	}
	// An initialised directory is left alone, whatever the options say.
	if err := os.MkdirAll(o.DataDir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(o.DataDir, InitializedMarker), nil, 0o640); err != nil {
		t.Fatal(err)
	}
	if res, err := FromPeer(t.Context(), PeerOptions{DataDir: o.DataDir}); err != nil || !res.Skipped {
		t.Errorf("FromPeer on an initialised directory = %+v, %v; want Skipped", res, err)
	}
}

func TestClearUninitialized(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"lost+found/x", "ibdata1", StagingDir + "/y"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), nil, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := ClearUninitialized(dir)
	if err != nil || !slices.Equal(removed, []string{StagingDir, "ibdata1"}) {
		t.Errorf("ClearUninitialized = %q, %v", removed, err)
	}
	if ents := dirEntries(t, dir); !slices.Equal(ents, []string{lostAndFound}) {
		t.Errorf("left %q", ents)
	}
	if removed, err := ClearUninitialized(filepath.Join(dir, "missing")); err != nil || len(removed) != 0 {
		t.Errorf("ClearUninitialized of a missing directory = %q, %v", removed, err)
	}
	if err := os.WriteFile(filepath.Join(dir, InitializedMarker), nil, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := ClearUninitialized(dir); err == nil || !strings.Contains(err.Error(), "is initialised") {
		t.Errorf("ClearUninitialized of an initialised directory: %v", err)
	}
	if ents := dirEntries(t, dir); len(ents) != 2 {
		t.Errorf("an initialised directory was touched: %q", ents)
	}
}
