package topology

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
)

// lostPrimaryProbe bounds the probe of a primary that a failover in progress has fenced off.
const lostPrimaryProbe = 100 * time.Millisecond

// probeSpacing is the time between probes of a primary that missed one: half the Interval,
// or a quarter when its last probe was refused. A refused connection is an answer, not a
// silence: the host is up and nothing listens on the server's port (the server died or is
// restarting), the probe cost nothing, and clients are refused too. Probing it again sooner
// keeps detectionAttempts' meaning — that many failed probes in a row — while a killed
// primary is detected in Interval/4 × (attempts-1) after its first refused probe
// (docs/design/0035).
func probeSpacing(interval time.Duration, refused bool) time.Duration {
	if refused {
		return interval / 4
	}
	return interval / 2
}

// refusedConnection reports whether err is a refused TCP connection.
func refusedConnection(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// receiverSeen is a replica receiver's progress at an observation and since when it is
// unchanged.
type receiverSeen struct {
	progress string
	since    time.Time
}

// noteReceivers sets each replica's ReceiverSilentFor: how long its receiver's progress has
// been the same over this engine's observations (it counts from the first observation that
// saw it, so it never overstates the silence).
func (e *Engine) noteReceivers(views []InstanceView, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range views {
		v := &views[i]
		addr := net.JoinHostPort(v.Host, strconv.Itoa(v.Port))
		if v.Status == nil {
			continue // not observed: keep what was seen
		}
		if v.Status.Replica == nil || v.Status.Replica.Progress == "" {
			delete(e.receivers, addr) // not a replica, or its progress is unknown
			continue
		}
		p := v.Status.Replica.Progress
		if seen, ok := e.receivers[addr]; ok && seen.progress == p {
			v.ReceiverSilentFor = now.Sub(seen.since)
			continue
		}
		e.receivers[addr] = receiverSeen{progress: p, since: now}
	}
}

// confirmAhead re-reads the primary when another instance seems to hold transactions it
// lacks. Observations run in parallel, so a replica read a moment after the primary may have
// received what the primary committed in between: that replica is not errant. A primary read
// after every other observation holds all that — an instance still ahead of it then really
// is.
func (e *Engine) confirmAhead(ctx context.Context, members []Member, views []InstanceView, primary string) {
	pi := slices.IndexFunc(views, func(v InstanceView) bool { return v.Name == primary })
	if pi < 0 || !views[pi].Reachable() {
		return
	}
	ahead := slices.ContainsFunc(views, func(v InstanceView) bool {
		return v.Name != primary && v.Reachable() && !isEmpty(v.Status.Executed) &&
			(views[pi].Status.Executed == nil || !views[pi].Status.Executed.Contains(v.Status.Executed))
	})
	if !ahead {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.ObserveTimeout)
	defer cancel()
	if again := e.observeOne(ctx, members[pi]); again.Reachable() {
		views[pi] = again
	}
}

// observe reads every instance in parallel, bounded by ObserveTimeout.
func (e *Engine) observe(ctx context.Context, members []Member) []InstanceView {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.ObserveTimeout)
	defer cancel()
	// Once a failover has fenced the replicas, nothing it decides depends on the lost
	// primary's answer: a hung one is not waited for at every step of the failover.
	e.mu.Lock()
	lost := ""
	if f := e.state.Failover; f != nil && f.Fenced {
		lost = f.From
	}
	e.mu.Unlock()
	views := make([]InstanceView, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			octx := ctx
			if m.Name == lost {
				var cancel context.CancelFunc
				octx, cancel = context.WithTimeout(ctx, lostPrimaryProbe)
				defer cancel()
			}
			views[i] = e.observeOne(octx, m)
		}()
	}
	wg.Wait()
	return views
}

func (e *Engine) observeOne(ctx context.Context, m Member) InstanceView {
	v := InstanceView{Name: m.Name, Host: m.Host, Port: m.Port, TLSServerName: m.TLSServerName, Absent: m.Absent, Stopping: m.Stopping}
	if m.Host == "" {
		v.Err = errors.New("no address yet (pod not running)")
		return v
	}
	_, st, gen, err := e.login(ctx, m)
	if err == nil {
		v.Status, v.CredentialsGeneration = st, gen
		// Accounts are never replicated (created with sql_log_bin=0), so every server needs
		// them made on it: once per engine start, again after a restart — the server may
		// have come back on a new, empty volume, with only the operator account its init
		// created — and whenever it has an older credentials generation than the current.
		// A restart shows as an uptime lower than at the last observation, or (when
		// observations were missed) as a start after the accounts were made.
		uptime := v.Status.Uptime
		started := time.Now().Add(-uptime - time.Second)
		e.mu.Lock()
		ensured, ok := e.accounts[m.Addr()]
		last, seen := e.uptimes[m.Addr()]
		restarted := (seen && uptime < last) || started.After(ensured)
		if ok && restarted {
			delete(e.accounts, m.Addr())
			delete(e.applied, m.Addr())
		}
		if restarted {
			delete(e.startupChecked, m.Addr()) // a new start: a new start-up refusal
		}
		v.NeedsVariables = len(e.state.Variables) > 0 && !e.applied[m.Addr()]
		e.uptimes[m.Addr()] = uptime
		e.mu.Unlock()
		v.NeedsAccounts = !ok || restarted || gen != e.cfg.Credentials.Generation
	}
	if err == nil || !dbsql.IsAccessDenied(err) || e.cfg.Credentials.Bootstrap.User == "" {
		v.Err = err
		return v
	}
	// No generation of the operator account works: a freshly initialised server answers
	// to the bootstrap account.
	boot, berr := e.open(m, e.cfg.Credentials.Bootstrap)
	if berr != nil {
		v.Err = errors.Join(err, berr)
		return v
	}
	defer boot.Close()
	if v.Status, berr = boot.Status(ctx); berr != nil {
		v.Status = nil
		v.Err = errors.Join(err, berr)
		return v
	}
	v.Fresh = true
	return v
}

func (e *Engine) open(m Member, a dbsql.Account) (dbsql.Instance, error) {
	cfg := dbsql.Config{
		Flavor: e.cfg.Flavor, Addr: m.Addr(), User: a.User, Password: a.Password,
		ConnectTimeout: e.cfg.ObserveTimeout, QueryTimeout: 10 * time.Second,
	}
	if m.TLSServerName != "" {
		t, err := e.tlsConfig(m)
		if err != nil {
			return nil, err
		}
		cfg.TLS = t
	}
	inst, err := dbsql.Open(cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", m.Name, err)
	}
	return inst, nil
}

// tlsConfig is the TLS configuration the engine connects to m with: m's certificate verified
// against the cluster's CAs for m's DNS name. Never a plain connection to an instance that
// serves TLS, and never an unverified one.
func (e *Engine) tlsConfig(m Member) (*tls.Config, error) {
	if e.cfg.TLSRoots == nil {
		return nil, fmt.Errorf("%s serves TLS but the cluster's CA is not known (its TLS Secret lacks ca.crt?)", m.Name)
	}
	return &tls.Config{RootCAs: e.cfg.TLSRoots, ServerName: m.TLSServerName, MinVersion: tls.VersionTLS12}, nil
}

// Close closes every cached connection.
func (e *Engine) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for addr, c := range e.conns {
		_ = c.in.Close()
		delete(e.conns, addr)
	}
	if e.fallbackConn != nil {
		_ = e.fallbackConn.Close()
		e.fallbackConn = nil
	}
}
