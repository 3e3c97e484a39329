package topology

import (
	"context"
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
// detached and opened — then what a promotion does besides (the start-up refusal lifted, the
// binary log's readers disconnected). The record is kept in the engine's state at once, so
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
	cfg := dbsql.Config{Flavor: e.cfg.Flavor, Addr: m.Addr(), User: e.cfg.Credentials.Accounts.Operator.User,
		Password: e.cfg.Credentials.Accounts.Operator.Password, ConnectTimeout: 5 * time.Second,
		QueryTimeout: e.cfg.WaitTimeout + 10*time.Second}
	if m.TLSServerName != "" {
		if cfg.TLS, err = e.tlsConfig(m); err != nil {
			return err
		}
	}
	target, err := dbsql.OpenReplicated(cfg)
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", m.Name, err)
	}
	defer target.Close()
	res, err := migrate.Cutover(ctx, src, target, e.cfg.WaitTimeout)
	if res.Opened.IsZero() {
		return fmt.Errorf("cutover from %s to %s: %w", x, m.Name, err)
	}
	rec := &CutoverRecord{Source: x.String(), Instance: m.Name, At: res.Opened, Position: res.Position, Pause: res.Opened.Sub(res.Fenced)}
	if err != nil {
		rec.Warning = err.Error()
	}
	e.mu.Lock()
	e.state.Cutover = rec
	e.mu.Unlock()
	e.recordReplication(m.Name, "")
	e.cfg.Log.Info("cut over: the cluster takes writes", "source", x.String(), "instance", m.Name,
		"position", res.Position, "pause", rec.Pause.String(), "warning", rec.Warning)
	if err := e.liftStartupRefusal(ctx, in); err != nil {
		e.cfg.Log.Info("could not lift the start-up refusal after the cutover", "instance", m.Name, "error", err.Error())
	}
	if err := in.KillBinlogReaders(ctx); err != nil {
		e.cfg.Log.Info("could not disconnect the binary log's readers after the cutover", "instance", m.Name, "error", err.Error())
	}
	return nil
}
