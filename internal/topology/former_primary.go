package topology

import (
	"context"
	"fmt"
	"time"

	"github.com/dolphin-operator/dolphin/internal/mycnf"
	"github.com/dolphin-operator/dolphin/internal/sysvars"
)

// After a promotion the former primary's clients are disconnected, and for a moment it refuses
// application logins (docs/design/0049).
//
// Fencing kills client connections before the promotion, but clients reconnect through the
// primary Service until it stops sending new connections there: the role labels move after the
// promotion, the EndpointSlice follows, and kube-proxy rewrites its rules at most once per
// minSyncPeriod (1 s by default) on every node — and while a switchover waits (for a new
// operator to resume it) the fenced former primary is still the Service's endpoint. kube-proxy
// never closes an established connection when its endpoint leaves, so such a connection stays
// on the former primary — now a read-only replica — and its reads lag behind what the new
// primary acknowledged (the chaos checker counted 7,115 stale reads on the real node in one
// switchover before this).
//
// So, in the promotion's own cycle, the former primary gets an init_connect that fails
// (refusedLogin: accounts with CONNECTION ADMIN or SUPER — Dolphin's own — are not subject to
// it) and its client connections are killed; a client that reconnects there before the
// Services moved is refused and tries again, until kube-proxy sends it to the new primary.
// After formerPrimaryRefusal the configured init_connect is put back (Config.Variables, or the
// server's default), and the connections are killed once more then and at +10 s. Readers of the
// former primary through the replicas Service are refused and disconnected too: a moment's
// disruption right after a primary change. A new engine puts the configured value back on any
// server it finds refusing with a refusal older than its own (restoreRefusedLogins).

// formerPrimaryDisconnects are the moments after a promotion at which the former primary's
// client connections are killed; the first refuses logins, the second ends the refusal.
var formerPrimaryDisconnects = []time.Duration{0, formerPrimaryRefusal, 10 * time.Second}

// formerPrimaryRefusal is how long the former primary refuses application logins: long enough
// for the Services to move on every node.
const formerPrimaryRefusal = 3 * time.Second

// refusedLogin is the init_connect of a former primary while it refuses application logins.
// Its failure aborts the login ("init_connect command failed"); the message is in the server's
// error log.
const refusedLogin = "SIGNAL SQLSTATE '08004' SET MESSAGE_TEXT = 'dolphin: this server stopped being the primary a moment ago; connect again'"

// formerPrimaryWindow is how long after a promotion a new engine (a restarted operator, a new
// leader) still disconnects the former primary's clients the promotion's engine may not have.
const formerPrimaryWindow = 2 * time.Minute

// PromotionSeen is a change of primary as the status recorded it.
type PromotionSeen struct {
	// From is the former primary; At when the new one became writable.
	From string
	At   time.Time
}

// formerPrimary is the instance a promotion replaced and what was done since.
type formerPrimary struct {
	name  string
	since time.Time
	done  int // how many of formerPrimaryDisconnects have passed
}

// noteFormerPrimary records a promotion's former primary (e.mu held). Earlier former
// primaries whose disconnects are not all done are kept: a second promotion within their
// window (a just-promoted primary deleted and switched over) must not end the first one's
// refusal early — its server, killed and restarting, may answer only now, where kube-proxy
// still sends the primary Service's clients (a chaos round read stale data there for 1.5 s).
func (e *Engine) noteFormerPrimary(from string, at time.Time) {
	kept := e.formers[:0]
	for _, f := range e.formers {
		if f.name != from && f.done < len(formerPrimaryDisconnects) {
			kept = append(kept, f)
		}
	}
	e.formers = append(kept, formerPrimary{name: from, since: at})
}

// formerStep is a step of formerPrimaryDisconnects due on a former primary.
type formerStep struct {
	former formerPrimary
	step   int
}

// dueFormerSteps returns, for each former primary in formers, the latest step of
// formerPrimaryDisconnects due at now (an earlier one missed is not done late), and the
// former primaries still to follow: one that is the primary again (primary) or past
// formerPrimaryWindow is finished, as is one whose steps have all been done.
func dueFormerSteps(formers []formerPrimary, primary string, now time.Time) (due []formerStep, kept []formerPrimary) {
	for _, f := range formers {
		since := now.Sub(f.since)
		if f.name == "" || f.done >= len(formerPrimaryDisconnects) || f.name == primary || since > formerPrimaryWindow {
			continue
		}
		kept = append(kept, f)
		step := -1
		for k := f.done; k < len(formerPrimaryDisconnects) && since >= formerPrimaryDisconnects[k]; k++ {
			step = k
		}
		if step >= 0 {
			due = append(due, formerStep{former: f, step: step})
		}
	}
	return due, kept
}

// refusingFormer reports whether one of this engine's refusals is under way on name (e.mu
// held): its first disconnect done, the one that ends the refusal not yet.
func (e *Engine) refusingFormer(name string) bool {
	for _, f := range e.formers {
		if f.name == name && f.done == 1 {
			return true
		}
	}
	return false
}

// disconnectFormerPrimaryClients does what is due of formerPrimaryDisconnects on every former
// primary (dueFormerSteps), while it is not the primary again. A former primary that does not
// answer (killed and restarting, hung, cut off) is tried again at the next cycle — a killed
// server the kubelet restarts answers within seconds, as a replica clients must not read from
// yet — and is given up formerPrimaryWindow after the promotion. primary is the primary after
// this cycle's plan. A failure is logged.
func (e *Engine) disconnectFormerPrimaryClients(ctx context.Context, members []Member, views []InstanceView, primary string) {
	e.mu.Lock()
	due, kept := dueFormerSteps(e.formers, primary, time.Now())
	e.formers = kept
	e.mu.Unlock()
	for _, d := range due {
		e.disconnectFormer(ctx, members, views, d.former, d.step)
	}
}

// disconnectFormer does step of formerPrimaryDisconnects on the former primary f.
func (e *Engine) disconnectFormer(ctx context.Context, members []Member, views []InstanceView, f formerPrimary, step int) {
	var view InstanceView
	answered := false
	for _, v := range views {
		if v.Name == f.name && v.Reachable() {
			view, answered = v, true
		}
	}
	if !answered {
		return // a hung server would hold the cycle up; try again at the next one
	}
	for _, m := range members {
		if m.Name != f.name {
			continue
		}
		in, err := e.conn(m)
		if err == nil {
			kctx, cancel := context.WithTimeout(ctx, max(e.cfg.ObserveTimeout, time.Second))
			switch step {
			case 0:
				err = e.setInitConnect(kctx, in, refusedLogin)
				// Checked again by restoreRefusedLogins once this refusal is no longer under
				// way: a second promotion before step 1 (this server promoted back) must not
				// leave it refusing logins — the replication account's too — for good.
				e.mu.Lock()
				delete(e.loginsChecked, m.Addr())
				e.mu.Unlock()
			case 1:
				// Only this refusal ends. A server restarted in its start-up period gets its
				// start-up refusal back: step 0 replaced it, and ending both at once opened a
				// restarted former primary to application logins 1 s after its start, while a
				// loaded node's kube-proxy still sent it the primary Service's clients (stale
				// reads in the chaos suite, pod-delete-during-failover, 2026-12-07).
				err = e.resetInitConnectIf(kctx, in, refusedLogin, e.initConnectAfterRefusal(view))
			}
			if err == nil {
				// Dolphin's own connections stay, busy or not: after a rollout restarted the
				// former primary, mariadb-upgrade runs there as Dolphin's account, and killing
				// it failed the engine upgrade ("Server has gone away", fresh make test).
				err = in.KillClientConnections(kctx, []string{e.cfg.Credentials.Accounts.Operator.User})
			}
			cancel()
		}
		if err != nil {
			e.cfg.Log.Info("could not disconnect the former primary's clients; trying again", "instance", f.name, "error", err.Error())
			return
		}
		e.mu.Lock()
		for i := range e.formers {
			if e.formers[i].name == f.name && e.formers[i].since.Equal(f.since) {
				e.formers[i].done = step + 1
			}
		}
		e.mu.Unlock()
		e.cfg.Log.Info("disconnected the former primary's clients, which the primary Service may have sent there before it moved",
			"instance", f.name, "afterSeconds", time.Since(f.since).Round(100*time.Millisecond).Seconds(), "refusingLogins", step == 0)
	}
}

// initConnectSetter is what setInitConnect needs of an instance.
type initConnectSetter interface {
	SetGlobalVariables(ctx context.Context, vars map[string]string) error
}

// setInitConnect sets init_connect: to value, or when value is "" to what the cluster
// configures (spec.mysqlConfig through Config.Variables) or the server's default.
func (e *Engine) setInitConnect(ctx context.Context, in initConnectSetter, value string) error {
	lit := "DEFAULT"
	if value != "" {
		var err error
		if lit, err = sysvars.SetGlobalValue("init_connect", value); err != nil {
			return err
		}
	} else {
		e.mu.Lock()
		if v, ok := e.state.Variables["init_connect"]; ok {
			lit = v
		}
		e.mu.Unlock()
	}
	if err := in.SetGlobalVariables(ctx, map[string]string{"init_connect": lit}); err != nil {
		return fmt.Errorf("init_connect: %w", err)
	}
	return nil
}

// restoreRefusedLogins puts the configured init_connect back on every answering instance that
// still refuses application logins although no refusal of this engine is under way there: an
// engine that stopped within formerPrimaryRefusal of a promotion left it. Checked once per
// instance address by each engine.
func (e *Engine) restoreRefusedLogins(ctx context.Context, members []Member, views []InstanceView) {
	for _, m := range members {
		e.mu.Lock()
		checked := e.loginsChecked[m.Addr()]
		refusing := e.refusingFormer(m.Name) // this engine's own refusal
		e.mu.Unlock()
		if checked || refusing {
			continue
		}
		answered := false
		for _, v := range views {
			answered = answered || v.Name == m.Name && v.Reachable()
		}
		if !answered {
			continue
		}
		in, err := e.conn(m)
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, max(e.cfg.ObserveTimeout, time.Second))
		var view InstanceView
		for _, v := range views {
			if v.Name == m.Name {
				view = v
			}
		}
		v, err := in.GlobalVariable(cctx, "init_connect")
		if err == nil && v == refusedLogin {
			if err = e.setInitConnect(cctx, in, e.initConnectAfterRefusal(view)); err == nil {
				e.cfg.Log.Info("put back init_connect on a former primary an earlier engine left refusing logins", "instance", m.Name)
			}
		}
		cancel()
		if err == nil {
			e.mu.Lock()
			e.loginsChecked[m.Addr()] = true
			e.mu.Unlock()
		}
	}
}

// startupRefusalReader is what liftStartupRefusal needs of an instance.
type startupRefusalReader interface {
	initConnectSetter
	GlobalVariable(ctx context.Context, name string) (string, error)
}

// liftStartupRefusal ends the refusal of application logins a server of a cluster of more
// than one instance starts with (mycnf.StartupLoginRefusal, template generation 7): the
// server is promoted, or its start-up period is over. Any other init_connect (the cluster's,
// a former primary's refusal) is left alone.
func (e *Engine) liftStartupRefusal(ctx context.Context, in startupRefusalReader) error {
	return e.resetInitConnectIf(ctx, in, mycnf.StartupLoginRefusal, "")
}

// resetInitConnectIf sets init_connect to then (setInitConnect: "" is the configured value)
// when the server's is refusal.
func (e *Engine) resetInitConnectIf(ctx context.Context, in startupRefusalReader, refusal, then string) error {
	v, err := in.GlobalVariable(ctx, "init_connect")
	if err != nil {
		return fmt.Errorf("reading init_connect: %w", err)
	}
	if v != refusal {
		return nil
	}
	return e.setInitConnect(ctx, in, then)
}

// initConnectAfterRefusal is what a former primary's refusal gives way to (setInitConnect's
// value): the start-up refusal while the server is in its start-up period (it ends by itself
// with the uptime, and liftExpiredStartupRefusals takes it off after), unless the cluster
// configures init_connect (whose value ends the start-up refusal anyway); otherwise "", the
// configured value. view is the server's observation this cycle.
func (e *Engine) initConnectAfterRefusal(view InstanceView) string {
	e.mu.Lock()
	_, configured := e.state.Variables["init_connect"]
	e.mu.Unlock()
	if configured || view.Status == nil || view.Status.Uptime >= mycnf.StartupRefusalPeriod {
		return ""
	}
	return mycnf.StartupLoginRefusal
}

// liftExpiredStartupRefusals takes the start-up refusal off every answering server whose
// start-up period is over, once per server start: it refuses nobody any more (its condition
// is the uptime), but every application login would still run its query. Checked again
// after a restart (observeOne).
func (e *Engine) liftExpiredStartupRefusals(ctx context.Context, members []Member, views []InstanceView) {
	for _, v := range views {
		if !v.Reachable() || v.Status == nil || v.Status.Uptime < mycnf.StartupRefusalPeriod {
			continue
		}
		for _, m := range members {
			if m.Name != v.Name {
				continue
			}
			e.mu.Lock()
			checked := e.startupChecked[m.Addr()]
			e.mu.Unlock()
			if checked {
				continue
			}
			in, err := e.conn(m)
			if err != nil {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, max(e.cfg.ObserveTimeout, time.Second))
			err = e.liftStartupRefusal(cctx, in)
			cancel()
			if err != nil {
				e.cfg.Log.Info("could not end a start-up refusal of application logins; trying again", "instance", m.Name, "error", err.Error())
				continue
			}
			e.mu.Lock()
			e.startupChecked[m.Addr()] = true
			e.mu.Unlock()
		}
	}
}
