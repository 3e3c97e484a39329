package topology

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
)

// Credentials are the accounts the engine uses and maintains.
//
// Passwords change by generation: Accounts is the generation the credentials Secret holds
// now (Generation names it), Previous the older generations some instance may still have.
// Accounts are per server (created with sql_log_bin=0), so each instance moves to a new
// generation on its own: the engine logs in with whatever generation the instance accepts,
// rotates every account there to the current one (StepEnsureAccounts), and only then uses
// the new passwords on it; replicas are re-pointed with the new replication password once
// their primary has it. An instance that is down catches up when it answers again.
type Credentials struct {
	// Accounts are created on every instance; the engine logs in as Accounts.Operator and
	// replicas connect as Accounts.Replication.
	Accounts dbsql.Accounts
	// Generation identifies Accounts (a hash of the passwords); empty when generations are
	// not tracked (every instance is taken to have Accounts).
	Generation string
	// Previous are older generations, newest first, tried when an instance refuses the
	// current one.
	Previous []CredentialGeneration
	// Bootstrap logs in to a freshly initialised instance (install-time root without a
	// password) to create the accounts. Empty User disables it.
	Bootstrap dbsql.Account
}

// CredentialGeneration is one set of passwords.
type CredentialGeneration struct {
	ID       string
	Accounts dbsql.Accounts
}

// InstanceRecord is what the engine remembers of one instance between observations and
// across operator restarts (persisted in status.topology.instances).
type InstanceRecord struct {
	// Credentials is the credentials generation the instance's accounts have.
	Credentials string
	// Replication is the generation of the replication password the instance connects to
	// its source with ("" when unknown or not a replica).
	Replication string
}

// AllGenerationsRefused is in the observation error of an instance that refuses every known
// password (status.topology.instances[].error), so that the Kubernetes side can report a
// rotation that cannot be applied.
const AllGenerationsRefused = "refused the passwords of every credentials generation"

// generations lists the generations to log in to an instance with: the one it is known to
// have first, then the current one, then the older ones.
func (e *Engine) generations(name string) []CredentialGeneration {
	cur := CredentialGeneration{ID: e.cfg.Credentials.Generation, Accounts: e.cfg.Credentials.Accounts}
	all := append([]CredentialGeneration{cur}, e.cfg.Credentials.Previous...)
	e.mu.Lock()
	known := e.state.Instances[name].Credentials
	e.mu.Unlock()
	for i, g := range all {
		if i > 0 && g.ID == known && known != "" {
			return append([]CredentialGeneration{g}, append(all[:i:i], all[i+1:]...)...)
		}
	}
	return all
}

// login returns a working operator connection to m and the generation it logged in with.
// When the instance refuses every generation, the error is access denied.
func (e *Engine) login(ctx context.Context, m Member) (dbsql.Instance, *dbsql.Status, string, error) {
	var denied []string
	var firstErr error
	for _, g := range e.generations(m.Name) {
		conn, err := e.connAs(m, g)
		if err != nil {
			return nil, nil, "", err
		}
		st, err := conn.Status(ctx)
		if err == nil {
			e.recordCredentials(m.Name, g.ID)
			return conn, st, g.ID, nil
		}
		if !dbsql.IsAccessDenied(err) {
			return nil, nil, "", err
		}
		e.dropConn(m)
		if firstErr == nil {
			firstErr = err
		}
		denied = append(denied, orCurrent(g.ID))
	}
	if len(denied) > 1 {
		return nil, nil, "", fmt.Errorf("the operator account "+AllGenerationsRefused+" Dolphin knows (%s): "+
			"set operator-password in the credentials Secret back to a password this server accepts: %w", strings.Join(denied, ", "), firstErr)
	}
	return nil, nil, "", firstErr
}

func orCurrent(id string) string {
	if id == "" {
		return "current"
	}
	return id
}

// recordCredentials notes the generation an instance accepted.
func (e *Engine) recordCredentials(name, gen string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.state.Instances[name]
	if r.Credentials != gen {
		r.Credentials = gen
		e.state.Instances[name] = r
	}
}

// recordReplication notes the generation of the replication password name connects with.
func (e *Engine) recordReplication(name, gen string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.state.Instances[name]
	r.Replication = gen
	e.state.Instances[name] = r
}

// connAs returns the cached operator connection of m for generation g, replacing a cached
// connection of another generation.
func (e *Engine) connAs(m Member, g CredentialGeneration) (dbsql.Instance, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c, ok := e.conns[m.Addr()]; ok {
		// A pod re-created with (or without) TLS keeps its DNS address: a pool of the other
		// kind is replaced.
		if c.gen == g.ID && c.tlsName == m.TLSServerName {
			return c.in, nil
		}
		_ = c.in.Close()
		delete(e.conns, m.Addr())
	}
	in, err := e.open(m, g.Accounts.Operator)
	if err != nil {
		return nil, err
	}
	e.conns[m.Addr()] = cachedConn{in: in, gen: g.ID, tlsName: m.TLSServerName}
	return in, nil
}

// conn returns the operator connection of m with the generation m is known to accept.
func (e *Engine) conn(m Member) (dbsql.Instance, error) {
	return e.connAs(m, e.generations(m.Name)[0])
}

// dropConn closes the cached connection of m (its pool may hold refused logins).
func (e *Engine) dropConn(m Member) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c, ok := e.conns[m.Addr()]; ok {
		_ = c.in.Close()
		delete(e.conns, m.Addr())
	}
}

// cachedConn is an operator connection pool and the generation it logs in with.
type cachedConn struct {
	in  dbsql.Instance
	gen string
	// tlsName is the member's TLSServerName the pool verifies ("" for a plain pool).
	tlsName string
}

// ensureAccounts creates or updates Dolphin's accounts to the current generation: as the
// operator with whatever generation the instance accepts (an instance initialised with it,
// after an operator restart, or in the middle of a rotation), otherwise with the bootstrap
// account of a freshly initialised server. Only once that succeeded does the engine log in
// to the instance with the current passwords.
func (e *Engine) ensureAccounts(ctx context.Context, m Member) error {
	accounts := e.cfg.Credentials.Accounts
	in, _, _, err := e.login(ctx, m)
	if err == nil {
		if err := in.EnsureAccounts(ctx, accounts); err != nil {
			return err
		}
	} else {
		if !dbsql.IsAccessDenied(err) || e.cfg.Credentials.Bootstrap.User == "" {
			return err
		}
		boot, berr := e.open(m, e.cfg.Credentials.Bootstrap)
		if berr != nil {
			return errors.Join(err, berr)
		}
		defer boot.Close()
		if berr := boot.EnsureAccounts(ctx, accounts); berr != nil {
			return errors.Join(err, berr)
		}
	}
	e.recordCredentials(m.Name, e.cfg.Credentials.Generation)
	e.dropConn(m) // the next use logs in with the current passwords
	e.markAccounts(m)
	return nil
}

// staleReplicationPassword reports whether replica r, replicating from p, must be pointed
// at p again because it connects with a replication password p no longer has (p already has
// the current generation, or gets it earlier in this plan).
func staleReplicationPassword(v ClusterView, d Decision, p, r InstanceView) bool {
	if rs := r.Status.Replica; rs != nil && rs.LastIOErrno == errnoAccessDenied {
		return true
	}
	cur := v.CredentialsGeneration
	if cur == "" || r.ReplicationGeneration == "" || r.ReplicationGeneration == cur {
		return false
	}
	if p.CredentialsGeneration == cur {
		return true
	}
	for _, s := range d.Plan {
		if s.Kind == StepEnsureAccounts && s.Instance == p.Name {
			return true
		}
	}
	return false
}

// errnoAccessDenied is ER_ACCESS_DENIED_ERROR, which a replica's receiver reports when its
// source refuses the replication password.
const errnoAccessDenied = 1045
