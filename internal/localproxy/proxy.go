// Package localproxy makes Dolphin's Services reachable from the host of `dolphin local`: for
// every port of every Service that Dolphin manages it listens on a local TCP port and forwards
// each connection to a ready endpoint, following the Service's EndpointSlices. When an
// endpoint stops being ready (a failover moved the primary label), the connections to it are
// closed, so clients reconnect — through the same local port — to the new primary.
package localproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ManagedSelector selects the Services the proxy serves.
var ManagedSelector = client.MatchingLabels{"app.kubernetes.io/managed-by": "dolphin"}

// Route is one forwarded Service port.
type Route struct {
	Service types.NamespacedName `json:"service"`
	Port    int32                `json:"port"`
	// Listen is the local address clients connect to, e.g. 127.0.0.1:13306.
	Listen string `json:"listen"`
}

// Proxy forwards local ports to Service endpoints.
type Proxy struct {
	// Client reads Services and EndpointSlices (a cached client is fine).
	Client client.Reader
	// Host is the local address to listen on (default 127.0.0.1).
	Host string
	// DialTimeout bounds connecting to an endpoint (default DefaultDialTimeout).
	DialTimeout time.Duration
	// ClusterIPDevice, when set, makes Services reachable at their ClusterIPs too, as
	// kube-proxy does: each ClusterIP is added (/32) to this network device (the pods'
	// bridge, so pods reach it through their gateway) and its ports are forwarded like the
	// local ones.
	ClusterIPDevice string
	Log             logr.Logger

	mu        sync.Mutex
	listeners map[routeKey]*listener
	// clusterIPs are the listeners on ClusterIP:port, when ClusterIPDevice is set.
	clusterIPs map[routeKey]*listener
}

type routeKey struct {
	svc  types.NamespacedName
	port int32
}

type listener struct {
	route  Route
	ln     net.Listener
	dialer net.Dialer
	closed atomic.Bool

	mu       sync.Mutex
	backends []string // ready endpoint addresses (ip:port)
	// conns are the client connections from the moment they are accepted, with the backend
	// each was given; cancel ends a dial still under way.
	conns map[net.Conn]*forwarded
	next  atomic.Uint64
	// dialing bounds the backend dials under way (maxDialsInFlight).
	dialing slots
}

// slots is a counting semaphore that never waits.
type slots chan struct{}

// TryAcquire takes a slot if one is free.
func (s slots) TryAcquire() bool {
	select {
	case s <- struct{}{}:
		return true
	default:
		return false
	}
}

// Release frees a slot taken by TryAcquire.
func (s slots) Release() { <-s }

// maxDialsInFlight bounds the backend dials one listener has under way. A client retrying
// every millisecond against a backend whose accept queue is full (a server busy refusing
// connections) would otherwise hold two descriptors per attempt for the whole dial timeout.
const maxDialsInFlight = 128

// forwarded is one client connection and where it goes.
type forwarded struct {
	backend string
	cancel  context.CancelFunc
}

// DefaultDialTimeout bounds connecting to an endpoint: a backend that does not answer (a
// partitioned or vanished pod) must not hold the client's connection, and its descriptors,
// for the kernel's two-minute connect timeout.
const DefaultDialTimeout = 2 * time.Second

// keepAlive probes idle forwarded connections, so that a peer that vanished is noticed.
const keepAlive = 15 * time.Second

// Sync makes the listeners match the managed Services and their ready endpoints. Call it
// whenever a Service or EndpointSlice changes; it is idempotent. ports chooses the local port
// of a new route (0 = any free port).
func (p *Proxy) Sync(ctx context.Context, ports func(svc types.NamespacedName, port int32) int) error {
	var svcs corev1.ServiceList
	if err := p.Client.List(ctx, &svcs, ManagedSelector); err != nil {
		return fmt.Errorf("listing Services: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.listeners == nil {
		p.listeners = map[routeKey]*listener{}
	}
	seen := map[routeKey]bool{}
	var clusterIPErrs []error
	for i := range svcs.Items {
		svc := &svcs.Items[i]
		if svc.Spec.ClusterIP == corev1.ClusterIPNone {
			continue // headless: clients use the instances directly
		}
		key := client.ObjectKeyFromObject(svc)
		for _, sp := range svc.Spec.Ports {
			rk := routeKey{key, sp.Port}
			seen[rk] = true
			l, ok := p.listeners[rk]
			if !ok {
				var err error
				if l, err = p.listen(rk, ports(key, sp.Port)); err != nil {
					return err
				}
				p.listeners[rk] = l
			}
			backends, err := p.readyBackends(ctx, key, sp)
			if err != nil {
				return err
			}
			if changed, dropped := l.setBackends(backends); changed {
				// When a Service's clients could move, to the millisecond (a failover's client
				// side: docs/design/0035).
				p.Log.Info("endpoints", "service", key.String(), "port", sp.Port, "ready", backends, "closed", dropped)
			}
			if p.ClusterIPDevice != "" && svc.Spec.ClusterIP != "" {
				// A ClusterIP that cannot be served yet (the bridge is being created) does not
				// stop the others; the error makes the caller retry.
				cl, err := p.clusterIPListener(ctx, rk, svc.Spec.ClusterIP)
				if err != nil {
					clusterIPErrs = append(clusterIPErrs, err)
				} else {
					cl.setBackends(backends)
				}
			}
		}
	}
	for rk, l := range p.listeners {
		if !seen[rk] {
			l.close()
			delete(p.listeners, rk)
		}
	}
	for rk, l := range p.clusterIPs {
		if !seen[rk] {
			l.close()
			delete(p.clusterIPs, rk)
		}
	}
	return errors.Join(clusterIPErrs...)
}

// clusterIPListener returns the listener on clusterIP:rk.port, making sure the address is on
// ClusterIPDevice (again: the device may have been recreated). The socket binds with
// IP_FREEBIND, so it does not depend on the address being there first.
func (p *Proxy) clusterIPListener(ctx context.Context, rk routeKey, clusterIP string) (*listener, error) {
	if err := addAddress(ctx, p.ClusterIPDevice, clusterIP); err != nil {
		return nil, err
	}
	if p.clusterIPs == nil {
		p.clusterIPs = map[routeKey]*listener{}
	}
	addr := net.JoinHostPort(clusterIP, strconv.Itoa(int(rk.port)))
	if l, ok := p.clusterIPs[rk]; ok && l.route.Listen == addr {
		return l, nil
	} else if ok {
		l.close() // the Service got another ClusterIP
	}
	lc := net.ListenConfig{Control: freeBind}
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening for %s at its ClusterIP %s: %w", rk.svc, addr, err)
	}
	l := newListener(Route{Service: rk.svc, Port: rk.port, Listen: ln.Addr().String()}, ln, p.DialTimeout)
	p.Log.Info("forwarding", "service", rk.svc.String(), "port", rk.port, "clusterIP", addr)
	go l.serve(p.Log)
	p.clusterIPs[rk] = l
	return l, nil
}

// Routes lists the forwarded Service ports, sorted.
func (p *Proxy) Routes() []Route {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Route, 0, len(p.listeners))
	for _, l := range p.listeners {
		out = append(out, l.route)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Listen < out[j].Listen })
	return out
}

// Close stops every listener and closes every forwarded connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for rk, l := range p.listeners {
		l.close()
		delete(p.listeners, rk)
	}
	for rk, l := range p.clusterIPs {
		l.close()
		delete(p.clusterIPs, rk)
	}
}

// readyBackends returns the ready endpoint addresses of one Service port.
func (p *Proxy) readyBackends(ctx context.Context, svc types.NamespacedName, sp corev1.ServicePort) ([]string, error) {
	var slices_ discoveryv1.EndpointSliceList
	if err := p.Client.List(ctx, &slices_, client.InNamespace(svc.Namespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil {
		return nil, fmt.Errorf("listing EndpointSlices of %s: %w", svc, err)
	}
	var out []string
	for _, s := range slices_.Items {
		port := int32(0)
		for _, ep := range s.Ports {
			if ep.Port != nil && (ep.Name == nil && sp.Name == "" || ep.Name != nil && *ep.Name == sp.Name) {
				port = *ep.Port
			}
		}
		if port == 0 {
			continue
		}
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			for _, a := range e.Addresses {
				out = append(out, net.JoinHostPort(a, strconv.Itoa(int(port))))
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

func (p *Proxy) listen(rk routeKey, port int) (*listener, error) {
	host := p.Host
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("listening for %s port %d: %w", rk.svc, rk.port, err)
	}
	l := newListener(Route{Service: rk.svc, Port: rk.port, Listen: ln.Addr().String()}, ln, p.DialTimeout)
	p.Log.Info("forwarding", "service", rk.svc.String(), "port", rk.port, "listen", l.route.Listen)
	go l.serve(p.Log)
	return l, nil
}

func newListener(r Route, ln net.Listener, dialTimeout time.Duration) *listener {
	if dialTimeout <= 0 {
		dialTimeout = DefaultDialTimeout
	}
	return &listener{route: r, ln: ln, conns: map[net.Conn]*forwarded{},
		dialer:  net.Dialer{Timeout: dialTimeout, KeepAlive: keepAlive},
		dialing: make(slots, maxDialsInFlight)}
}

// setBackends makes b the ready endpoints; it reports whether they changed and how many
// client connections it closed because their endpoint left.
func (l *listener) setBackends(b []string) (changed bool, dropped int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	changed = !slices.Equal(l.backends, b)
	l.backends = b
	// Connections to an endpoint that is no longer ready are closed, dials to it included:
	// the client reconnects and reaches a ready one (the new primary after a failover).
	for c, f := range l.conns {
		if f.backend != "" && !slices.Contains(b, f.backend) {
			f.cancel()
			_ = c.Close()
			delete(l.conns, c)
			dropped++
		}
	}
	return changed, dropped
}

// track registers an accepted client connection and picks its backend ("" when no endpoint
// is ready). It returns false when the listener is closed.
func (l *listener) track(c net.Conn, cancel context.CancelFunc) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return "", false
	}
	backend := ""
	if len(l.backends) > 0 {
		backend = l.backends[int(l.next.Add(1)-1)%len(l.backends)]
	}
	l.conns[c] = &forwarded{backend: backend, cancel: cancel}
	return backend, true
}

// untrack forgets a client connection; false when it was already dropped (its backend left).
func (l *listener) untrack(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.conns[c]
	delete(l.conns, c)
	return ok
}

// open counts the client connections the listener holds (for tests).
func (l *listener) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// serve accepts until the listener is closed. An accept error on an open listener (out of
// descriptors, a connection aborted before it was accepted) is waited out and retried: a
// listener that stopped accepting would leave every client in SYN-SENT for good.
func (l *listener) serve(log logr.Logger) {
	delay := 5 * time.Millisecond
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if l.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			log.Error(err, "accepting a connection; retrying", "listen", l.route.Listen, "in", delay)
			time.Sleep(delay)
			delay = min(2*delay, time.Second)
			continue
		}
		delay = 5 * time.Millisecond
		go l.forward(c, log)
	}
}

func (l *listener) forward(c net.Conn, log logr.Logger) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	backend, ok := l.track(c, cancel)
	defer l.untrack(c)
	if !ok || backend == "" {
		refuse(c) // no ready endpoint: refuse, like a Service without endpoints
		return
	}
	if !l.dialing.TryAcquire() {
		// More dials under way than a sane client needs: a reconnect storm against a
		// backend that answers slowly. Refusing at once keeps the proxy's descriptors
		// bounded; the client's next attempt gets a slot when the backend catches up.
		refuse(c)
		return
	}
	early := watchClient(c, cancel)
	b, err := l.dialer.DialContext(ctx, "tcp", backend)
	l.dialing.Release()
	sent, clientErr := early.stop()
	if err != nil {
		if clientErr == nil { // the client did not leave first: the backend failed
			log.V(1).Info("backend unreachable", "backend", backend, "error", err.Error())
		}
		refuse(c)
		return
	}
	if clientErr != nil { // the client left while its backend was being dialed
		_ = c.Close()
		_ = b.Close()
		return
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetKeepAlive(true)
		_ = tc.SetKeepAlivePeriod(keepAlive)
	}
	l.mu.Lock()
	_, still := l.conns[c] // dropped while dialing: its backend left
	l.mu.Unlock()
	if !still {
		_ = c.Close()
		_ = b.Close()
		return
	}
	if len(sent) > 0 { // what the client sent before the backend answered
		if _, err := b.Write(sent); err != nil {
			_ = c.Close()
			_ = b.Close()
			return
		}
	}
	// Either side ending ends both: no half-open pair keeps its descriptors.
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(b, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, b); done <- struct{}{} }()
	<-done
	_ = c.Close()
	_ = b.Close()
	<-done
}

// refuse closes a client connection the proxy cannot serve with a reset (SO_LINGER 0), as
// a port without a listener would: the client learns at once, and a client that retries
// every millisecond leaves no TIME_WAIT sockets behind on the proxy's side.
func refuse(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// clientWatch reads from a client while its backend is being dialed, so that a client that
// leaves (reconnect storms: a client giving up and retrying) ends the dial at once instead of
// sitting in CLOSE-WAIT with a descriptor until the dial times out. MySQL clients send
// nothing before the server's greeting; any byte a client does send is kept and forwarded.
type clientWatch struct {
	c    net.Conn
	done chan struct{}
	buf  [512]byte
	n    int
	err  error
}

func watchClient(c net.Conn, cancel context.CancelFunc) *clientWatch {
	w := &clientWatch{c: c, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.n, w.err = c.Read(w.buf[:])
		if w.err != nil && !isTimeout(w.err) {
			cancel() // the client is gone: stop dialing for it
		}
	}()
	return w
}

// stop ends the watch and returns what the client sent meanwhile, and the error that ended
// its connection (nil while it is still there).
func (w *clientWatch) stop() ([]byte, error) {
	_ = w.c.SetReadDeadline(time.Now()) // ends a read still waiting
	<-w.done
	_ = w.c.SetReadDeadline(time.Time{})
	if w.err != nil && isTimeout(w.err) {
		return w.buf[:w.n], nil
	}
	return w.buf[:w.n], w.err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (l *listener) close() {
	l.mu.Lock()
	l.closed.Store(true)
	l.mu.Unlock()
	_ = l.ln.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	for c, f := range l.conns {
		f.cancel()
		_ = c.Close()
		delete(l.conns, c)
	}
}
