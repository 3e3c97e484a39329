package topology

import (
	"bytes"
	"context"
	"crypto/x509"
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

// needsReload reports whether a server presenting served must load the current certificate:
// it presents another one that was not issued after the current one (a newer one means the
// engine's configuration lags a renewal). Compared by content, not by expiry, so a certificate
// of a new CA that expires no later is loaded too. Nil current: TLS is off.
func needsReload(served, current *x509.Certificate) bool {
	if current == nil || served == nil || bytes.Equal(served.Raw, current.Raw) {
		return false
	}
	return !served.NotBefore.After(current.NotBefore)
}

// reloadCertificates compares, now and then, the certificate each reachable instance presents
// to a new connection with the current one (Config.TLSCertificate), and makes an instance that
// presents an older one load its files again (FLUSH SSL): no restart, and open sessions keep
// theirs. Failures are logged, never fatal: the old certificate stays in use.
func (e *Engine) reloadCertificates(ctx context.Context, members []Member, views []InstanceView) {
	if e.cfg.TLSCertificate == nil {
		return
	}
	reachable := map[string]bool{}
	for _, v := range views {
		reachable[v.Name] = v.Status != nil && !v.Fresh
	}
	for _, m := range members {
		if !reachable[m.Name] || m.TLSServerName == "" {
			continue // an instance that serves no TLS has nothing to reload
		}
		e.mu.Lock()
		next := e.tlsChecks[m.Name]
		e.mu.Unlock()
		if time.Now().Before(next) {
			continue
		}
		again := time.Now().Add(certificateCheckEvery)
		cctx, cancel := context.WithTimeout(ctx, max(e.cfg.ObserveTimeout, time.Second))
		served, err := dbsql.ServedCertificate(cctx, dbsql.Config{Flavor: e.cfg.Flavor, Addr: m.Addr(), ConnectTimeout: e.cfg.ObserveTimeout})
		cancel()
		switch {
		case err != nil:
			e.cfg.Log.V(1).Info("reading the served TLS certificate", "instance", m.Name, "error", err.Error())
			again = time.Now().Add(certificateRetryEvery)
		case needsReload(served, e.cfg.TLSCertificate):
			again = time.Now().Add(certificateRetryEvery)
			in, err := e.conn(m)
			if err == nil {
				err = in.ReloadTLS(ctx)
			}
			if err != nil {
				e.cfg.Log.Info("reloading the TLS certificate failed; the old one stays in use", "instance", m.Name, "error", err.Error())
			} else {
				e.cfg.Log.Info("asked the instance to load its current TLS certificate", "instance", m.Name,
					"served", served.SerialNumber.String(), "current", e.cfg.TLSCertificate.SerialNumber.String())
			}
		}
		e.mu.Lock()
		e.tlsChecks[m.Name] = again
		e.mu.Unlock()
	}
}
