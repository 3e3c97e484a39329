package instancemetrics

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/go-logr/logr"
)

func TestScrapeTimeoutFollowsTheScraper(t *testing.T) {
	for header, want := range map[string]time.Duration{
		"":     DefaultScrapeTimeout,
		"junk": DefaultScrapeTimeout,
		"-1":   DefaultScrapeTimeout,
		"10":   10*time.Second - scrapeTimeoutOffset,
		"0.2":  200 * time.Millisecond, // shorter than the offset: the whole of it
		"NaN":  DefaultScrapeTimeout,
		"+Inf": DefaultScrapeTimeout,
		"1e12": maxScrapeTimeout,
	} {
		h := http.Header{}
		if header != "" {
			h.Set("X-Prometheus-Scrape-Timeout-Seconds", header)
		}
		if got := scrapeTimeout(h); got != want {
			t.Errorf("scrape timeout %q: %v, want %v", header, got, want)
		}
	}
}

func TestHandlerNeedsTheServerAndAnAccount(t *testing.T) {
	for _, o := range []Options{{User: "m", PasswordFile: "p"}, {Socket: "s", PasswordFile: "p"}, {Socket: "s", User: "m"}} {
		o.Logger = logr.Discard()
		if _, err := Handler(o); err == nil {
			t.Errorf("Handler(%+v) accepted incomplete options", o)
		}
	}
}

// hack/mysqld-exporter.sh builds the mysqld_exporter whose collector package the agent links,
// so that the bench compares the same collectors.
func TestBenchExporterIsTheLinkedVersion(t *testing.T) {
	mod, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join("..", "..", "hack", "mysqld-exporter.sh"))
	if err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`(?m)^\s*github\.com/prometheus/mysqld_exporter (v\S+)`).FindSubmatch(mod)
	got := regexp.MustCompile(`(?m)^MYSQLD_EXPORTER_VERSION=(\S+)$`).FindSubmatch(script)
	if want == nil || got == nil || !bytes.Equal(want[1], got[1]) {
		t.Errorf("hack/mysqld-exporter.sh builds %q, go.mod links %q: keep them in step", got, want)
	}
}

// The collectors' tunables get mysqld_exporter's defaults (kingpin sets them only when it
// parses): without them every scrape would run with lock_wait_timeout=0.
func TestCollectorTunablesHaveTheirDefaults(t *testing.T) {
	if _, err := Handler(Options{Socket: "s", User: "m", PasswordFile: "p", Logger: logr.Discard()}); err != nil {
		t.Fatal(err)
	}
	f := kingpin.CommandLine.GetFlag("exporter.lock_wait_timeout")
	if f == nil {
		t.Fatal("mysqld_exporter's collector package registers no exporter.lock_wait_timeout flag any more: check how its tunables are set")
	}
	if got := f.Model().Value.String(); got != "2" {
		t.Errorf("exporter.lock_wait_timeout = %q, want mysqld_exporter's default 2", got)
	}
}

// Scrapes beyond MaxConcurrentScrapes are turned away at once.
func TestConcurrentScrapesAreBounded(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A socket that accepts and never answers: a hung server.
	sock := filepath.Join(dir, "hung.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer func() { _ = c.Close() }()
		}
	}()
	h, err := Handler(Options{Socket: sock, User: "m", PasswordFile: pw, Logger: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	scrape := func() int {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", "3")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	codes := make(chan int, MaxConcurrentScrapes+1)
	for range MaxConcurrentScrapes {
		go func() { codes <- scrape() }()
	}
	time.Sleep(500 * time.Millisecond) // the first ones wait on the hung server
	began := time.Now()
	if code := scrape(); code != http.StatusServiceUnavailable {
		t.Errorf("a scrape beyond the bound answered %d, want 503", code)
	}
	if took := time.Since(began); took > time.Second {
		t.Errorf("the refused scrape took %v", took)
	}
	for range MaxConcurrentScrapes {
		select {
		case code := <-codes:
			if code != http.StatusOK {
				t.Errorf("a scrape of a hung server answered %d, want 200 with mysql_up 0 after its timeout", code)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("scrapes of a hung server did not end after their 3 s timeout")
		}
	}
}
