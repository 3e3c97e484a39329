package topology

import (
	"context"
	"time"
)

// formerPrimaryDisconnects are the moments after a promotion at which the former primary's
// client connections are killed once more.
//
// Fencing kills them before the promotion, but clients reconnect through the primary Service
// until it stops sending new connections there: the role labels move after the promotion, the
// EndpointSlice follows, and kube-proxy rewrites its rules at most once per minSyncPeriod (1 s
// by default) on every node. kube-proxy never closes an established connection when its
// endpoint leaves, so a connection made in that window stays on the former primary — now a
// read-only replica — and its reads lag behind what the new primary acknowledged (the chaos
// checker counted 7,115 stale reads on the real node in one switchover before this). They
// are killed right after the promotion (the clients that connected while the former primary was
// fenced but still behind the Service, which is how a switchover resumed by a new operator ends
// up), and again once the Services have moved (3 s; 10 s covers a slower node): each time the
// clients reconnect, and once kube-proxy has moved they reach the new primary. Connections to the former primary through the replicas Service are killed
// too, and reconnect: a moment's disruption of readers right after a primary change.
var formerPrimaryDisconnects = []time.Duration{0, 3 * time.Second, 10 * time.Second}

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

// noteFormerPrimary records a promotion's former primary (e.mu held).
func (e *Engine) noteFormerPrimary(from string, at time.Time) {
	e.former = formerPrimary{name: from, since: at}
}

// disconnectFormerPrimaryClients kills the client connections of the former primary (all but
// Dolphin's own, replication and the server's threads) at each of formerPrimaryDisconnects,
// while it is not the primary again. Best effort: an unreachable former primary (killed, hung,
// cut off) has no client to disconnect, and a failure is logged.
func (e *Engine) disconnectFormerPrimaryClients(ctx context.Context, members []Member, views []InstanceView) {
	e.mu.Lock()
	f, primary := e.former, e.state.Primary
	due := f.name != "" && f.done < len(formerPrimaryDisconnects) && time.Since(f.since) >= formerPrimaryDisconnects[f.done]
	if due {
		e.former.done++
	}
	e.mu.Unlock()
	if !due || f.name == primary {
		return
	}
	answered := false
	for _, v := range views {
		answered = answered || v.Name == f.name && v.Reachable()
	}
	if !answered {
		return // killed, hung or cut off this cycle: a hung server would hold the cycle up
	}
	for _, m := range members {
		if m.Name != f.name {
			continue
		}
		in, err := e.conn(m)
		if err == nil {
			kctx, cancel := context.WithTimeout(ctx, max(e.cfg.ObserveTimeout, time.Second))
			err = in.KillConnections(kctx, []string{e.cfg.Credentials.Accounts.Operator.User})
			cancel()
		}
		if err != nil {
			e.cfg.Log.V(1).Info("could not disconnect the former primary's clients", "instance", f.name, "error", err.Error())
			return
		}
		e.cfg.Log.Info("disconnected the former primary's clients, which the primary Service may have sent there before it moved",
			"instance", f.name, "afterSeconds", formerPrimaryDisconnects[f.done].Seconds())
	}
}
