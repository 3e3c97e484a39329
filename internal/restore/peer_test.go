package restore

import (
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

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
	kept := KeptPrefix + "db-0-20261205T000000Z.binlog.zst"
	for _, p := range []string{"lost+found/x", "ibdata1", StagingDir + "/y", kept, KeptPrefix + "dir/z"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), nil, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := ClearUninitialized(dir)
	if err != nil || !slices.Equal(removed, []string{StagingDir, KeptPrefix + "dir", "ibdata1"}) {
		t.Errorf("ClearUninitialized = %q, %v", removed, err)
	}
	// A kept copy (a file) is never discarded: it is what a re-clone keeps of the old data.
	if ents := dirEntries(t, dir); !slices.Equal(ents, []string{kept, lostAndFound}) {
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
	if ents := dirEntries(t, dir); len(ents) != 3 {
		t.Errorf("an initialised directory was touched: %q", ents)
	}
}

// TestFromPeerBadOutcome clones from impostor agents that send a valid stream but end it
// without saying it is complete: with the wrong byte count, with an error, without trailers.
// Everything extracted is removed and nothing is started.
func TestFromPeerBadOutcome(t *testing.T) {
	mbstream, err := exec.LookPath("mbstream")
	if err != nil {
		t.Skipf("mbstream is not installed: %v", err)
	}
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "ibdata1"), bytes.Repeat([]byte("data"), 100000), 0o640); err != nil {
		t.Fatal(err)
	}
	raw, err := exec.Command(mbstream, "-c", "-C", src, "ibdata1").Output()
	if err != nil {
		t.Fatal(err)
	}
	var stream bytes.Buffer
	enc, _ := zstd.NewWriter(&stream)
	_, _ = enc.Write(raw)
	_ = enc.Close()

	ca, cert, key, err := agent.NewAgentPKI("db", "ns", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	for name, trailers := range map[string]map[string]string{
		"wrong byte count": {agent.CloneStatusTrailer: "ok", agent.CloneBytesTrailer: strconv.Itoa(stream.Len() + 1)},
		"error":            {agent.CloneStatusTrailer: "error", agent.CloneErrorTrailer: "mariadb-backup died"},
		"no outcome":       {},
	} {
		t.Run(name, func(t *testing.T) {
			l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Trailer", agent.CloneStatusTrailer+", "+agent.CloneErrorTrailer+", "+agent.CloneBytesTrailer)
				_, _ = w.Write(stream.Bytes())
				for k, v := range trailers {
					w.Header().Set(k, v)
				}
			})}
			go func() { _ = srv.Serve(l) }()
			t.Cleanup(func() { _ = srv.Close() })
			data := filepath.Join(t.TempDir(), "data")
			_, err = FromPeer(t.Context(), PeerOptions{URL: "https://" + l.Addr().(*net.TCPAddr).String(), ServerName: agent.AgentServerName("db", "ns"),
				Token: "t", CACertPEM: ca, SourceDB: agent.DBConn{User: "u"}, DataDir: data, DefaultsFile: "/nonexistent/my.cnf",
				ServerBinary: "/nonexistent/mariadbd", OperatorUser: "dolphin", OperatorPassword: "op", RootPassword: "root", TmpDir: t.TempDir()})
			if !errors.Is(err, agent.ErrCloneFailed) || !strings.Contains(err.Error(), "nothing was cloned") {
				t.Fatalf("FromPeer = %v, want ErrCloneFailed and nothing cloned", err)
			}
			t.Log(err)
			if ents := dirEntries(t, data); len(ents) != 0 {
				t.Errorf("the data directory holds %q", ents)
			}
		})
	}
}
