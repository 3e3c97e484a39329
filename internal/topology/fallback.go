package topology

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/dolphin-operator/dolphin/internal/binlog"
	"github.com/dolphin-operator/dolphin/internal/dbsql"
	"github.com/dolphin-operator/dolphin/internal/migrate"
)

// fallbackObserveTimeout bounds one look at the server's replication from the cluster, and
// fallbackStartTimeout pointing it at the cluster: the engine's cycle waits for both.
const (
	fallbackObserveTimeout = 3 * time.Second
	fallbackStartTimeout   = 30 * time.Second
)

// holdsAll says why the executed set of the primary does not hold every transaction of
// position (nil when it does).
func holdsAll(executed dbsql.GTIDSet, position string) error {
	if executed == nil {
		return errors.New("the primary's executed transactions are not known")
	}
	pos, err := binlog.Parse(position)
	if err != nil {
		return err
	}
	have, err := binlog.Parse(executed.String())
	if err != nil {
		return err
	}
	if !have.Covers(pos) {
		return fmt.Errorf("the cluster's primary holds %s: the server has transactions the cluster lacks", executed)
	}
	return nil
}

// fallbackView puts the way back into the cycle's view (under e.mu): the configuration once
// the cluster was cut over, what pointing the server at the cluster gave, the last failed
// fall back, the fall back once done, and what the server reported this cycle (seen).
func (e *Engine) fallbackView(view *ClusterView, seen *FallbackObservation) {
	view.FellBack = e.state.FellBack
	if e.cfg.Fallback == nil || e.state.Cutover == nil || e.state.FellBack != nil {
		return
	}
	view.Fallback, view.FallbackStarted, view.FallbackSeen = e.cfg.Fallback, e.state.FallbackStarted, seen
	if f := e.state.FallBackFailed; f != nil {
		view.FallBackFailed = f.ID
	}
}

// observeFallback reads the server's replication from the cluster once it was pointed at it
// (nil before, after the fall back, or without a way back). A server that cannot be read is
// an observation with the error.
func (e *Engine) observeFallback(ctx context.Context) *FallbackObservation {
	e.mu.Lock()
	f, started, fell := e.cfg.Fallback, e.state.FallbackStarted, e.state.FellBack
	e.mu.Unlock()
	if f == nil || f.Open == nil || started == nil || started.Error != "" || fell != nil {
		return nil
	}
	db, err := e.fallbackDB(f)
	if err != nil {
		return &FallbackObservation{Error: err.Error()}
	}
	octx, cancel := context.WithTimeout(ctx, fallbackObserveTimeout)
	defer cancel()
	var readOnly int
	if err := db.QueryRowContext(octx, "SELECT @@read_only").Scan(&readOnly); err != nil {
		return &FallbackObservation{Error: fmt.Sprintf("reading %s: %v", f.Source, err)}
	}
	rs, err := migrate.ReplicationOf(octx, db)
	if err != nil {
		return &FallbackObservation{Error: fmt.Sprintf("reading %s's replication: %v", f.Source, err)}
	}
	if rs == nil {
		return &FallbackObservation{Read: true, Detached: true, Writable: readOnly == 0,
			Error: fmt.Sprintf("%s has no replication connection", f.Source)}
	}
	o := &FallbackObservation{Read: true, Writable: readOnly == 0, Replicating: rs.IORunning && rs.SQLRunning, Lag: rs.SecondsBehind}
	switch {
	case rs.LastSQLError != "":
		o.Error = rs.LastSQLError
	case rs.LastIOError != "":
		o.Error = rs.LastIOError
	}
	return o
}

// fallbackDB is the engine's pool to the server of the way back, opened once per engine.
func (e *Engine) fallbackDB(f *Fallback) (*sql.DB, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fallbackConn != nil {
		return e.fallbackConn, nil
	}
	db, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", f.Source, err)
	}
	db.SetMaxOpenConns(1)
	e.fallbackConn = db
	return db, nil
}

// startFallback runs StepStartFallback: the server, fenced since the cutover, replicates from
// the primary from the cutover's final position (migrate.Fallback). The outcome is recorded
// either way (a failure is retried after fallbackRetry unless the server took writes of its
// own since: then never); the step itself does not fail the plan.
func (e *Engine) startFallback(ctx context.Context, primaryExecuted func(context.Context) (dbsql.GTIDSet, error)) {
	e.mu.Lock()
	f, rec := e.cfg.Fallback, e.state.Cutover
	e.mu.Unlock()
	res := &FallbackStart{At: time.Now(), Generation: e.cfg.Credentials.Generation}
	sctx, cancel := context.WithTimeout(ctx, fallbackStartTimeout)
	defer cancel()
	err := func() error {
		if f == nil || f.Open == nil || rec == nil {
			return errors.New("no way back configured: the cluster's configuration changed meanwhile")
		}
		db, err := e.fallbackDB(f)
		if err != nil {
			return err
		}
		// The server continues from what it holds (its binary log up to the fence, what it
		// applied from the cluster since), which the cluster must hold all of: a transaction
		// of its own would never be on the cluster.
		repl := e.cfg.Credentials.Accounts.Replication
		return migrate.FallbackAgain(sctx, db, migrate.Endpoint{Host: f.PrimaryHost, Port: f.PrimaryPort, User: repl.User, Password: repl.Password},
			func(position string) error {
				// Read now, after the server stopped: the primary only moves on from here.
				executed, err := primaryExecuted(sctx)
				if err != nil {
					return fmt.Errorf("reading the primary's transactions: %w", err)
				}
				if err := holdsAll(executed, position); err != nil {
					return fmt.Errorf("%w: %s holds %s: %v", migrate.ErrSourceMoved, f.Source, position, err)
				}
				return nil
			})
	}()
	if err != nil {
		res.Error, res.Permanent = err.Error(), errors.Is(err, migrate.ErrSourceMoved)
		e.cfg.Log.Info("could not open the way back", "server", fallbackName(f), "error", res.Error, "permanent", res.Permanent)
	} else {
		e.cfg.Log.Info("the way back is open: the server replicates from the cluster", "server", f.Source, "primary", fmt.Sprintf("%s:%d", f.PrimaryHost, f.PrimaryPort))
	}
	e.mu.Lock()
	e.state.FallbackStarted = res
	e.mu.Unlock()
}

func fallbackName(f *Fallback) string {
	if f == nil {
		return ""
	}
	return f.Source
}

// fallBack runs StepFallBack on member m, the primary: migrate.Cutover the other way round —
// m fenced (read_only, its clients' sessions ended), the server caught up to m's final
// position, detached and opened. The record is kept at once, so this engine never opens the
// cluster again; a fall back that failed before the server opened was undone by
// migrate.Cutover (m open again, the server following) and is recorded, not tried again for
// the same request.
func (e *Engine) fallBack(ctx context.Context, m Member) error {
	e.mu.Lock()
	f := e.cfg.Fallback
	e.mu.Unlock()
	if f == nil || f.Open == nil {
		return errors.New("no way back configured: the cluster's configuration changed meanwhile")
	}
	server, err := f.Open()
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", f.Source, err)
	}
	defer server.Close()
	primary, err := e.openPlain(m, e.cfg.WaitTimeout+10*time.Second)
	if err != nil {
		return err
	}
	defer primary.Close()
	res, err := migrate.Cutover(ctx, primary, server, e.cfg.WaitTimeout)
	if res.Opened.IsZero() {
		err = fmt.Errorf("fall back from %s to %s: %w", m.Name, f.Source, err)
		e.mu.Lock()
		e.state.FallBackFailed = &CutoverFailure{ID: f.FallBack, At: time.Now(), Error: err.Error()}
		e.mu.Unlock()
		return err
	}
	rec := &CutoverRecord{Source: m.Name, Instance: f.Source, At: res.Opened, Position: res.Position, Pause: res.Opened.Sub(res.Fenced)}
	if err != nil {
		rec.Warning = err.Error()
	}
	e.mu.Lock()
	e.state.FellBack = rec
	e.mu.Unlock()
	e.cfg.Log.Info("fell back: the server takes writes again, the cluster is read-only", "server", f.Source, "from", m.Name,
		"position", res.Position, "pause", rec.Pause.String(), "warning", rec.Warning)
	return nil
}
