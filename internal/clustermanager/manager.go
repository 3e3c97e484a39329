// Package clustermanager runs one topology engine per MySQLCluster inside the operator. It
// is a controller-runtime Runnable that needs leader election: only the leader touches
// databases. The MySQLCluster reconciler tells it when a cluster changed (Update) or is being
// deleted (Stop); the engine reports back through pod role labels, the cluster's
// status.topology, events and metrics.
package clustermanager

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/dbsql"
	"github.com/dolphin-operator/dolphin/internal/metrics"
	"github.com/dolphin-operator/dolphin/internal/pki"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/topology"
)

// Addresser says where the engine reaches each instance. In a Kubernetes cluster that is the
// pod's stable DNS name behind the headless Service; tests map instances to loopback servers.
type Addresser interface {
	Member(c *dolphinv1.MySQLCluster, ordinal int) topology.Member
}

// DNSAddresser addresses instances as <pod>.<cluster>-instances.<namespace>.svc:3306. With a
// Client, a pod started with a TLS certificate is addressed for TLS (Member.TLSServerName);
// without one, every instance is taken to serve no TLS.
type DNSAddresser struct {
	Client client.Reader
}

// Member implements Addresser.
func (a DNSAddresser) Member(c *dolphinv1.MySQLCluster, ordinal int) topology.Member {
	name := resources.PodName(c, ordinal)
	m := topology.Member{Name: name, Host: resources.InstanceDNSName(c, ordinal), Port: resources.MySQLPort}
	if a.Client != nil {
		pod, ok := getPod(a.Client, c.Namespace, name)
		m.Absent = !ok
		m.Stopping = ok && pod.DeletionTimestamp != nil
		if ok && resources.PodServesTLS(pod) {
			m.TLSServerName = m.Host
		}
	}
	return m
}

// PodIPAddresser addresses instances by their pod IP, for operators that run where cluster
// DNS does not resolve (the `dolphin local` host). A pod without an IP yet gets an empty host,
// which the engine sees as unreachable. A pod that serves TLS is verified for its DNS name,
// which the certificate holds (its IP is not in it).
type PodIPAddresser struct {
	Client client.Reader
}

// Member implements Addresser.
func (a PodIPAddresser) Member(c *dolphinv1.MySQLCluster, ordinal int) topology.Member {
	name := resources.PodName(c, ordinal)
	m := topology.Member{Name: name, Port: resources.MySQLPort, Absent: true}
	if pod, ok := getPod(a.Client, c.Namespace, name); ok {
		m.Host, m.Absent, m.Stopping = pod.Status.PodIP, false, pod.DeletionTimestamp != nil
		if resources.PodServesTLS(pod) {
			m.TLSServerName = resources.InstanceDNSName(c, ordinal)
		}
	}
	return m
}

func getPod(r client.Reader, namespace, name string) (*corev1.Pod, bool) {
	var pod corev1.Pod
	if err := r.Get(context.Background(), types.NamespacedName{Namespace: namespace, Name: name}, &pod); err != nil {
		return nil, false
	}
	return &pod, true
}

// Manager runs the engines.
type Manager struct {
	Client client.Client
	// Reader reads live from the API server (the manager's APIReader) where a stale cache
	// could lose a write that matters (the promotion record). Nil uses Client.
	Reader    client.Reader
	Recorder  events.EventRecorder
	Addresser Addresser
	Log       logr.Logger
	// IdleWithoutPods stops a cluster's engine from observing every interval while none of its
	// pods has an address (the pods do not exist, or are Pending): it observes again when a pod
	// event triggers it. The operator sets it; tests whose instances are not pods do not.
	IdleWithoutPods bool
	// ReleaseStop ends the preStop hold of a pod's server through its agent
	// (docs/design/0051). The reporter calls it before it deletes a replaced primary's pod,
	// so that its server is stopped at once, as it was before pods held their stop: a hung
	// primary that resumed inside the hold would be fenced, and a fence lets it commit what
	// was waiting for an acknowledgement. Nil: such pods wait out their 1 s grace period.
	ReleaseStop func(ctx context.Context, c *dolphinv1.MySQLCluster, pod *corev1.Pod) error

	mu      sync.Mutex
	ctx     context.Context // set by Start; nil while not leader
	running map[types.NamespacedName]*process
	cas     map[types.NamespacedName][][]byte // CAs trusted per cluster (tlsState)
	wg      sync.WaitGroup
}

type process struct {
	engine   *topology.Engine
	reporter *reporter
	cancel   context.CancelFunc
	done     chan struct{}
	hash     string
	// sql is the pool on the primary for application users and databases (internal/controller/shared_sqlobjects.go).
	sql primarySQL
}

// anyPodAddressed reports whether a pod of the cluster (from the cache) has an address and is
// not being deleted. A cache that cannot be read counts as addressed: the engine keeps
// observing.
func (m *Manager) anyPodAddressed(c *dolphinv1.MySQLCluster) bool {
	var pods corev1.PodList
	if err := m.Client.List(context.Background(), &pods, client.InNamespace(c.Namespace),
		client.MatchingLabels(resources.SelectorLabels(c))); err != nil {
		return true
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.Status.PodIP != "" && p.DeletionTimestamp == nil {
			return true
		}
	}
	return false
}

// APIReader returns the live reader (Reader, or Client when unset).
func (m *Manager) APIReader() client.Reader {
	if m.Reader != nil {
		return m.Reader
	}
	return m.Client
}

// NeedLeaderElection makes the manager run on the leader only.
func (m *Manager) NeedLeaderElection() bool { return true }

// Start runs until ctx ends, then stops every engine. Clusters that changed before this
// replica became leader are picked up by listing them.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	m.ctx = ctx
	if m.running == nil {
		m.running = map[types.NamespacedName]*process{}
	}
	m.mu.Unlock()
	var list dolphinv1.MySQLClusterList
	if err := m.Client.List(ctx, &list); err != nil {
		return fmt.Errorf("listing MySQLClusters: %w", err)
	}
	for i := range list.Items {
		if err := m.Update(ctx, &list.Items[i]); err != nil {
			m.Log.Error(err, "starting topology engine", "cluster", client.ObjectKeyFromObject(&list.Items[i]))
		}
	}
	<-ctx.Done()
	m.mu.Lock()
	for key, p := range m.running {
		p.cancel()
		delete(m.running, key)
	}
	m.ctx = nil
	m.mu.Unlock()
	m.wg.Wait()
	return nil
}

// Running reports how many engines run (for tests and metrics).
func (m *Manager) Running() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.running)
}

// Update makes sure the engine of c runs with c's current spec and asks it to observe now.
// A deleted cluster's engine is stopped; a paused one's only fails over and fences
// (topology.Settings.Paused). Before this replica leads, it does nothing.
func (m *Manager) Update(ctx context.Context, c *dolphinv1.MySQLCluster) error {
	key := client.ObjectKeyFromObject(c)
	if !c.DeletionTimestamp.IsZero() {
		m.Stop(key)
		return nil
	}
	cfg, err := m.engineConfig(ctx, c)
	if err != nil {
		if c.Spec.Paused {
			// The paused reconciler creates nothing the engine would need; an engine that
			// runs keeps its settings until it can be given the new ones.
			m.Log.V(1).Info("paused: the topology engine keeps its settings", "cluster", key.String(), "error", err.Error())
			return nil
		}
		return err
	}
	hash := configHash(cfg)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx == nil {
		return nil
	}
	from := persisted(c)
	var published map[string]bool // the instances whose series the replaced engine's reports set
	if p, ok := m.running[key]; ok {
		if p.hash == hash {
			p.engine.Trigger()
			return nil
		}
		// The spec changed: restart with the new settings. The running engine's own state
		// is fresher than the cluster read from the cache, so it carries over.
		p.cancel()
		<-p.done
		from = p.engine.State()
		p.reporter.mu.Lock()
		published = p.reporter.metricInstances
		p.reporter.mu.Unlock()
		delete(m.running, key)
	}
	// A scaled-down cluster restarts its engine with fewer members: the new reporter drops the
	// series of the instances the old one published and it no longer sees.
	rep := &reporter{m: m, key: key, metricInstances: published}
	metrics.ExportPromotionCounters(key.Namespace, key.Name)
	cfg.Reporter = rep
	cfg.Log = m.Log.WithValues("cluster", key.String())
	e := topology.New(cfg, from)
	rep.engine = e
	pctx, cancel := context.WithCancel(m.ctx)
	p := &process{engine: e, reporter: rep, cancel: cancel, done: make(chan struct{}), hash: hash}
	m.running[key] = p
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer close(p.done)
		defer p.sql.close()
		_ = e.Run(pctx)
	}()
	m.Log.Info("topology engine started", "cluster", key.String())
	return nil
}

// Stop stops the engine of a cluster that is being deleted (or is gone) and waits for it to
// finish its current cycle. The CAs remembered for it are forgotten: a cluster created again
// under the name has CAs of its own.
func (m *Manager) Stop(key types.NamespacedName) {
	m.mu.Lock()
	p, ok := m.running[key]
	delete(m.running, key)
	delete(m.cas, key)
	m.mu.Unlock()
	if ok {
		p.cancel()
		<-p.done
		m.Log.Info("topology engine stopped", "cluster", key.String())
	}
}

// RequestSwitchover asks the engine of a cluster for a planned switchover, and reports whether
// the request is new (see topology.Engine.RequestSwitchover). It returns once the request is
// recorded in status.topology.switchoverInProgress, from which a restarted operator resumes
// it: a caller may then forget the request (remove the annotation that asked for it).
func (m *Manager) RequestSwitchover(ctx context.Context, key types.NamespacedName, to, id string) (bool, error) {
	m.mu.Lock()
	p, ok := m.running[key]
	m.mu.Unlock()
	if !ok {
		return false, fmt.Errorf("no topology engine runs for %s", key)
	}
	fresh := p.engine.RequestSwitchoverOnce(to, id)
	if err := p.reporter.recordSwitchover(ctx); err != nil {
		return fresh, err
	}
	m.mu.Lock()
	replaced := m.running[key] != p
	m.mu.Unlock()
	if replaced {
		// The engine was restarted meanwhile (a changed spec): the request went to the old one,
		// and the new one may not have read it from status. The caller asks again.
		return fresh, fmt.Errorf("the topology engine of %s was restarted while the switchover was requested: retrying", key)
	}
	return fresh, nil
}

// AcceptFailoverLoss lets the cluster's failover from the lost primary `from`, waiting for
// writes no candidate holds, promote the best candidate anyway (topology.Engine.AcceptFailoverLoss).
// It reports whether such a failover is in progress.
func (m *Manager) AcceptFailoverLoss(key types.NamespacedName, from string) (bool, error) {
	m.mu.Lock()
	p, ok := m.running[key]
	m.mu.Unlock()
	if !ok {
		return false, fmt.Errorf("no topology engine runs for %s", key)
	}
	return p.engine.AcceptFailoverLoss(from), nil
}

// engineConfig builds an engine configuration from the cluster and its credentials Secret.
func (m *Manager) engineConfig(ctx context.Context, c *dolphinv1.MySQLCluster) (topology.Config, error) {
	d := resources.Defaulted(c)
	var s corev1.Secret
	key := types.NamespacedName{Namespace: c.Namespace, Name: resources.CredentialsSecretName(c)}
	err := m.Client.Get(ctx, key, &s)
	if apierrors.IsNotFound(err) {
		// The cache holds only labelled Secrets: a user-supplied one is labelled by the
		// reconcile that updates the engine, and may not have reached the cache yet.
		err = m.APIReader().Get(ctx, key, &s)
	}
	if err != nil {
		if apierrors.IsNotFound(err) {
			return topology.Config{}, fmt.Errorf("credentials Secret %s does not exist yet: %w", key, err)
		}
		return topology.Config{}, fmt.Errorf("reading credentials Secret %s: %w", key, err)
	}
	if missing := resources.MissingCredentialKeys(&s); len(missing) > 0 {
		// Never start an engine with empty passwords: it would rotate the accounts to them.
		return topology.Config{}, fmt.Errorf("credentials Secret %s lacks %v", key, missing)
	}
	// Earlier generations, for instances that have not taken the current passwords yet.
	var hist corev1.Secret
	hkey := types.NamespacedName{Namespace: c.Namespace, Name: resources.CredentialsHistorySecretName(c)}
	if err := m.Client.Get(ctx, hkey, &hist); err != nil && !apierrors.IsNotFound(err) {
		return topology.Config{}, fmt.Errorf("reading credentials history Secret %s: %w", hkey, err)
	}
	history := resources.ReadCredentialHistory(&hist)
	current := resources.CredentialsGeneration(s.Data)
	var previous []topology.CredentialGeneration
	for _, g := range history.Generations {
		if g != current {
			previous = append(previous, topology.CredentialGeneration{ID: g, Accounts: accountsFrom(history.Passwords[g])})
		}
	}
	n := int(resources.InstancesToRun(d))
	// Addresses are looked up at every observation: a pod IP changes when the pod is re-created.
	members := func() []topology.Member {
		out := make([]topology.Member, n)
		for i := range out {
			out[i] = m.Addresser.Member(d, i)
		}
		return out
	}
	vars, err := resources.DynamicVariables(d)
	if err != nil {
		return topology.Config{}, fmt.Errorf("run-time settings of spec.mysqlConfig: %w", err)
	}
	interval := d.Spec.Failover.Detection.Interval.Duration
	tlsCert, tlsRoots, tlsRootsID, err := m.tlsState(ctx, d)
	if err != nil {
		return topology.Config{}, err
	}
	external, err := m.externalSource(ctx, d)
	if err != nil {
		return topology.Config{}, err
	}
	fallback, err := m.fallback(ctx, d)
	if err != nil {
		return topology.Config{}, err
	}
	var dormant func() bool
	if m.IdleWithoutPods {
		dormant = func() bool { return !m.anyPodAddressed(d) }
	}
	return topology.Config{
		Dormant:        dormant,
		TLSCertificate: tlsCert,
		TLSRoots:       tlsRoots,
		TLSRootsID:     tlsRootsID,
		TLSRequired:    d.Spec.TLS.Enabled && d.Spec.TLS.RequireForClients,
		TLSCAFile:      path.Join(resources.TLSDir, resources.TLSCAKey),
		External:       external,
		Fallback:       fallback,
		Flavor:         dbsql.Flavor(d.Spec.Engine.Flavor),
		Members:        members,
		Credentials: topology.Credentials{
			Accounts:   accountsFrom(s.Data),
			Generation: current,
			Previous:   previous,
			// A freshly initialised server has a passwordless root over TCP; EnsureAccounts
			// removes it once Dolphin's accounts exist.
			Bootstrap: dbsql.Account{User: "root"},
		},
		Settings: topology.Settings{
			FailoverEnabled:   *d.Spec.Failover.Enabled,
			DetectionAttempts: int(d.Spec.Failover.Detection.Attempts),
			AckAlone:          d.Spec.Durability == dolphinv1.DurabilityPreferred,
			MaxReplicaLag:     time.Duration(*d.Spec.ReplicaService.MaxLagSeconds) * time.Second,
			Paused:            c.Spec.Paused,
		},
		Variables: vars,
		Interval:  interval,
		// ObserveTimeout: the engine's default, half the interval (docs/design/0035).
	}, nil
}

// tlsState reads the cluster's TLS Secret: the instances' current certificate (nil when TLS is
// off or the Secret is not there yet: nothing to reload), and the CAs to
// verify instances that serve TLS with — its ca.crt, plus the CAs this operator trusted for
// the cluster before (remembered in memory, the last few), so that a CA change does not make
// instances still presenting a certificate of the old CA unreachable before they reload.
// The CAs are kept while TLS is off too: pods started with TLS may still run.
func (m *Manager) tlsState(ctx context.Context, c *dolphinv1.MySQLCluster) (cert *x509.Certificate, roots *x509.CertPool, rootsID string, err error) {
	key := types.NamespacedName{Namespace: c.Namespace, Name: resources.TLSSecretName(c)}
	var s corev1.Secret
	err = m.Client.Get(ctx, key, &s)
	if apierrors.IsNotFound(err) {
		err = m.APIReader().Get(ctx, key, &s)
	}
	switch {
	case apierrors.IsNotFound(err):
		roots, rootsID = m.trustedCAs(client.ObjectKeyFromObject(c), nil)
		return nil, roots, rootsID, nil
	case err != nil:
		return nil, nil, "", fmt.Errorf("reading TLS Secret %s: %w", key, err)
	}
	roots, rootsID = m.trustedCAs(client.ObjectKeyFromObject(c), s.Data[resources.TLSCAKey])
	if !c.Spec.TLS.Enabled {
		return nil, roots, rootsID, nil
	}
	if cert, err = pki.ParseCert(s.Data[resources.TLSCertKey]); err != nil {
		return nil, roots, rootsID, nil // the reconciler reports a malformed certificate
	}
	return cert, roots, rootsID, nil
}

// certRaw is a certificate's DER, nil for none.
func certRaw(c *x509.Certificate) []byte {
	if c == nil {
		return nil
	}
	return c.Raw
}

// trustedCAsKept is how many CAs per cluster an operator keeps trusting after a change.
const trustedCAsKept = 3

// trustedCAs adds caPEM (when it is a certificate) to the CAs remembered for the cluster and
// returns them all as a pool (nil when there is none) and a hash identifying them.
func (m *Manager) trustedCAs(key types.NamespacedName, caPEM []byte) (*x509.CertPool, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cas == nil {
		m.cas = map[types.NamespacedName][][]byte{}
	}
	known := m.cas[key]
	if len(caPEM) > 0 && x509.NewCertPool().AppendCertsFromPEM(caPEM) &&
		!slices.ContainsFunc(known, func(b []byte) bool { return bytes.Equal(b, caPEM) }) {
		known = append(known, bytes.Clone(caPEM))
		if len(known) > trustedCAsKept {
			known = known[len(known)-trustedCAsKept:]
		}
		m.cas[key] = known
	}
	if len(known) == 0 {
		return nil, ""
	}
	pool, sum := x509.NewCertPool(), sha256.New()
	for _, b := range known {
		pool.AppendCertsFromPEM(b)
		sum.Write(b)
	}
	return pool, hex.EncodeToString(sum.Sum(nil)[:8])
}

// accountsFrom makes Dolphin's accounts from the passwords of one credentials generation.
func accountsFrom(pw map[string][]byte) dbsql.Accounts {
	get := func(k string) string { return string(pw[k]) }
	return dbsql.Accounts{
		Operator:    dbsql.Account{User: resources.OperatorUser, Password: get(resources.OperatorPasswordKey)},
		Replication: dbsql.Account{User: resources.ReplicationUser, Password: get(resources.ReplicationPasswordKey)},
		Monitor:     dbsql.Account{User: resources.MonitorUser, Password: get(resources.MonitorPasswordKey)},
		Schema:      dbsql.Account{User: resources.SchemaUser, Password: get(resources.OperatorPasswordKey)},
		Root:        dbsql.Account{User: "root", Password: get(resources.RootPasswordKey)},
	}
}

// configHash identifies what the engine was started with, so Update restarts it on change.
func configHash(cfg topology.Config) string {
	var names []string
	for _, m := range cfg.Members() {
		names = append(names, m.Name)
	}
	b, _ := json.Marshal(struct {
		Members   []string
		Accounts  dbsql.Accounts
		Previous  []topology.CredentialGeneration
		Settings  topology.Settings
		Variables map[string]string
		Interval  time.Duration
		Flavor    dbsql.Flavor
		TLS       []byte
		CAs       string
		Secure    bool
		External  string
		Cutover   string
		Verify    string
		Fallback  string
		FallBack  string
	}{names, cfg.Credentials.Accounts, cfg.Credentials.Previous, cfg.Settings, cfg.Variables, cfg.Interval, cfg.Flavor, certRaw(cfg.TLSCertificate), cfg.TLSRootsID, cfg.TLSRequired,
		externalID(cfg.External), externalCutover(cfg.External), externalVerify(cfg.External), fallbackID(cfg.Fallback), externalFallBack(cfg.External)})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
