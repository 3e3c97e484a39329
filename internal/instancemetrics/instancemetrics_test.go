package instancemetrics

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

func TestScrapeTimeoutFollowsTheScraper(t *testing.T) {
	for header, want := range map[string]time.Duration{
		"":     DefaultScrapeTimeout,
		"junk": DefaultScrapeTimeout,
		"-1":   DefaultScrapeTimeout,
		"10":   10*time.Second - scrapeTimeoutOffset,
		"0.2":  200 * time.Millisecond, // shorter than the offset: the whole of it
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
