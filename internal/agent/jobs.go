package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dolphin-operator/dolphin/internal/backup"
)

// cancelWait is how long DELETE /v1/backups/{id} waits for the cancelled job to end before
// answering 202 (still ending).
const cancelWait = 5 * time.Second

// errCancelled is the cause given to a job's context by DELETE.
var errCancelled = errors.New("cancelled")

// job is one backup job. status is guarded by the jobTable's mu, except StoredBytes of a
// running job, which is stored.
type job struct {
	cancel context.CancelCauseFunc
	done   chan struct{}
	stored atomic.Int64
	status BackupStatus
}

// jobTable holds the running job and the last MaxFinishedBackups finished ones.
type jobTable struct {
	mu       sync.Mutex
	running  *job
	finished []*job // oldest first
	wg       sync.WaitGroup
}

// find returns the job with id, or nil. Called with mu held.
func (t *jobTable) find(id string) *job {
	if t.running != nil && t.running.status.ID == id {
		return t.running
	}
	for _, j := range t.finished {
		if j.status.ID == id {
			return j
		}
	}
	return nil
}

// snapshot is j's status now. Called with mu held.
func (j *job) snapshot() BackupStatus {
	st := j.status
	if st.Phase == BackupRunning {
		st.StoredBytes = j.stored.Load()
	}
	return st
}

// wait waits up to timeout for every job to end and reports whether they did.
func (t *jobTable) wait(timeout time.Duration) bool {
	done := make(chan struct{})
	go func() { t.wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// startBackup serves POST /v1/backups.
func (s *Server) startBackup(w http.ResponseWriter, r *http.Request) {
	var req BackupRequest
	if !decodeBody(w, r, &req) {
		return
	}
	switch {
	case !validID(req.ID):
		writeError(w, http.StatusBadRequest, ErrorResponse{Error: fmt.Sprintf("invalid backup ID %q: 1 to 128 characters of [A-Za-z0-9._-]", req.ID)})
		return
	case len(req.Store) == 0 || string(req.Store) == "null":
		writeError(w, http.StatusBadRequest, ErrorResponse{Error: "the store is required"})
		return
	}

	t := &s.jobs
	t.mu.Lock()
	defer t.mu.Unlock()
	if j := t.find(req.ID); j != nil {
		writeJSON(w, http.StatusOK, j.snapshot())
		return
	}
	if t.running != nil {
		id := t.running.status.ID
		writeError(w, http.StatusConflict, ErrorResponse{Error: fmt.Sprintf("backup %s is running", id), RunningID: id})
		return
	}
	if s.base.Err() != nil {
		writeError(w, http.StatusServiceUnavailable, ErrorResponse{Error: errShutdown.Error()})
		return
	}
	ctx, cancel := context.WithCancelCause(s.base)
	j := &job{cancel: cancel, done: make(chan struct{}), status: BackupStatus{
		ID: req.ID, Phase: BackupRunning, StartedAt: time.Now().UTC(),
	}}
	t.running = j
	t.wg.Add(1)
	go s.runBackup(ctx, j, req)
	writeJSON(w, http.StatusAccepted, j.snapshot())
}

// runBackup runs the job under ctx (the agent's lifetime) and records how it ended.
func (s *Server) runBackup(ctx context.Context, j *job, req BackupRequest) {
	t := &s.jobs
	defer t.wg.Done()
	defer close(j.done)
	log := s.log.WithValues("backup", req.ID)
	log.Info("Backup started", "request", req)

	m, err := func() (m *backup.Manifest, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("the backup panicked: %v", p)
			}
		}()
		return s.opts.Backup(ctx, req, func(n int64) { j.stored.Store(n) })
	}()
	j.cancel(nil)

	t.mu.Lock()
	defer t.mu.Unlock()
	st := &j.status
	st.FinishedAt = time.Now().UTC()
	st.StoredBytes = j.stored.Load()
	switch {
	case err == nil && m != nil:
		st.Phase, st.Manifest, st.StoredBytes = BackupSucceeded, m, m.StoredBytes()
		log.Info("Backup succeeded", "storedBytes", st.StoredBytes, "duration", st.FinishedAt.Sub(st.StartedAt).String())
	case err == nil:
		st.Phase, st.Error = BackupFailed, "the backup function returned no manifest"
	case errors.Is(context.Cause(ctx), errCancelled):
		st.Phase, st.Error = BackupFailed, errCancelled.Error()
	case errors.Is(context.Cause(ctx), errShutdown):
		st.Phase, st.Error = BackupFailed, fmt.Sprintf("%v: %v", errShutdown, err)
	default:
		st.Phase, st.Error = BackupFailed, err.Error()
	}
	if st.Phase == BackupFailed {
		log.Info("Backup failed", "error", st.Error, "storedBytes", st.StoredBytes)
	}
	t.running = nil
	t.finished = append(t.finished, j)
	if n := len(t.finished) - MaxFinishedBackups; n > 0 {
		t.finished = append([]*job(nil), t.finished[n:]...)
	}
}

// getBackup serves GET /v1/backups/{id}.
func (s *Server) getBackup(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	t := &s.jobs
	t.mu.Lock()
	j := t.find(id)
	var st BackupStatus
	if j != nil {
		st = j.snapshot()
	}
	t.mu.Unlock()
	if j == nil {
		writeError(w, http.StatusNotFound, ErrorResponse{Error: fmt.Sprintf("unknown backup %q", id)})
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// cancelBackup serves DELETE /v1/backups/{id}: it cancels the job when it runs and waits a
// little for it to end.
func (s *Server) cancelBackup(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	t := &s.jobs
	t.mu.Lock()
	j := t.find(id)
	if j != nil && j.status.Phase == BackupRunning {
		s.log.Info("Cancelling the backup", "backup", id)
		j.cancel(errCancelled)
	}
	t.mu.Unlock()
	if j == nil {
		writeError(w, http.StatusNotFound, ErrorResponse{Error: fmt.Sprintf("unknown backup %q", id)})
		return
	}
	code := http.StatusOK
	select {
	case <-j.done:
	case <-time.After(cancelWait):
		code = http.StatusAccepted
	case <-r.Context().Done():
		return
	}
	t.mu.Lock()
	st := j.snapshot()
	t.mu.Unlock()
	writeJSON(w, code, st)
}
