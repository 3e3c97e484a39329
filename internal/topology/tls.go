package topology

import (
	"context"
	"time"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
)

// Certificate checks: how often an instance's served certificate is compared with the current
// one, and how soon again after a reload (the kubelet updates a Secret volume within about a
// minute, so the first reloads may load the old files again).
const (
	certificateCheckEvery = 30 * time.Second
	certificateRetryEvery = 10 * time.Second
)

// needsReload reports whether a server presenting a certificate that expires at served must
// load the current one (which expires at current): it is older. Zero current: TLS is off.
func needsReload(served, current time.Time) bool {
	return !current.IsZero() && served.Before(current.Truncate(time.Second))
}

// reloadCertificates compares, now and then, the certificate each reachable instance presents
// to a new connection with the current one (Config.TLSNotAfter), and makes an instance that
// presents an older one load its files again (FLUSH SSL): no restart, and open sessions keep
// theirs. Failures are logged, never fatal: the old certificate stays in use.
func (e *Engine) reloadCertificates(ctx context.Context, members []Member, views []InstanceView) {
	if e.cfg.TLSNotAfter.IsZero() {
		return
	}
	reachable := map[string]bool{}
	for _, v := range views {
		reachable[v.Name] = v.Status != nil && !v.Fresh
	}
	for _, m := range members {
		if !reachable[m.Name] {
			continue
		}
		e.mu.Lock()
		next := e.tlsChecks[m.Name]
		e.mu.Unlock()
		if time.Now().Before(next) {
			continue
		}
		again := time.Now().Add(certificateCheckEvery)
		op := e.generations(m.Name)[0].Accounts.Operator
		cctx, cancel := context.WithTimeout(ctx, max(e.cfg.ObserveTimeout, time.Second))
		served, err := dbsql.ServedCertificate(cctx, dbsql.Config{Flavor: e.cfg.Flavor, Addr: m.Addr(), User: op.User, Password: op.Password, ConnectTimeout: e.cfg.ObserveTimeout})
		cancel()
		switch {
		case err != nil:
			e.cfg.Log.V(1).Info("reading the served TLS certificate", "instance", m.Name, "error", err.Error())
			again = time.Now().Add(certificateRetryEvery)
		case needsReload(served.NotAfter, e.cfg.TLSNotAfter):
			again = time.Now().Add(certificateRetryEvery)
			in, err := e.conn(m)
			if err == nil {
				err = in.ReloadTLS(ctx)
			}
			if err != nil {
				e.cfg.Log.Info("reloading the TLS certificate failed; the old one stays in use", "instance", m.Name, "error", err.Error())
			} else {
				e.cfg.Log.Info("asked the instance to load its current TLS certificate", "instance", m.Name,
					"served", served.NotAfter, "current", e.cfg.TLSNotAfter)
			}
		}
		e.mu.Lock()
		e.tlsChecks[m.Name] = again
		e.mu.Unlock()
	}
}
