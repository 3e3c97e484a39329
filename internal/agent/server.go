package agent

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/dolphin-operator/dolphin/internal/backup"
)

// BackupFunc takes the backup req describes and returns its committed manifest. It reports
// the bytes stored so far through progress. ctx is the agent's lifetime (not a request's): it
// is cancelled when the job is cancelled or the agent shuts down.
type BackupFunc func(ctx context.Context, req BackupRequest, progress func(storedBytes int64)) (*backup.Manifest, error)

// CloneFunc writes this instance's backup stream to w, for a new instance to restore. ctx ends
// when the client goes away or the agent shuts down.
type CloneFunc func(ctx context.Context, req CloneRequest, w io.Writer) error

// DefaultShutdownTimeout is how long Serve waits, once its context is done, for requests and
// the running backup job to end.
const DefaultShutdownTimeout = 20 * time.Second

// ServerOptions configure a Server. TokenFile, CertFile and KeyFile are required, and Backup and
// Clone (the instance agent) or Seed (`dolphin seed`, before the server starts).
type ServerOptions struct {
	// TokenFile holds the bearer token every request but GET /healthz must carry. It is
	// re-read when it changes, so a rotated Secret takes effect without a restart.
	TokenFile string
	// CertFile and KeyFile are the PEM server certificate (chain) and key, re-read when
	// they change.
	CertFile, KeyFile string
	// Backup runs POST /v1/backups jobs.
	Backup BackupFunc
	// Clone serves POST /v1/clone.
	Clone CloneFunc
	// CloneUpgradeRecord, when set, returns the data directory's mariadb-upgrade record
	// (engineupgrade.Record.Encode, "" for none); a clone sends it in
	// CloneUpgradeRecordTrailer when it read the same before and after the stream.
	CloneUpgradeRecord func() string
	// Seed, when set, enables POST and GET /v1/seed: it carries out the operator's
	// instruction, one at a time. Backup and Clone may then be nil (their endpoints answer 404).
	Seed SeedFunc
	// SeedCheck, when set, refuses an instruction this instance cannot carry out (422) before
	// anything runs, e.g. a mode its flavor does not support.
	SeedCheck func(SeedRequest) error
	// SeedDone, when set, is called with the final status and error of each instruction once
	// it ended (from the instruction's goroutine).
	SeedDone func(SeedStatus, error)
	// Reseed, when set, enables POST /v1/reseed (ReseedFunc).
	Reseed ReseedFunc
	// Keep, when set, enables POST /v1/keep (KeepFunc).
	Keep KeepFunc
	// GTIDState, when set, enables POST /v1/gtid-state (GTIDStateFunc).
	GTIDState GTIDStateFunc
	// EngineUpgrade, when set, enables POST /v1/engine-upgrade (EngineUpgradeFunc).
	EngineUpgrade EngineUpgradeFunc
	// StopReleasedFile, when set, enables POST /v1/release-stop, which creates this file: it
	// ends the server container's preStop hold (docs/design/0051).
	StopReleasedFile string
	// Metrics, when set, serves GET /metrics to scrapers presenting the token in
	// MetricsTokenFile (not the agent's own token, which must never reach a scraper).
	Metrics http.Handler
	// MetricsTokenFile holds the scrapers' bearer token. It is read at the first scrape and
	// re-read when it changes; until it exists, /metrics answers 503.
	MetricsTokenFile string
	// Logger receives the agent's log; passwords and store configurations never reach it.
	Logger logr.Logger
	// ShutdownTimeout bounds the graceful shutdown (DefaultShutdownTimeout when zero).
	ShutdownTimeout time.Duration
}

// Server is the instance agent's HTTPS server. Build it with NewServer and run it with Serve
// or ServeListener, once.
type Server struct {
	opts  ServerOptions
	log   logr.Logger
	token *reloading[tokenDigest]
	cert  *reloading[*tls.Certificate]

	// base is the agent's lifetime: backup jobs run under it; stop cancels it.
	base context.Context
	stop context.CancelCauseFunc
	jobs jobTable
	seed seedState
	// metricsToken is loaded at the first scrape (lazyToken).
	metricsToken lazyToken
}

// errShutdown is the cause of the base context's end.
var errShutdown = errors.New("the agent is shutting down")

// NewServer checks the options and loads the token and the certificate once.
func NewServer(opts ServerOptions) (*Server, error) {
	switch {
	case opts.TokenFile == "":
		return nil, errors.New("agent: a token file is required")
	case opts.CertFile == "" || opts.KeyFile == "":
		return nil, errors.New("agent: a TLS certificate and key are required")
	case opts.Seed == nil && (opts.Backup == nil || opts.Clone == nil):
		return nil, errors.New("agent: the Backup and Clone functions are required")
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	if opts.Metrics != nil && opts.MetricsTokenFile == "" {
		return nil, errors.New("agent: serving metrics needs a metrics token file")
	}
	s := &Server{opts: opts, log: opts.Logger}
	s.metricsToken = lazyToken{path: opts.MetricsTokenFile, log: s.log.WithName("metrics-token")}
	s.seed.status.Phase = SeedWaiting
	var err error
	if s.token, err = newReloading(s.log.WithName("token"), parseToken, opts.TokenFile); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if s.cert, err = newReloading(s.log.WithName("tls"), parseKeyPair, opts.CertFile, opts.KeyFile); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	s.base, s.stop = context.WithCancelCause(context.Background())
	return s, nil
}

// Serve listens on addr (e.g. ":9443") and serves until ctx is done, then shuts down
// gracefully: it stops accepting, cancels the running backup job (or seed) and waits up to
// ShutdownTimeout for requests and the job to end. It returns nil after a shutdown caused by
// ctx.
func (s *Server) Serve(ctx context.Context, addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("agent: listening on %s: %w", addr, err)
	}
	return s.ServeListener(ctx, l)
}

// ServeListener is Serve on a listener the caller opened (plain TCP: the server adds TLS). It
// closes l.
func (s *Server) ServeListener(ctx context.Context, l net.Listener) error {
	tlsConfig := &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.cert.get(), nil
		},
	}
	srv := &http.Server{
		Handler:           s.handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// No WriteTimeout: a clone streams for as long as the data takes.
		BaseContext: func(net.Listener) context.Context { return s.base },
		ErrorLog:    newHTTPErrorLog(s.log),
	}
	s.log.Info("Serving", "address", l.Addr().String())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(tls.NewListener(l, tlsConfig)) }()

	select {
	case err := <-served:
		s.stop(errShutdown)
		s.jobs.wait(s.opts.ShutdownTimeout)
		return fmt.Errorf("agent: serving: %w", err)
	case <-ctx.Done():
	}
	s.log.Info("Shutting down")
	deadline := time.Now().Add(s.opts.ShutdownTimeout)
	// Cancel the job and in-flight clones first: they may run for hours.
	s.stop(errShutdown)
	sctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		s.log.Error(err, "Closing connections still open at the shutdown deadline")
		_ = srv.Close()
	}
	<-served
	if !s.jobs.wait(time.Until(deadline)) {
		s.log.Info("The backup job did not end before the shutdown deadline")
	}
	return nil
}

// handler routes the API, token checks included.
func (s *Server) handler() http.Handler {
	api := http.NewServeMux()
	if s.opts.Backup != nil {
		api.HandleFunc("POST /v1/backups", s.startBackup)
		api.HandleFunc("GET /v1/backups/{id}", s.getBackup)
		api.HandleFunc("DELETE /v1/backups/{id}", s.cancelBackup)
	}
	if s.opts.Clone != nil {
		api.HandleFunc("POST /v1/clone", s.clone)
	}
	if s.opts.Reseed != nil {
		api.HandleFunc("POST /v1/reseed", s.reseed)
	}
	if s.opts.Keep != nil {
		api.HandleFunc("POST /v1/keep", s.keep)
	}
	if s.opts.GTIDState != nil {
		api.HandleFunc("POST /v1/gtid-state", s.gtidState)
	}
	if s.opts.EngineUpgrade != nil {
		api.HandleFunc("POST /v1/engine-upgrade", s.engineUpgrade)
	}
	if s.opts.StopReleasedFile != "" {
		api.HandleFunc("POST /v1/release-stop", s.releaseStop)
	}
	if s.opts.Seed != nil {
		api.HandleFunc("POST /v1/seed", s.startSeed)
		api.HandleFunc("GET /v1/seed", s.getSeed)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	if s.opts.Metrics != nil {
		mux.Handle("GET /metrics", s.authenticateScraper(s.opts.Metrics))
	}
	mux.Handle("/", s.authenticate(api))
	return mux
}

// authenticateScraper refuses scrapes without the metrics token with 401, and answers 503
// while this agent has no metrics token file yet.
func (s *Server) authenticateScraper(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		want, err := s.metricsToken.get()
		if err != nil {
			s.log.V(1).Info("A scrape before the metrics token file exists", "error", err.Error())
			writeError(w, http.StatusServiceUnavailable, ErrorResponse{Error: "this agent has no metrics token yet"})
			return
		}
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || !want.matches(strings.TrimSpace(tok)) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dolphin-agent-metrics"`)
			writeError(w, http.StatusUnauthorized, ErrorResponse{Error: "the metrics token is required"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// authenticate refuses requests without the bearer token with 401.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || !s.token.get().matches(strings.TrimSpace(tok)) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dolphin-agent"`)
			writeError(w, http.StatusUnauthorized, ErrorResponse{Error: "a valid bearer token is required"})
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxRequestBytes)
		next.ServeHTTP(w, r)
	})
}

// decodeBody reads the JSON request body into v, answering 400/413 itself when it cannot.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	err := json.NewDecoder(r.Body).Decode(v)
	if err == nil {
		return true
	}
	if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
		writeError(w, http.StatusRequestEntityTooLarge, ErrorResponse{
			Error: fmt.Sprintf("the request body is larger than %d bytes", mbe.Limit)})
		return false
	}
	writeError(w, http.StatusBadRequest, ErrorResponse{Error: "decoding the request body: " + err.Error()})
	return false
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, e ErrorResponse) { writeJSON(w, code, e) }

// httpLogWriter sends net/http's own messages (TLS handshake errors…) to the logger.
type httpLogWriter struct{ log logr.Logger }

func (h httpLogWriter) Write(p []byte) (int, error) {
	h.log.V(1).Info(strings.TrimSpace(string(p)))
	return len(p), nil
}

func newHTTPErrorLog(l logr.Logger) *log.Logger {
	return log.New(httpLogWriter{l.WithName("http")}, "", 0)
}
