// Package instancemetrics serves a database server's own metrics from the instance agent:
// Prometheus' mysqld_exporter collectors, run in the agent's process against the server's
// Unix socket as Dolphin's monitor account, with mysqld_exporter's default collectors and
// metric names (docs/design/0060). Dashboards and alerts written for mysqld_exporter work
// unchanged; no exporter container, image or account is added to the pod.
package instancemetrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/go-logr/logr"
	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/mysqld_exporter/collector"
)

// DefaultScrapeTimeout bounds a scrape when the scraper does not say how long it waits
// (Prometheus sends X-Prometheus-Scrape-Timeout-Seconds).
const DefaultScrapeTimeout = 10 * time.Second

// scrapeTimeoutOffset is left of the scraper's own timeout for writing the answer, as
// mysqld_exporter's --timeout-offset does.
const scrapeTimeoutOffset = 250 * time.Millisecond

// maxScrapeTimeout bounds what a scraper may ask for.
const maxScrapeTimeout = 2 * time.Minute

// MaxConcurrentScrapes is how many scrapes run at once (an HA pair of Prometheus servers and
// a person with curl); more are answered 503 at once, so that a hung server cannot gather
// connections and goroutines in the agent.
const MaxConcurrentScrapes = 3

// Options say how to reach the server.
type Options struct {
	// Socket is the server's Unix socket.
	Socket string
	// User is the account the collectors log in as: Dolphin's monitor account, which holds
	// exactly what mysqld_exporter's default collectors need (PROCESS and the replication
	// monitoring privileges).
	User string
	// PasswordFile holds the account's password. It is read at every scrape, so a rotated
	// password (the agent Secret is updated by the operator) is used without a restart.
	PasswordFile string
	// Logger receives the collectors' errors.
	Logger logr.Logger
}

// Scrapers are the collectors run at every scrape: mysqld_exporter's defaults (global status
// and variables, replica status, InnoDB compression tables, query response time), so that a
// scrape of the agent and of a mysqld_exporter with default flags return the same series.
func Scrapers() []collector.Scraper {
	return []collector.Scraper{
		collector.ScrapeGlobalStatus{},
		collector.ScrapeGlobalVariables{},
		collector.ScrapeSlaveStatus{},
		collector.ScrapeInnodbCmp{},
		collector.ScrapeInnodbCmpMem{},
		collector.ScrapeQueryResponseTime{},
	}
}

var collectorDefaults = sync.OnceValue(func() error {
	// The collectors read tunables (lock_wait_timeout of their session, the slow log
	// filter…) from kingpin flags that only get their default values when kingpin parses a
	// command line. Parsing an empty one sets them, exactly as mysqld_exporter started
	// without flags has them. Only the collector package registers flags on kingpin's
	// global application in this binary.
	if _, err := kingpin.CommandLine.Parse(nil); err != nil {
		return fmt.Errorf("setting the collectors' defaults: %w", err)
	}
	return nil
})

// Handler serves the metrics, one scrape of the server per request, the way mysqld_exporter
// does: a failed connection is the sample mysql_up 0, not an HTTP error.
func Handler(o Options) (http.Handler, error) {
	switch {
	case o.Socket == "":
		return nil, errors.New("instancemetrics: the server's socket is required")
	case o.User == "" || o.PasswordFile == "":
		return nil, errors.New("instancemetrics: an account and its password file are required")
	}
	if err := collectorDefaults(); err != nil {
		return nil, err
	}
	slogger := slog.New(logr.ToSlogHandler(o.Logger))
	running := make(chan struct{}, MaxConcurrentScrapes)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case running <- struct{}{}:
			defer func() { <-running }()
		default:
			http.Error(w, fmt.Sprintf("%d scrapes are running already", MaxConcurrentScrapes), http.StatusServiceUnavailable)
			return
		}
		timeout := scrapeTimeout(r.Header)
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		dsn, err := o.dsn(timeout)
		if err != nil {
			// Logged, and the scrape answers mysql_up 0 with an unusable DSN.
			o.Logger.Error(err, "Reading the monitor account's password")
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(collector.New(ctx, dsn, Scrapers(), slogger))
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slogPrinter{slogger}}).ServeHTTP(w, r)
	}), nil
}

// dsn is the collectors' data source name: the socket, the account and its current password,
// every read and write bounded by timeout (the collectors' first queries do not heed the
// scrape's context: a hung server would hold each scrape's connection forever).
func (o Options) dsn(timeout time.Duration) (string, error) {
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr, cfg.User = "unix", o.Socket, o.User
	// A parameter of our own makes the DSN hold a "?" before collector.New appends its
	// own with "&": it appends with "?" when it finds none, and would find one in a
	// password that holds a "?".
	cfg.Timeout = min(5*time.Second, timeout)
	cfg.ReadTimeout, cfg.WriteTimeout = timeout, timeout
	b, err := os.ReadFile(o.PasswordFile)
	if err != nil {
		return cfg.FormatDSN(), fmt.Errorf("reading %s: %w", o.PasswordFile, err)
	}
	// Verbatim: the credentials Secret's bytes are the password, a trailing newline included.
	cfg.Passwd = string(b)
	return cfg.FormatDSN(), nil
}

// scrapeTimeout is the scraper's timeout less the offset, at most maxScrapeTimeout, or
// DefaultScrapeTimeout when it sends none that makes sense.
func scrapeTimeout(h http.Header) time.Duration {
	s, err := strconv.ParseFloat(h.Get("X-Prometheus-Scrape-Timeout-Seconds"), 64)
	if err != nil || !(s > 0) || math.IsInf(s, 0) {
		return DefaultScrapeTimeout
	}
	if s > maxScrapeTimeout.Seconds() {
		return maxScrapeTimeout
	}
	d := time.Duration(s*float64(time.Second)) - scrapeTimeoutOffset
	if d <= 0 {
		return time.Duration(s * float64(time.Second))
	}
	return d
}

// slogPrinter passes promhttp's errors to the logger.
type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.log.Error(fmt.Sprint(v...)) }
