package topology

import (
	"crypto/tls"
	"errors"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
)

// ErrNoPrimary means the engine has no writable primary to offer: none was chosen yet, or a
// failover is in progress.
var ErrNoPrimary = errors.New("the cluster has no primary yet (being created, or failing over)")

// PrimaryAccess is where and as whom data that must replicate (application accounts and
// databases) is written: the recorded primary, and Dolphin's schema account with the
// password of the credentials generation the primary is known to have.
type PrimaryAccess struct {
	Member  Member
	Account dbsql.Account
	Flavor  dbsql.Flavor
	// TLS is set when the primary serves TLS: connect with it (CA and name verified).
	TLS *tls.Config
}

// SameTarget reports whether a and b name the same server, account and kind of connection
// (a pool opened for one serves the other).
func (a PrimaryAccess) SameTarget(b PrimaryAccess) bool {
	return a.Member == b.Member && a.Account == b.Account && a.Flavor == b.Flavor
}

// PrimaryAccess returns the current primary and the schema account to write with, or
// ErrNoPrimary. The schema account cannot bypass read_only, so a primary that was fenced
// since refuses the writes rather than taking them.
func (e *Engine) PrimaryAccess() (PrimaryAccess, error) {
	e.mu.Lock()
	primary, failing := e.state.Primary, e.state.Failover != nil
	e.mu.Unlock()
	if primary == "" || failing || e.cfg.Credentials.Accounts.Schema.User == "" {
		return PrimaryAccess{}, ErrNoPrimary
	}
	for _, m := range e.cfg.Members() {
		if m.Name != primary {
			continue
		}
		if m.Host == "" {
			return PrimaryAccess{}, ErrNoPrimary
		}
		a := e.generations(primary)[0].Accounts
		// The schema account shares the operator's password in every generation.
		user := e.cfg.Credentials.Accounts.Schema.User
		access := PrimaryAccess{Member: m, Account: dbsql.Account{User: user, Password: a.Operator.Password}, Flavor: e.cfg.Flavor}
		if m.TLSServerName != "" {
			t, err := e.tlsConfig(m)
			if err != nil {
				return PrimaryAccess{}, err
			}
			access.TLS = t
		}
		return access, nil
	}
	return PrimaryAccess{}, ErrNoPrimary
}
