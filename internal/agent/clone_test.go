package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// pattern is n deterministic bytes.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

func TestAgentCloneStream(t *testing.T) {
	data := pattern(3<<20 + 17)
	var got CloneRequest
	a := startAgent(t, nil, func(_ context.Context, req CloneRequest, w io.Writer) error {
		got = req
		for b := data; len(b) > 0; {
			n := min(len(b), 64<<10)
			if _, err := w.Write(b[:n]); err != nil {
				return err
			}
			b = b[n:]
		}
		return nil
	})
	rc, err := a.client(testToken).Clone(context.Background(), CloneRequest{DB: DBConn{User: "u", Password: "p", Host: "127.0.0.1", Port: 3306}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	body, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading the clone stream: %v", err)
	}
	if !bytes.Equal(body, data) {
		t.Errorf("the clone stream has %d bytes, want the %d written", len(body), len(data))
	}
	if got.DB.Password != "p" || got.DB.Port != 3306 {
		t.Errorf("the Clone function got %+v", got)
	}
	if _, err := rc.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("Read after the end = %v, want io.EOF", err)
	}
}

func TestAgentCloneEmptyStream(t *testing.T) {
	a := startAgent(t, nil, func(context.Context, CloneRequest, io.Writer) error { return nil })
	rc, err := a.client(testToken).Clone(context.Background(), CloneRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	if b, err := io.ReadAll(rc); err != nil || len(b) != 0 {
		t.Errorf("an empty clone stream read %d bytes, %v; want 0, nil", len(b), err)
	}
}

func TestAgentCloneFailsAfterPartialBytes(t *testing.T) {
	a := startAgent(t, nil, func(_ context.Context, _ CloneRequest, w io.Writer) error {
		if _, err := w.Write(pattern(200 << 10)); err != nil {
			return err
		}
		return errors.New("mariadb-backup: error reading\nibdata1")
	})
	rc, err := a.client(testToken).Clone(context.Background(), CloneRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	body, err := io.ReadAll(rc)
	if len(body) != 200<<10 {
		t.Errorf("read %d bytes before the failure, want %d", len(body), 200<<10)
	}
	if !errors.Is(err, ErrCloneFailed) || !strings.Contains(err.Error(), "mariadb-backup: error reading ibdata1") || !strings.Contains(err.Error(), a.addr) {
		t.Errorf("reading a failed clone = %v, want ErrCloneFailed with the agent's message", err)
	}
	if _, again := rc.Read(make([]byte, 1)); again == nil || errors.Is(again, io.EOF) {
		t.Errorf("Read after the failure = %v, want the failure again", again)
	}
}

func TestAgentCloneFailsBeforeBytes(t *testing.T) {
	a := startAgent(t, nil, func(context.Context, CloneRequest, io.Writer) error {
		return errors.New("cannot connect to the server")
	})
	_, err := a.client(testToken).Clone(context.Background(), CloneRequest{})
	var se *StatusError
	if !errors.As(err, &se) || se.StatusCode != http.StatusInternalServerError || !strings.Contains(se.Message, "cannot connect") {
		t.Errorf("Clone = %v, want a 500 with the message", err)
	}
}

func TestAgentClonePanicIsAFailure(t *testing.T) {
	a := startAgent(t, nil, func(_ context.Context, _ CloneRequest, w io.Writer) error {
		_, _ = w.Write([]byte("partial"))
		panic("boom")
	})
	rc, err := a.client(testToken).Clone(context.Background(), CloneRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	if _, err := io.ReadAll(rc); !errors.Is(err, ErrCloneFailed) || !strings.Contains(err.Error(), "boom") {
		t.Errorf("reading a clone whose function panicked = %v, want ErrCloneFailed", err)
	}
}

// TestAgentCloneMissingTrailer checks the client against a server that ends the stream cleanly
// but says nothing about its outcome (not this agent: an impostor or a proxy that drops
// trailers), and one that breaks the connection.
func TestAgentCloneMissingTrailer(t *testing.T) {
	for name, handler := range map[string]http.HandlerFunc{
		"no trailer": func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("data")) },
		"wrong byte count": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Trailer", CloneStatusTrailer+", "+CloneBytesTrailer+", "+CloneUpgradeRecordTrailer)
			_, _ = w.Write([]byte("data"))
			w.Header().Set(CloneStatusTrailer, "ok")
			w.Header().Set(CloneBytesTrailer, "5")
			w.Header().Set(CloneUpgradeRecordTrailer, testRecord)
		},
		"error status": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Trailer", CloneStatusTrailer+", "+CloneBytesTrailer+", "+CloneUpgradeRecordTrailer)
			_, _ = w.Write([]byte("data"))
			w.Header().Set(CloneStatusTrailer, "error")
			w.Header().Set(CloneBytesTrailer, "4")
			w.Header().Set(CloneUpgradeRecordTrailer, testRecord)
		},
		"broken connection": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Trailer", CloneStatusTrailer)
			_, _ = w.Write([]byte("data"))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		},
	} {
		t.Run(name, func(t *testing.T) {
			p := writePKI(t, t.TempDir(), testCluster, testNamespace)
			pair, err := tls.X509KeyPair(p.certPEM, p.keyPEM)
			if err != nil {
				t.Fatal(err)
			}
			l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: handler, ErrorLog: newHTTPErrorLog(testLogger(t))}
			go func() { _ = srv.Serve(l) }()
			t.Cleanup(func() { _ = srv.Close() })

			c, err := NewClient(ClientOptions{BaseURL: "https://" + l.Addr().(*net.TCPAddr).String(), Token: "t",
				CACertPEM: p.caPEM, ServerName: AgentServerName(testCluster, testNamespace)})
			if err != nil {
				t.Fatal(err)
			}
			defer c.CloseIdleConnections()
			rc, err := c.Clone(context.Background(), CloneRequest{})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = rc.Close() }()
			if _, err := io.ReadAll(rc); err == nil {
				t.Error("reading the stream succeeded, want an error")
			} else {
				t.Log(err)
			}
			// A failed stream's upgrade record is not taken, whatever its trailers say.
			if r := rc.UpgradeRecord(); r != "" {
				t.Errorf("a failed stream gave the upgrade record %q", r)
			}
		})
	}
}

// testRecord is an upgrade record as a source sends it (engineupgrade.Record.Encode).
const testRecord = "mysql_upgrade_info:MTAuMTEuMTktTWFyaWFEQg=="

// The source's mariadb-upgrade record reaches the client in a trailer when the data directory
// held the same record before and after the stream — read before the first byte and after the
// last, so a record that changes while the stream runs is not sent — and only for a complete
// stream; a clone that fails after its first bytes sends none.
func TestAgentCloneUpgradeRecord(t *testing.T) {
	data := pattern(1 << 20)
	var (
		mu                    sync.Mutex
		record, duringTheCopy string
		failAfterFirstBytes   bool
	)
	a := startAgent(t, nil, func(_ context.Context, _ CloneRequest, w io.Writer) error {
		if _, err := w.Write(data[:1024]); err != nil {
			return err
		}
		mu.Lock()
		record = duringTheCopy // what an upgrade finishing during the copy does
		fail := failAfterFirstBytes
		mu.Unlock()
		if fail {
			return errors.New("the tool failed")
		}
		_, err := w.Write(data[1024:])
		return err
	})
	a.restartWith(func(o *ServerOptions) {
		o.CloneUpgradeRecord = func() string {
			mu.Lock()
			defer mu.Unlock()
			return record
		}
	})
	set := func(before, during string, fail bool) {
		mu.Lock()
		record, duringTheCopy, failAfterFirstBytes = before, during, fail
		mu.Unlock()
	}
	clone := func() (*CloneStream, []byte, error) {
		t.Helper()
		rc, err := a.client(testToken).Clone(context.Background(), CloneRequest{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rc.Close() })
		if rc.UpgradeRecord() != "" {
			t.Error("a record before the stream was read")
		}
		body, err := io.ReadAll(rc)
		return rc, body, err
	}
	set(testRecord, testRecord, false)
	if rc, body, err := clone(); err != nil || rc.UpgradeRecord() != testRecord || !bytes.Equal(body, data) {
		t.Errorf("the same record before and after: got %q (%v)", rc.UpgradeRecord(), err)
	}
	set(testRecord, "mysql_upgrade_info:MTEuOC45LU1hcmlhREI=", false)
	if rc, _, err := clone(); err != nil || rc.UpgradeRecord() != "" {
		t.Errorf("a record that changed during the copy was sent: %q (%v)", rc.UpgradeRecord(), err)
	}
	set("", "", false)
	if rc, _, err := clone(); err != nil || rc.UpgradeRecord() != "" {
		t.Errorf("no record, yet %q (%v)", rc.UpgradeRecord(), err)
	}
	set(testRecord, testRecord, true)
	rc, _, err := clone()
	if err == nil {
		t.Fatal("a failed clone read as complete")
	}
	if got := rc.resp.Trailer.Get(CloneUpgradeRecordTrailer); got != "" {
		t.Errorf("a failed clone sent the upgrade record %q", got)
	}
}
