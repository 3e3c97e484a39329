package topology

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
)

// slowStep is how long a step may take before it is logged at the default level.
const slowStep = time.Second

// act runs a plan step by step and stops at the first failure. Every step is idempotent,
// so the next cycle can simply decide again and repeat what is still needed.
func (e *Engine) act(ctx context.Context, members []Member, d Decision) error {
	byName := make(map[string]Member, len(members))
	for _, m := range members {
		byName[m.Name] = m
	}
	for i := 0; i < len(d.Plan); {
		// Consecutive StopIO steps run together: each can take up to slave_net_timeout when
		// the receiver is stuck connecting to a hung primary, and they touch different
		// instances.
		j := i + 1
		if d.Plan[i].Kind == StepStopIO {
			for j < len(d.Plan) && d.Plan[j].Kind == StepStopIO {
				j++
			}
		}
		errs := make([]error, j-i)
		var wg sync.WaitGroup
		for k, s := range d.Plan[i:j] {
			wg.Go(func() {
				m, ok := byName[s.Instance]
				if !ok {
					errs[k] = fmt.Errorf("step %s: unknown instance", s)
					return
				}
				began := time.Now()
				if err := e.run(ctx, byName, m, s); err != nil {
					errs[k] = fmt.Errorf("step %s: %w", s, err)
					return
				}
				if took := time.Since(began); took >= slowStep {
					// A slow step is where an outage goes: said at the default level.
					e.cfg.Log.Info("slow step", "step", s.String(), "ms", took.Milliseconds())
				} else {
					e.cfg.Log.V(1).Info("step done", "step", s.String())
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		i = j
	}
	return nil
}

func (e *Engine) run(ctx context.Context, byName map[string]Member, m Member, s Step) error {
	if s.Kind == StepEnsureAccounts {
		return e.ensureAccounts(ctx, m)
	}
	in, err := e.conn(m)
	if err != nil {
		return err
	}
	switch s.Kind {
	case StepStopIO:
		return in.StopReplicationIO(ctx)
	case StepStopReplication:
		return in.StopReplication(ctx)
	case StepStartReplication:
		return in.StartReplication(ctx)
	case StepRefuseClients:
		if err := e.setInitConnect(ctx, in, refusedLogin); err != nil {
			return err
		}
		// Checked again by restoreRefusedLogins next cycle: a promotion that fails after this
		// step must not leave the primary refusing logins.
		e.mu.Lock()
		delete(e.loginsChecked, m.Addr())
		e.mu.Unlock()
		return in.KillClientConnections(ctx, []string{e.cfg.Credentials.Accounts.Operator.User})
	case StepFence:
		// Clients first: a commit waiting for a semi-sync acknowledgement holds up
		// SET GLOBAL read_only until it ends, and killing its connection ends the wait
		// without acknowledging it to the client. Then read-only, then semi-sync off — never
		// the other way round, which would release waiting commits as acknowledged — and
		// clients once more, for any that connected in between.
		spare := []string{e.cfg.Credentials.Accounts.Operator.User}
		if err := in.KillConnections(ctx, spare); err != nil {
			return err
		}
		if err := in.SetReadOnly(ctx, true); err != nil {
			return err
		}
		if err := in.SetSemiSyncSource(ctx, false); err != nil {
			return err
		}
		return in.KillConnections(ctx, spare)
	case StepWaitApplied:
		return in.WaitForGTID(ctx, s.GTID, e.cfg.WaitTimeout)
	case StepPromote:
		// A primary takes application logins: a server restarted in place refuses them
		// until its role is confirmed (mycnf.StartupLoginRefusal).
		if err := e.liftStartupRefusal(ctx, in); err != nil {
			return err
		}
		if err := in.ResetReplication(ctx); err != nil {
			return err
		}
		e.recordReplication(m.Name, "")
		if s.SemiSync {
			// The timeout first: a primary that must never acknowledge alone must not
			// fall back even once, before the next observation would correct it.
			if err := in.SetSemiSyncTimeout(ctx, e.cfg.Settings.SemiSyncTimeoutMS()); err != nil {
				return err
			}
		}
		if err := in.SetSemiSyncSource(ctx, s.SemiSync); err != nil {
			return err
		}
		if err := in.SetReadOnly(ctx, false); err != nil {
			return err
		}
		// Whoever read its binary log as a replica's — a binlog archiver that reached it
		// through the replicas Service, whose connection kube-proxy keeps — must not go on
		// reading a primary's, which can end in a tail no replica acknowledged: disconnected,
		// it reconnects and refuses a writable source (binlog.Endpoint.ReplicaOnly). The
		// replicas are pointed at it only after this step. Best effort: the promotion stands.
		if err := in.KillBinlogReaders(ctx); err != nil {
			e.cfg.Log.Info("could not disconnect the binary log's readers of the new primary", "instance", m.Name, "error", err.Error())
		}
		return nil
	case StepApplyVariables:
		e.mu.Lock()
		vars := maps.Clone(e.state.Variables)
		e.mu.Unlock()
		if err := in.SetGlobalVariables(ctx, vars); err != nil {
			return fmt.Errorf("applying spec.mysqlConfig at run time (fix the value; it is kept in my.cnf for the next restart): %w", err)
		}
		e.mu.Lock()
		e.applied[m.Addr()] = true
		e.mu.Unlock()
		return nil
	case StepSemiSyncSource:
		if s.SemiSync {
			if err := in.SetSemiSyncTimeout(ctx, e.cfg.Settings.SemiSyncTimeoutMS()); err != nil {
				return err
			}
		}
		return in.SetSemiSyncSource(ctx, s.SemiSync)
	case StepSemiSyncTimeout:
		return in.SetSemiSyncTimeout(ctx, e.cfg.Settings.SemiSyncTimeoutMS())
	case StepSecureTransport:
		return in.SetRequireSecureTransport(ctx, s.Secure)
	case StepRestartSemiSyncSource:
		e.cfg.Log.Info("restarting the semi-sync source side: a replica connection is stuck ending", "instance", m.Name)
		// Required durability: the clients of waiting commits are disconnected rather than
		// told "committed" (docs/design/0043).
		return in.RestartSemiSyncSource(ctx, !e.cfg.Settings.AckAlone)
	case StepFollowExternal:
		return e.followExternal(ctx, in, m, s)
	case StepCutover:
		return e.cutover(ctx, in, m)
	case StepVerifyExternal:
		return e.verifyExternal(ctx, m)
	case StepStartFallback:
		e.startFallback(ctx, func(ctx context.Context) (dbsql.GTIDSet, error) {
			st, err := in.Status(ctx)
			if err != nil {
				return nil, err
			}
			return st.Executed, nil
		})
		return nil
	case StepFallBack:
		return e.fallBack(ctx, m)
	case StepReplicate:
		src, ok := byName[s.Source]
		if !ok {
			return fmt.Errorf("unknown source %s", s.Source)
		}
		if s.Rejoin {
			if err := in.SeedGTIDForRejoin(ctx); err != nil {
				return err
			}
		}
		repl := e.cfg.Credentials.Accounts.Replication
		if err := in.ConfigureReplication(ctx, dbsql.Source{Host: src.Host, Port: src.Port, User: repl.User, Password: repl.Password,
			TLS: replicationTLS(m, src, e.cfg.TLSCAFile)}); err != nil {
			return err
		}
		e.recordReplication(m.Name, e.cfg.Credentials.Generation)
		// A start-up refusal stays: a replica just pointed at its source may be far behind
		// (a former primary restarted in place, readers still sent there); it ends with the
		// server's start-up period (liftExpiredStartupRefusals).
		return nil
	}
	return fmt.Errorf("unknown step kind %q", s.Kind)
}

func (e *Engine) markAccounts(m Member) {
	e.mu.Lock()
	e.accounts[m.Addr()] = time.Now()
	e.mu.Unlock()
}
