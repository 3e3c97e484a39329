package clustermanager

import (
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
	"github.com/dolphin-operator/dolphin/internal/sqlobjects"
	"github.com/dolphin-operator/dolphin/internal/topology"
)

// primarySQL is a process's pool on its primary as the schema account, reopened when the
// primary or the password changes.
type primarySQL struct {
	mu     sync.Mutex
	access topology.PrimaryAccess
	server *sqlobjects.Server
	closed bool // the engine stopped: open nothing more
}

func (p *primarySQL) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.server != nil {
		_ = p.server.Close()
		p.server = nil
	}
}

// PrimarySQL returns a connection to the cluster's current primary for application users and
// databases, or an error wrapping topology.ErrNoPrimary while it has none: no engine runs
// (paused, being deleted, not reconciled yet) or it fails over. The pool is shared by every
// caller and follows the primary.
func (m *Manager) PrimarySQL(key types.NamespacedName) (*sqlobjects.Server, error) {
	m.mu.Lock()
	p, ok := m.running[key]
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("no topology engine runs for %s (paused, or not reconciled yet): %w", key, topology.ErrNoPrimary)
	}
	access, err := p.engine.PrimaryAccess()
	if err != nil {
		return nil, err
	}
	p.sql.mu.Lock()
	defer p.sql.mu.Unlock()
	if p.sql.closed {
		return nil, fmt.Errorf("the topology engine of %s stopped: %w", key, topology.ErrNoPrimary)
	}
	if p.sql.server != nil && p.sql.access.SameTarget(access) {
		return p.sql.server, nil
	}
	if p.sql.server != nil {
		_ = p.sql.server.Close()
		p.sql.server = nil
	}
	db, err := dbsql.OpenReplicated(dbsql.Config{Flavor: access.Flavor, Addr: access.Member.Addr(),
		User: access.Account.User, Password: access.Account.Password, TLS: access.TLS})
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", access.Member.Name, err)
	}
	p.sql.access, p.sql.server = access, sqlobjects.NewServer(db, sqlobjects.Flavor(access.Flavor))
	return p.sql.server, nil
}
