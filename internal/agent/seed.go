package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// The modes of SeedRequest: how an uninitialised instance gets its data.
const (
	// SeedModeEmpty initialises an empty data directory (a new cluster's first instance).
	SeedModeEmpty = "empty"
	// SeedModeBackup restores the backup the instance's flags name (spec.bootstrap).
	SeedModeBackup = "backup"
	// SeedModeClone clones a healthy peer through its agent (POST /v1/clone).
	SeedModeClone = "clone"
	// SeedModeExternal copies a server outside the cluster through a migration account: a
	// consistent logical copy at one GTID position (a new cluster's first instance).
	SeedModeExternal = "external"
)

// SeedExternal is the server outside the cluster an external seed copies.
type SeedExternal struct {
	// Host and Port (default 3306) of the source server.
	Host string `json:"host"`
	Port int    `json:"port,omitempty"`
	// User and Password of the migration account.
	User     string `json:"user"`
	Password string `json:"password"`
	// CACertPEM, when set, makes the connections use TLS verified against it (the host's
	// name included).
	CACertPEM []byte `json:"caCertPEM,omitempty"`
}

// SeedClone is the peer a clone is taken from.
type SeedClone struct {
	// URL is the peer's agent, "https://<pod IP>:9443".
	URL string `json:"url"`
	// ServerName is the name its certificate carries (AgentServerName); empty means URL's
	// host.
	ServerName string `json:"serverName,omitempty"`
}

// SeedRequest is the body of POST /v1/seed: the operator's instruction.
type SeedRequest struct {
	// Mode is SeedModeEmpty, SeedModeBackup, SeedModeClone or SeedModeExternal.
	Mode string `json:"mode"`
	// Clone is the peer to clone (mode clone).
	Clone *SeedClone `json:"clone,omitempty"`
	// SourceDB is the account the peer's agent backs its server up with (mode clone): user
	// and password, the peer's agent knowing its server's socket.
	SourceDB DBConn `json:"sourceDB,omitzero"`
	// External is the server to copy (mode external).
	External *SeedExternal `json:"external,omitempty"`
}

// String describes the request without its password.
func (r SeedRequest) String() string {
	s := "seed " + r.Mode
	if r.Clone != nil {
		s += fmt.Sprintf(" from %s (server name %q) as %s", r.Clone.URL, r.Clone.ServerName, r.SourceDB.User)
	}
	if e := r.External; e != nil {
		s += fmt.Sprintf(" from %s port %d as %s (TLS %v)", e.Host, cmp.Or(e.Port, 3306), e.User, len(e.CACertPEM) > 0)
	}
	return s
}

// MarshalLog implements logr.Marshaler: the request without its password.
func (r SeedRequest) MarshalLog() any { return r.String() }

// check validates the request's shape.
func (r SeedRequest) check() error {
	switch r.Mode {
	case SeedModeEmpty, SeedModeBackup:
		return nil
	case SeedModeClone:
	case SeedModeExternal:
		if e := r.External; e == nil || e.Host == "" || e.User == "" {
			return errors.New("mode external needs external.host and external.user, the server to copy and its migration account")
		}
		return nil
	case "":
		return errors.New(`the mode is required: "empty", "backup", "clone" or "external"`)
	default:
		return fmt.Errorf(`unknown mode %q: want "empty", "backup", "clone" or "external"`, r.Mode)
	}
	if r.Clone == nil || r.Clone.URL == "" {
		return errors.New("mode clone needs clone.url, the peer's agent")
	}
	if u, err := url.Parse(r.Clone.URL); err != nil || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("clone.url %q is not https://host:port", r.Clone.URL)
	}
	if r.SourceDB.User == "" {
		return errors.New("mode clone needs sourceDB.user, the account the peer backs up with")
	}
	return nil
}

// SeedPhase is where an instance's seeding is.
type SeedPhase string

// The seed phases: Waiting for an instruction, Running it, then Succeeded or Failed (a new
// instruction may follow a failure).
const (
	SeedWaiting   SeedPhase = "Waiting"
	SeedRunning   SeedPhase = "Running"
	SeedSucceeded SeedPhase = "Succeeded"
	SeedFailed    SeedPhase = "Failed"
)

// SeedStatus is the answer of GET and POST /v1/seed.
type SeedStatus struct {
	Phase SeedPhase `json:"phase"`
	// Mode of the instruction running or last run; empty while Waiting.
	Mode string `json:"mode,omitempty"`
	// Error says why the last instruction failed, when Failed.
	Error string `json:"error,omitempty"`
	// Bytes received (or read from the store) so far.
	Bytes int64 `json:"bytes"`
	// StartedAt and FinishedAt (the agent's clock) bound the last instruction.
	StartedAt  time.Time `json:"startedAt,omitzero"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
}

// SeedFunc carries out an instruction: it fills the data directory the way req says and
// reports the bytes received so far through progress. ctx ends when the server shuts down.
type SeedFunc func(ctx context.Context, req SeedRequest, progress func(bytes int64)) error

// ErrSeedRunning is wrapped by Client.Seed's error when an instruction is running (409).
var ErrSeedRunning = errors.New("the instance is being seeded already")

// seedState is the seed endpoints' state: one instruction at a time.
type seedState struct {
	mu     sync.Mutex
	status SeedStatus
	bytes  atomic.Int64
}

func (st *seedState) snapshot() SeedStatus {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := st.status
	if s.Phase == SeedRunning {
		s.Bytes = st.bytes.Load()
	}
	return s
}

// startSeed serves POST /v1/seed.
func (s *Server) startSeed(w http.ResponseWriter, r *http.Request) {
	var req SeedRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if err := req.check(); err != nil {
		writeError(w, http.StatusBadRequest, ErrorResponse{Error: err.Error()})
		return
	}
	if s.opts.SeedCheck != nil {
		if err := s.opts.SeedCheck(req); err != nil {
			writeError(w, http.StatusUnprocessableEntity, ErrorResponse{Error: err.Error()})
			return
		}
	}
	st := &s.seed
	st.mu.Lock()
	defer st.mu.Unlock()
	switch st.status.Phase {
	case SeedRunning:
		writeError(w, http.StatusConflict, ErrorResponse{Error: fmt.Sprintf("seeding (mode %s) is running", st.status.Mode)})
		return
	case SeedSucceeded:
		writeJSON(w, http.StatusOK, st.status) // done: nothing runs again
		return
	}
	if s.base.Err() != nil {
		writeError(w, http.StatusServiceUnavailable, ErrorResponse{Error: errShutdown.Error()})
		return
	}
	st.bytes.Store(0)
	st.status = SeedStatus{Phase: SeedRunning, Mode: req.Mode, StartedAt: time.Now().UTC()}
	s.jobs.wg.Add(1)
	go s.runSeed(req)
	writeJSON(w, http.StatusAccepted, st.status)
}

// runSeed runs the instruction under the agent's lifetime and records how it ended.
func (s *Server) runSeed(req SeedRequest) {
	defer s.jobs.wg.Done()
	st := &s.seed
	log := s.log.WithValues("mode", req.Mode)
	log.Info("Seeding started", "request", req)
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("seeding panicked: %v", p)
			}
		}()
		return s.opts.Seed(s.base, req, func(n int64) { st.bytes.Store(n) })
	}()
	st.mu.Lock()
	status := &st.status
	status.FinishedAt, status.Bytes = time.Now().UTC(), st.bytes.Load()
	switch {
	case err == nil:
		status.Phase = SeedSucceeded
		log.Info("Seeding succeeded", "bytes", status.Bytes, "duration", status.FinishedAt.Sub(status.StartedAt).String())
	case errors.Is(context.Cause(s.base), errShutdown):
		status.Phase, status.Error = SeedFailed, fmt.Sprintf("%v: %v", errShutdown, err)
	default:
		status.Phase, status.Error = SeedFailed, err.Error()
	}
	if status.Phase == SeedFailed {
		log.Info("Seeding failed", "error", status.Error)
	}
	final := *status
	st.mu.Unlock()
	if s.opts.SeedDone != nil {
		s.opts.SeedDone(final, err)
	}
}

// SeedStatus is what GET /v1/seed answers now.
func (s *Server) SeedStatus() SeedStatus { return s.seed.snapshot() }

// getSeed serves GET /v1/seed.
func (s *Server) getSeed(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.seed.snapshot())
}
