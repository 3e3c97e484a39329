package topology

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
	"github.com/dolphin-operator/dolphin/internal/migrate"
)

// followExternal runs StepFollowExternal on in (member m): the semi-sync source side as the
// step says — the timeout first, as for a promotion, so a primary that must never acknowledge
// alone never falls back — read-only kept on, then the server pointed at the external source
// (GTID auto-positioning from what it applied: the copy's position, or what it applied
// through the previous primary) and replication started. The replication generation recorded
// is the source's (ExternalSource.ID), so a changed account or address points it again.
func (e *Engine) followExternal(ctx context.Context, in dbsql.Instance, m Member, s Step) error {
	x := e.cfg.External
	if x == nil {
		return errors.New("no external source to follow: the cluster's configuration changed meanwhile")
	}
	if x.Unavailable != "" {
		// Before anything changes on the server: it stays read-only, as it is.
		return fmt.Errorf("%s cannot follow %s: %s", m.Name, x, x.Unavailable)
	}
	if s.SemiSync {
		if err := in.SetSemiSyncTimeout(ctx, e.cfg.Settings.SemiSyncTimeoutMS()); err != nil {
			return err
		}
	}
	if err := in.SetSemiSyncSource(ctx, s.SemiSync); err != nil {
		return err
	}
	if err := in.SetReadOnly(ctx, true); err != nil {
		return err
	}
	if err := in.ConfigureReplication(ctx, dbsql.Source{Host: x.Host, Port: x.Port, User: x.User, Password: x.Password, TLS: x.TLS}); err != nil {
		return err
	}
	e.recordReplication(m.Name, x.replicationGeneration())
	return nil
}

// cutover runs StepCutover on member m (in is its operator connection): migrate.Cutover
// between the source and m — the source fenced, m caught up to the source's final position,
// detached and opened — then what a promotion does besides (the start-up refusal lifted). The
// record is kept in the engine's state at once, so
// that this engine stops following the source before it reports: nothing points m at the
// source again. A cutover that failed before m opened was undone by migrate.Cutover (the
// source open again, m still following) and is the plan's error; one that opened m with a
// warning (a write reached the source after its fence) is recorded with it, for a person.
func (e *Engine) cutover(ctx context.Context, in dbsql.Instance, m Member) error {
	x := e.cfg.External
	if x == nil || x.Open == nil {
		return errors.New("no external source to cut over from: the cluster's configuration changed meanwhile")
	}
	src, err := x.Open()
	if err != nil {
		return fmt.Errorf("connecting to the source %s: %w", x, err)
	}
	defer src.Close()
	target, err := e.openPlain(m, e.cfg.WaitTimeout+10*time.Second)
	if err != nil {
		return err
	}
	defer target.Close()
	res, err := migrate.Cutover(ctx, src, target, e.cfg.WaitTimeout)
	if res.Opened.IsZero() {
		err = fmt.Errorf("cutover from %s to %s: %w", x, m.Name, err)
		// Not tried again for this request: each attempt fences the source and ends its
		// clients' sessions. A person asks again with a new value.
		e.mu.Lock()
		e.state.CutoverFailed = &CutoverFailure{ID: x.Cutover, At: time.Now(), Error: err.Error()}
		e.mu.Unlock()
		return err
	}
	rec := &CutoverRecord{Source: x.String(), Instance: m.Name, At: res.Opened, Position: res.Position, Pause: res.Opened.Sub(res.Fenced),
		FallBackIgnored: x.FallBack}
	if err != nil {
		rec.Warning = err.Error()
	}
	e.mu.Lock()
	e.state.Cutover = rec
	e.mu.Unlock()
	e.recordReplication(m.Name, "")
	e.cfg.Log.Info("cut over: the cluster takes writes", "source", x.String(), "instance", m.Name,
		"position", res.Position, "pause", rec.Pause.String(), "warning", rec.Warning)
	// The binary log's readers are left alone, unlike a promotion's: they are the cluster's
	// replicas, already replicating from m, whose acknowledgements the first writes wait for.
	if err := e.liftStartupRefusal(ctx, in); err != nil {
		e.cfg.Log.Info("could not lift the start-up refusal after the cutover", "instance", m.Name, "error", err.Error())
	}
	return nil
}

// openPlain is a pool of the operator's account on member m whose statements are those of
// any client (migrate's functions run their own), each allowed queryTimeout.
func (e *Engine) openPlain(m Member, queryTimeout time.Duration) (*sql.DB, error) {
	cfg := dbsql.Config{Flavor: e.cfg.Flavor, Addr: m.Addr(), User: e.cfg.Credentials.Accounts.Operator.User,
		Password: e.cfg.Credentials.Accounts.Operator.Password, ConnectTimeout: 5 * time.Second, QueryTimeout: queryTimeout}
	if m.TLSServerName != "" {
		t, err := e.tlsConfig(m)
		if err != nil {
			return nil, err
		}
		cfg.TLS = t
	}
	db, err := dbsql.OpenReplicated(cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", m.Name, err)
	}
	return db, nil
}

// verifyTimeout bounds one verification: the checksums of every table on both sides.
const verifyTimeout = 30 * time.Minute

// verifyExternal runs StepVerifyExternal on member m: every user table of the source
// (migrate.Observe lists them) compared with m's at one GTID position of the source
// (migrate.Verify, which stops m's replication meanwhile and starts it again whatever
// happens). The outcome is recorded with the request's ID, also when the verification could
// not be made: a request runs once, and a person asks again with a new ID. The engine does
// nothing else meanwhile; the cluster takes no writes while it follows the source.
func (e *Engine) verifyExternal(ctx context.Context, m Member) error {
	x := e.cfg.External
	if x == nil || x.Open == nil {
		return errors.New("no external source to verify against: the cluster's configuration changed meanwhile")
	}
	rec := &VerificationRecord{ID: x.Verify}
	err := func() error {
		src, err := x.Open()
		if err != nil {
			return fmt.Errorf("connecting to the source %s: %w", x, err)
		}
		defer src.Close()
		target, err := e.openPlain(m, verifyTimeout)
		if err != nil {
			return err
		}
		defer target.Close()
		vctx, cancel := context.WithTimeout(ctx, verifyTimeout)
		defer cancel()
		source, err := migrate.Observe(vctx, src)
		if err != nil {
			return err
		}
		tables := make([]string, 0, len(source.Tables))
		for _, t := range source.Tables {
			tables = append(tables, t.Schema+"."+t.Name)
		}
		if len(tables) == 0 {
			// Nothing compared is no verification: say so rather than "all equal".
			return errors.New("the account sees no user table on the source: nothing to compare (it needs SELECT ON *.*, as the copy does)")
		}
		v, err := migrate.Verify(vctx, src, target, tables, verifyTimeout)
		rec.Position, rec.Tables, rec.Mismatched = v.Position, len(v.Tables), v.Mismatched()
		return err
	}()
	if err != nil {
		rec.Error = err.Error()
	}
	rec.At = time.Now()
	e.mu.Lock()
	e.state.Verification = rec
	e.mu.Unlock()
	e.cfg.Log.Info("verified the copy against the source", "source", x.String(), "instance", m.Name, "request", rec.ID,
		"position", rec.Position, "tables", rec.Tables, "mismatched", rec.Mismatched, "error", rec.Error)
	return nil
}
