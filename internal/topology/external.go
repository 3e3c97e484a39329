package topology

import (
	"context"
	"errors"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
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
