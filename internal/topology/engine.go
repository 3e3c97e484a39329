package topology

import (
	"context"
	"crypto/x509"
	"database/sql"
	"fmt"
	"maps"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/dolphin-operator/dolphin/internal/dbsql"
)

// Member is one instance the engine manages and where to reach it. In a Kubernetes cluster
// the host is the pod's DNS name; in tests a loopback address.
type Member struct {
	Name string
	Host string
	Port int
	// TLSServerName is set when the instance was started with a TLS certificate: the engine
	// then connects over TLS only, verifying the certificate against Config.TLSRoots for this
	// name (the pod's DNS name, also when Host is its IP), and replicas use TLS to it. Empty:
	// the instance serves no TLS (TLS off, or its pod not restarted with it yet).
	TLSServerName string
	// Absent is set when the instance has no pod (being re-created, or not created yet): what
	// it will serve is not known, so it does not count in decisions about the others
	// (require_secure_transport is not lifted for it).
	Absent bool
	// Stopping is set when the instance's pod is being deleted (a drain, a user's delete):
	// its server stops within seconds, so it is promoted only when no other candidate holds
	// as much, and never chosen for a switchover (docs/design/0051).
	Stopping bool
}

// replicationTLS is how replica r verifies source src over TLS, nil for a plain connection:
// both must serve TLS (the replica reads the CA from its own certificate volume). The name is
// checked only where the replica dials the name the certificate holds; a pod IP is not in it.
func replicationTLS(r, src Member, caFile string) *dbsql.SourceTLS {
	if r.TLSServerName == "" || src.TLSServerName == "" || caFile == "" {
		return nil
	}
	return &dbsql.SourceTLS{CAFile: caFile, VerifyName: src.Host == src.TLSServerName}
}

// Addr is host:port.
func (m Member) Addr() string { return net.JoinHostPort(m.Host, strconv.Itoa(m.Port)) }

// Config configures one cluster's engine.
type Config struct {
	Flavor      dbsql.Flavor
	Members     func() []Member
	Credentials Credentials
	Settings    Settings
	// Interval is the time between observations (the failover detection interval).
	Interval time.Duration
	// Dormant, when set, reports that no instance of the cluster runs (no pod has an
	// address): the engine then observes only when triggered (a pod event), not every
	// Interval — a cluster whose pods do not exist costs nothing.
	Dormant func() bool
	// ObserveTimeout bounds one observation of all instances: the deadline of each probe
	// (default half the Interval, at least 250ms). A probe that misses it counts as a miss.
	ObserveTimeout time.Duration
	// WaitTimeout bounds waiting for a promoted replica to apply what it received (default 60s).
	WaitTimeout time.Duration
	// Variables are the server settings applied at run time on every instance (variable ->
	// SET GLOBAL literal, see resources.DynamicVariables). A variable that an earlier engine
	// of this cluster applied and that is no longer listed is set back to DEFAULT.
	Variables map[string]string
	// TLSCertificate is the instances' current TLS certificate (nil: TLS off). An instance
	// presenting another, older one is asked to load its files again (FLUSH SSL).
	TLSCertificate *x509.Certificate
	// TLSRoots are the CAs an instance's certificate must chain to when it serves TLS
	// (Member.TLSServerName). Nil: such an instance cannot be reached (never in plain text).
	TLSRoots *x509.CertPool
	// TLSRootsID identifies the CAs in TLSRoots (a hash): a change of CA is a change of
	// configuration.
	TLSRootsID string
	// TLSCAFile is the CA file as the servers see it, which replicas verify their source with.
	TLSCAFile string
	// TLSRequired makes every instance refuse plain TCP logins (require_secure_transport)
	// once every member serves TLS; off otherwise.
	TLSRequired bool
	// External, when set, is the server outside the cluster that the cluster follows until a
	// cutover (ExternalSource): no instance is opened for writes meanwhile.
	External *ExternalSource
	// Fallback, when set, is the way back to the server the cluster was cut over from
	// (Fallback): the server is pointed at the primary after the cutover, and a request
	// moves writes back to it.
	Fallback *Fallback
	// Reporter receives the outcome of every cycle; may be nil.
	Reporter Reporter
	Log      logr.Logger
}

// Report is the outcome of one cycle.
type Report struct {
	Decision  Decision
	Instances []InstanceView
	// Persisted is the state to store.
	Persisted Persisted
	// Promotion is set when this cycle changed the primary.
	Promotion *Promotion
	// Err is the error of the plan, if a step failed.
	Err error
	// Roles is the role each instance is published with after this cycle (see Roles).
	Roles map[string]Role
	// Withheld says, by instance, why a replica is not published (see ReplicaWithheld).
	Withheld map[string]string
	// CredentialsGeneration is the current credentials generation (Credentials.Generation).
	CredentialsGeneration string
	// External names the external source the cluster follows ("host:port"; "" when none).
	External string
	// FallbackSeen is what the server a cluster was cut over from reports of its replication
	// from the cluster (nil when it does not follow it, or was not looked at).
	FallbackSeen *FallbackObservation
	// PrimaryLostSince is when this engine first missed the primary it still records (zero
	// while it answers).
	PrimaryLostSince time.Time
}

// Promotion records a change of primary.
type Promotion struct {
	From, To string
	// Planned is true for a switchover, false for a failover.
	Planned bool
	// Duration runs from the first missed observation of the old primary (failover) or the
	// request (switchover) to the promotion.
	Duration time.Duration
}

// Reporter publishes a cycle's outcome (status, pod role labels, events, metrics).
type Reporter interface {
	Report(ctx context.Context, r Report)
}

// Engine runs the observe → decide → act loop of one cluster.
type Engine struct {
	cfg     Config
	trigger chan struct{}

	mu        sync.Mutex
	conns     map[string]cachedConn    // operator connections by address
	accounts  map[string]time.Time     // when this engine ensured the accounts, by address
	applied   map[string]bool          // instances whose run-time variables this engine set, by address
	uptimes   map[string]time.Duration // each server's uptime at its last observation, by address
	tlsChecks map[string]time.Time     // when to compare each instance's served certificate next (tls.go)
	receivers map[string]receiverSeen  // each replica's receiver progress and since when, by address
	state     Persisted
	misses    int
	lostSince time.Time
	lastMiss  time.Time
	// lastMissRefused is true when the primary's last missed probe was a refused connection.
	lastMissRefused bool
	switchover      *SwitchoverRequest
	switchAt        time.Time
	// acceptLoss is the lost primary whose waiting failover may promote less than was
	// received (AcceptFailoverLoss); cleared when that failover ends.
	acceptLoss string
	// seen is what each instance held at its last observation answering (ClusterView.Seen),
	// unseen the instances the last status showed answering that this engine has not
	// observed yet (ClusterView.Unseen).
	seen   map[string]dbsql.GTIDSet
	unseen map[string]bool
	// started is when this engine was made; primarySeenAt when it last saw the recorded
	// primary answering (ClusterView.PrimarySeenAt).
	started, primarySeenAt time.Time
	// formers are the primaries promotions replaced whose disconnects are not all done
	// (former_primary.go), oldest first.
	formers []formerPrimary
	// loginsChecked are the instances whose init_connect this engine checked for a refusal an
	// earlier engine left (restoreRefusedLogins), by address.
	loginsChecked map[string]bool
	// startupChecked are the servers, by address, whose start-up refusal this engine ended
	// or found absent since their last start (liftExpiredStartupRefusals).
	startupChecked map[string]bool
	// fallbackConn is the pool to the server of the way back (fallback.go), nil until used.
	fallbackConn *sql.DB
}

// New returns an engine that starts from a persisted state.
func New(cfg Config, from Persisted) *Engine {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.ObserveTimeout <= 0 {
		cfg.ObserveTimeout = max(cfg.Interval/2, 250*time.Millisecond)
	}
	if cfg.WaitTimeout <= 0 {
		cfg.WaitTimeout = time.Minute
	}
	from = from.clone()
	if from.Errant == nil {
		from.Errant = map[string]bool{}
	}
	if from.Instances == nil {
		from.Instances = map[string]InstanceRecord{}
	}
	vars := maps.Clone(cfg.Variables)
	for name := range from.Variables {
		if _, ok := vars[name]; !ok {
			if vars == nil {
				vars = map[string]string{}
			}
			vars[name] = "DEFAULT" // no longer configured: back to the server's default
		}
	}
	from.Variables = vars
	e := &Engine{cfg: cfg, trigger: make(chan struct{}, 1), conns: map[string]cachedConn{}, accounts: map[string]time.Time{}, applied: map[string]bool{}, uptimes: map[string]time.Duration{}, tlsChecks: map[string]time.Time{}, receivers: map[string]receiverSeen{}, loginsChecked: map[string]bool{}, startupChecked: map[string]bool{}, state: from,
		seen: map[string]dbsql.GTIDSet{}, unseen: maps.Clone(from.Answering), started: time.Now()}
	if lp := from.LastPromotion; lp != nil && lp.From != "" && time.Since(lp.At) < formerPrimaryWindow {
		f := formerPrimary{name: lp.From, since: lp.At}
		if time.Since(lp.At) >= formerPrimaryRefusal {
			// Past the refusal: no new one; the disconnect that ends it runs at once.
			f.done = 1
		}
		e.formers = []formerPrimary{f}
	}
	e.state.LastPromotion = nil // read at start only
	if from.Switchover != nil {
		// Resumed: the request's time is unknown, so its duration counts from now.
		e.switchover, e.switchAt = from.Switchover, time.Now()
	}
	return e
}

// Trigger asks for an observation now instead of at the next tick.
func (e *Engine) Trigger() {
	select {
	case e.trigger <- struct{}{}:
	default:
	}
}

// RequestSwitchover asks to move the primary role to `to` ("" = the most advanced replica).
// Repeating a pending request changes nothing. It reports whether this is a new request: none
// of that target was pending, and `to` is not the primary already.
func (e *Engine) RequestSwitchover(to string) bool {
	e.mu.Lock()
	fresh := false
	if e.switchover == nil || (to != "" && e.switchover.To != to) {
		e.switchover, e.switchAt = &SwitchoverRequest{To: to}, time.Now()
		e.state.Switchover = e.switchover
		fresh = to == "" || to != e.state.Primary
	}
	e.mu.Unlock()
	e.Trigger()
	return fresh
}

// RequestSwitchoverOnce is RequestSwitchover for a request identified by id (a request by
// annotation, which an operator restarted at the wrong moment delivers again): a request
// whose id was accepted already changes nothing and reports false, even when the switchover
// it asked for is long finished. An anonymous request (id "": a rollout's, a deleted primary
// pod's) leaves the recorded id alone, so that an annotation's request is still known as done.
func (e *Engine) RequestSwitchoverOnce(to, id string) bool {
	e.mu.Lock()
	seen := id != "" && id == e.state.LastSwitchoverRequest
	if !seen && id != "" {
		e.state.LastSwitchoverRequest = id
	}
	e.mu.Unlock()
	if seen {
		return false
	}
	return e.RequestSwitchover(to)
}

// AcceptFailoverLoss lets the failover from the lost primary `from`, which waits for writes no
// candidate holds (docs/design/0039), promote the best candidate anyway: those writes are
// given up (they stay in the lost primary's binary log, and it comes back errant). It applies
// to the failover in progress from `from` only and reports whether one is (otherwise it
// changes nothing).
func (e *Engine) AcceptFailoverLoss(from string) bool {
	e.mu.Lock()
	waiting := e.state.Failover != nil && e.state.Failover.From == from
	if waiting {
		e.acceptLoss = from
	}
	e.mu.Unlock()
	if waiting {
		e.Trigger()
	}
	return waiting
}

// PendingSwitchover is the switchover requested and not finished, as it is now (nil when
// none): what status must record at the moment it is written.
func (e *Engine) PendingSwitchover() *SwitchoverRequest {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.switchover == nil {
		return nil
	}
	sw := *e.switchover
	return &sw
}

// State returns the engine's current state, as it would be persisted.
func (e *Engine) State() Persisted {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.state.clone()
	for _, f := range e.formers {
		// An engine that replaces this one in the process goes on disconnecting (the status
		// records one promotion: the last unfinished).
		if f.done < len(formerPrimaryDisconnects) {
			p.LastPromotion = &PromotionSeen{From: f.name, At: f.since}
		}
	}
	return p
}

// Primary returns the current primary.
func (e *Engine) Primary() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.state.Primary
}

// Run cycles until ctx ends, then closes every connection.
func (e *Engine) Run(ctx context.Context) error {
	defer e.Close()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-e.trigger:
		}
		started := time.Now()
		d, err := e.Cycle(ctx)
		if err != nil && ctx.Err() == nil {
			e.cfg.Log.Error(err, "topology cycle failed", "state", d.State)
		}
		// Cycles start an Interval apart, however long the last one took (a probe of a hung
		// primary takes its whole deadline); a primary that missed a probe is probed again
		// after half of it, so detection takes about Interval/2 × (attempts-1) after the
		// first miss (docs/design/0035).
		next := e.cfg.Interval
		e.mu.Lock()
		if e.misses > 0 {
			next = probeSpacing(e.cfg.Interval, e.lastMissRefused)
		}
		e.mu.Unlock()
		if err == nil && len(d.Plan) > 0 && (d.State == StateFailover || d.State == StateSwitchover || d.State == StateBootstrap) {
			next = 0 // a multi-step change continues at once
		} else if e.cfg.Dormant != nil && e.cfg.Dormant() {
			// Nothing runs: wait for a trigger (a pod got an address). The pools of
			// instances that have no address serve nothing until then; each holds a
			// goroutine, so a cluster that waits for its pods keeps none (docs/design/0037).
			timer.Stop()
			e.Close()
			continue
		}
		timer.Reset(max(0, next-time.Since(started)))
	}
}

// Cycle runs one observation, decision and plan.
func (e *Engine) Cycle(ctx context.Context) (Decision, error) {
	started := time.Now()
	members := e.cfg.Members()
	views := e.observe(ctx, members)
	observed := time.Now()
	e.noteReceivers(views, observed)
	e.mu.Lock()
	recorded := e.state.Primary
	e.mu.Unlock()
	e.confirmAhead(ctx, members, views, recorded)
	fallbackSeen := e.observeFallback(ctx)

	e.mu.Lock()
	for _, in := range views {
		if in.Reachable() && in.Status != nil {
			e.seen[in.Name] = received(in)
			delete(e.unseen, in.Name)
			if in.Name == e.state.Primary {
				e.primarySeenAt = observed
			}
		}
	}
	view := ClusterView{
		Instances: views, Primary: e.state.Primary, Errant: maps.Clone(e.state.Errant), Replaced: maps.Clone(e.state.Replaced),
		Failover: e.state.Failover, Tail: e.state.Tail, AckedAlone: e.state.AckedAlone, Now: observed,
		Seen: maps.Clone(e.seen), Unseen: maps.Clone(e.unseen), PrimarySeenAt: e.primarySeenAt, Started: e.started,
		Switchover: e.switchover, Settings: e.cfg.Settings, AcceptLossFrom: e.acceptLoss,
		CredentialsGeneration: e.cfg.Credentials.Generation, TLSCAFile: e.cfg.TLSCAFile,
		TLSRequired: e.cfg.TLSRequired, External: e.cfg.External,
	}
	if e.state.Cutover != nil {
		view.External = nil // cut over: the cluster is its own source of writes
	}
	if v := e.state.Verification; v != nil {
		view.Verified = v.ID
	}
	if f := e.state.CutoverFailed; f != nil {
		view.CutoverFailed = f.ID
	}
	e.fallbackView(&view, fallbackSeen)
	if e.switchover != nil {
		view.SwitchoverWaited = time.Since(e.switchAt)
	}
	for i := range view.Instances {
		view.Instances[i].ReplicationGeneration = e.state.Instances[view.Instances[i].Name].Replication
	}
	if view.Primary != "" {
		p, ok := view.instance(view.Primary)
		refused := ok && refusedConnection(p.Err)
		if ok && p.Reachable() {
			e.misses, e.lostSince = 0, time.Time{}
		} else if now := time.Now(); e.misses == 0 || now.Sub(e.lastMiss) >= probeSpacing(e.cfg.Interval, refused)*9/10 {
			// Misses count at most once per spacing, however often cycles are triggered, so
			// detection is not sped up by pod events.
			if e.misses == 0 {
				e.lostSince = now
			}
			e.misses++
			e.lastMiss, e.lastMissRefused = now, refused
		}
	}
	view.PrimaryMisses = e.misses
	lostSince, switchAt := e.lostSince, e.switchAt
	e.mu.Unlock()

	d := Decide(view)
	if len(d.Plan) > 0 {
		e.cfg.Log.Info("topology plan", "state", d.State, "message", d.Message, "plan", fmt.Sprint(d.Plan))
	}
	err := e.act(ctx, members, d)
	acted := time.Now()
	e.mu.Lock()
	primaryNow := e.state.Primary
	if err == nil {
		primaryNow = d.Primary
		if d.PromotedFrom != "" && d.Primary != d.PromotedFrom {
			// Before the disconnects below: the former primary's first is due in this very
			// cycle, before the report moves the Services (former_primary.go).
			e.noteFormerPrimary(d.PromotedFrom, acted)
		}
	}
	e.mu.Unlock()
	e.reloadCertificates(ctx, members, views)
	e.disconnectFormerPrimaryClients(ctx, members, views, primaryNow)
	e.restoreRefusedLogins(ctx, members, views)
	e.liftExpiredStartupRefusals(ctx, members, views)

	e.mu.Lock()
	rep := Report{Decision: d, Instances: views, Err: err, Roles: Roles(view, d, err), Withheld: Withheld(view, d, err), CredentialsGeneration: e.cfg.Credentials.Generation,
		PrimaryLostSince: lostSince}
	if x := e.cfg.External; x != nil && e.state.Cutover == nil {
		rep.External = x.String()
	}
	rep.FallbackSeen = view.FallbackSeen
	if d.CutOver != nil && e.state.Cutover == nil {
		e.state.Cutover = d.CutOver
	}
	if d.FellBack != nil && e.state.FellBack == nil {
		e.state.FellBack = d.FellBack
	}
	e.state.Errant = d.Errant
	if err == nil {
		if d.PromotedFrom != "" && d.Primary != d.PromotedFrom {
			planned := view.Switchover != nil
			start := lostSince
			if planned {
				start = switchAt
			}
			rep.Promotion = &Promotion{From: d.PromotedFrom, To: d.Primary, Planned: planned, Duration: time.Since(start)}
			e.misses, e.lostSince = 0, time.Time{}
		}
		e.state.Primary, e.state.Failover, e.state.Tail, e.state.Replaced = d.Primary, d.Failover, d.Tail, d.Replaced
		if e.switchover == view.Switchover {
			// Only carry the decision's switchover progress forward when no new request
			// arrived during this cycle.
			e.switchover = d.Switchover
		}
	} else if d.FailoverOnStepError != nil {
		e.state.Failover = d.FailoverOnStepError
	}
	// What was seen acknowledged alone is kept even when a step failed; a record dropped
	// because another instance became the primary is dropped only once that promotion
	// succeeded. One dropped because a replica holds it (or the cluster has one instance)
	// goes whatever the plan did: a replica whose step keeps failing must not pin it.
	if err == nil || d.AckedAlone != nil || d.Primary == view.Primary {
		e.state.AckedAlone = d.AckedAlone
	}
	if err != nil {
		// A failover whose plan failed after its promotion is adopted at the next cycle,
		// which does not know which primary it replaced: remember it now (a spurious entry
		// only asks for consent before a re-clone of that instance).
		for n, yes := range d.Replaced {
			if yes && !e.state.Replaced[n] {
				if e.state.Replaced == nil {
					e.state.Replaced = map[string]bool{}
				}
				e.state.Replaced[n] = true
			}
		}
	}
	if f := e.state.Failover; f == nil || f.From != e.acceptLoss {
		e.acceptLoss = "" // the failover it was given for is over
	}
	e.state.Switchover = e.switchover
	rep.Persisted = e.state.clone()
	e.mu.Unlock()

	if e.cfg.Reporter != nil {
		// Report even when the engine is being stopped: what this cycle did must be recorded.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		e.cfg.Reporter.Report(rctx, rep)
		cancel()
	}
	if view.PrimaryMisses > 0 || len(d.Plan) > 0 {
		// Where a failover's time goes, step by step (docs/design/0035).
		// Promotions, and cycles slower than a step may be, at the default level.
		log := e.cfg.Log.V(1)
		if d.PromotedFrom != "" || time.Since(started) >= slowStep {
			log = e.cfg.Log.V(0)
		}
		log.Info("topology cycle", "state", d.State, "primaryMisses", view.PrimaryMisses,
			"observeMs", observed.Sub(started).Milliseconds(), "actMs", acted.Sub(observed).Milliseconds(),
			"reportMs", time.Since(acted).Milliseconds(), "plan", len(d.Plan))
	}
	return d, err
}
