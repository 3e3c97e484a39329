// Package localcluster runs a real Kubernetes control plane on one machine for `dolphin local`
// and end-to-end tests: etcd, kube-apiserver, kube-controller-manager and kube-scheduler, built
// from Go modules by hack/control-plane.sh, as detached host processes on 127.0.0.1 with
// certificates generated here. Everything lives in one folder:
//
//	DIR/kubeconfig          admin kubeconfig (system:masters) for users and kubectl
//	DIR/state.json          ports and processes, so a later command finds them
//	DIR/pki/                CA, serving and client certificates, service-account key
//	DIR/kubeconfigs/        one kubeconfig per component
//	DIR/etcd/               etcd data (kept by Stop; survives restarts)
//	DIR/logs/<name>.log     output of each process
//	DIR/s3/                 objects of the S3 server (EnsureS3), DIR/s3/<bucket>/<key>
//	DIR/s3-credentials.json its root credentials, generated once
//
// The processes outlive the command that starts them (their own session), so `dolphin local
// up` can return; Stop finds them again through state.json, verifying each PID's command line
// before signalling it.
package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/dolphin-operator/dolphin/internal/freeport"
)

// Component names, also the names of their log files.
const (
	Etcd              = "etcd"
	APIServer         = "kube-apiserver"
	ControllerManager = "kube-controller-manager"
	Scheduler         = "kube-scheduler"
)

// controlPlaneComponents in start order.
var controlPlaneComponents = []string{Etcd, APIServer, ControllerManager, Scheduler}

// Defaults of Options.
const (
	DefaultReadyTimeout = 60 * time.Second
	DefaultStopTimeout  = 15 * time.Second
)

// Options configures Start.
type Options struct {
	// Dir is the cluster's folder (created when missing).
	Dir string
	// BinDir holds etcd, kube-apiserver, kube-controller-manager and kube-scheduler (see
	// FindBinDir).
	BinDir string
	// Ports to use; zero fields reuse the ports in state.json when free, else free ones.
	Ports Ports
	// AdvertiseAddress, when set, is a non-loopback address of this host that pods reach
	// (the real node's address): kube-apiserver then listens on every address instead of
	// 127.0.0.1 only, advertises this one as the endpoint of the `kubernetes` Service, and
	// its certificate names it. A control plane running with another value is restarted.
	AdvertiseAddress string
	// ServiceCIDR is the Service range (default ServiceClusterIPRange); the certificate names
	// its first address (the `kubernetes` Service). A real node uses a range of its own, so that
	// kube-proxy's rules never take the addresses a host-process node's proxy serves.
	ServiceCIDR string
	// ReadyTimeout bounds the wait for each component to become ready (default 60 s).
	ReadyTimeout time.Duration
	// StopTimeout is how long each process may take to exit after SIGTERM before SIGKILL
	// (default 15 s).
	StopTimeout time.Duration
	// Progress, when set, is called as each component becomes ready, with the time it took.
	Progress func(component string, took time.Duration)
	// StartNode, when set, is called once the control plane is ready, with the admin
	// kubeconfig and the PKI (to issue the node's own client certificate). It is the hook for
	// the local node that runs pods as host processes (built separately). The returned stop
	// function is called first by Stop of this ControlPlane value; a node started in-process
	// lives only as long as this process, so use it from tests and long-running commands.
	// ctx only bounds the start: a node running in a goroutine (localnode.Run) needs its own
	// context (e.g. context.WithoutCancel(ctx) plus a cancel that stop calls).
	StartNode func(ctx context.Context, kubeconfig string, pki *PKI) (stop func() error, err error)
}

// ControlPlane is a running (or recorded) local control plane.
type ControlPlane struct {
	// Dir is the cluster's folder (absolute).
	Dir string
	// Kubeconfig is the path of the admin kubeconfig (DIR/kubeconfig).
	Kubeconfig string
	// PKI holds the cluster's certificates.
	PKI *PKI
	// Reused is true when Start found the control plane already running and healthy.
	Reused bool
	// OnStopped, when set, is called by Stop after each running process has exited.
	OnStopped func(name string, took time.Duration)

	stopTimeout time.Duration
	nodeStop    func() error

	mu    sync.Mutex
	state *state
}

// Ports returns the ports the control plane listens on.
func (cp *ControlPlane) Ports() Ports { return cp.state.Ports }

// APIServerURL is the address of kube-apiserver.
func (cp *ControlPlane) APIServerURL() string {
	return fmt.Sprintf("https://127.0.0.1:%d", cp.state.Ports.APIServer)
}

// Processes returns the recorded processes in start order.
func (cp *ControlPlane) Processes() []*Process {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return append([]*Process(nil), cp.state.Processes...)
}

// Process returns the recorded process called name, or nil.
func (cp *ControlPlane) Process(name string) *Process {
	for _, p := range cp.Processes() {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Open returns the control plane recorded in dir (for `status` and `down`), without starting
// or checking anything. It fails when dir holds no state.json.
func Open(dir string) (*ControlPlane, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", dir, err)
	}
	st, err := loadState(dir)
	if err != nil {
		return nil, fmt.Errorf("no local cluster in %s: %w", dir, err)
	}
	return &ControlPlane{
		Dir: dir, Kubeconfig: filepath.Join(dir, "kubeconfig"), PKI: &PKI{Dir: filepath.Join(dir, "pki")},
		stopTimeout: DefaultStopTimeout, state: st,
	}, nil
}

// Start brings the control plane in opts.Dir up and returns once every component is ready.
// When state.json shows it already running and healthy, Start reuses it (Reused is true);
// when it shows processes that died, the survivors are stopped and everything starts again
// on the same etcd data and certificates. On failure Start stops whatever it started.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = DefaultReadyTimeout
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = DefaultStopTimeout
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", opts.Dir, err)
	}
	binDir, err := checkBinDir(opts.BinDir)
	if err != nil {
		return nil, err
	}
	for _, sub := range []string{"logs", "kubeconfigs", "etcd"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, fmt.Errorf("creating %s: %w", dir, err)
		}
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()

	st, err := loadState(dir)
	if err != nil && !isNotExist(err) {
		return nil, err
	}
	cp := &ControlPlane{Dir: dir, Kubeconfig: filepath.Join(dir, "kubeconfig"), stopTimeout: opts.StopTimeout, state: st}
	if cp.PKI, err = EnsurePKI(filepath.Join(dir, "pki")); err != nil {
		return nil, err
	}
	var serving []net.IP
	if opts.AdvertiseAddress != "" {
		ip := net.ParseIP(opts.AdvertiseAddress)
		if ip == nil || ip.IsLoopback() || ip.IsUnspecified() {
			return nil, fmt.Errorf("advertise address %q is not a non-loopback IP address", opts.AdvertiseAddress)
		}
		serving = append(serving, ip)
	}
	if opts.ServiceCIDR != "" {
		p, err := netip.ParsePrefix(opts.ServiceCIDR)
		if err != nil || !p.Addr().Is4() || p.Bits() < 12 || p.Bits() > 28 {
			return nil, fmt.Errorf("service range %q: want an IPv4 range from /12 to /28", opts.ServiceCIDR)
		}
		serving = append(serving, net.IP(p.Masked().Addr().Next().AsSlice()))
	}
	if len(serving) > 0 {
		if err := cp.PKI.EnsureServingIPs(serving...); err != nil {
			return nil, err
		}
	}

	if st.BinDir == binDir && st.AdvertiseAddress == opts.AdvertiseAddress && st.ServiceCIDR == opts.ServiceCIDR &&
		(cp.healthy(ctx) || cp.restartDead(ctx, opts) == nil) {
		cp.Reused = true
		// Rewrite the kubeconfigs in case a user deleted or edited them.
		if err := cp.writeKubeconfigs(); err != nil {
			return nil, err
		}
	} else {
		if err := cp.fresh(ctx, opts, binDir); err != nil {
			return nil, err
		}
	}
	if opts.StartNode != nil {
		stop, err := opts.StartNode(ctx, cp.Kubeconfig, cp.PKI)
		if err != nil {
			err = fmt.Errorf("starting the local node: %w", err)
			if !cp.Reused { // leave a control plane that someone else started running
				err = errors.Join(err, cp.stopLocked())
			}
			return nil, err
		}
		cp.nodeStop = stop
	}
	return cp, nil
}

// healthy reports whether every control-plane component recorded in state.json runs and
// answers its probe.
func (cp *ControlPlane) healthy(ctx context.Context) bool {
	for _, name := range controlPlaneComponents {
		p := cp.Process(name)
		if !p.Alive() || p.Probe.Check(ctx, cp.PKI) != nil {
			return false
		}
	}
	return true
}

// restartDead starts again, on their recorded ports, data and certificates, the control-plane
// components that died, and leaves every other process running — the local node and its
// Service proxy above all: a Kubernetes API server that restarts does not take kube-proxy's
// rules or the kubelet's pods with it, and clients of the Services must not notice either.
// It gives up (the caller then starts everything afresh) when no component runs any more, when
// one runs but does not answer, or when a restart fails.
func (cp *ControlPlane) restartDead(ctx context.Context, opts Options) error {
	alive := 0
	for _, name := range controlPlaneComponents {
		if cp.Process(name).Alive() {
			alive++
		}
	}
	if alive == 0 {
		return errors.New("no component runs: start afresh")
	}
	for _, name := range controlPlaneComponents {
		p := cp.Process(name)
		if p == nil {
			return fmt.Errorf("%s was never recorded", name)
		}
		if p.Alive() {
			if err := p.Probe.Check(ctx, cp.PKI); err != nil {
				return fmt.Errorf("%s runs but does not answer: %w", name, err)
			}
			continue
		}
		at := slices.Index(cp.state.Processes, p)
		cp.state.Processes = slices.Delete(cp.state.Processes, at, at+1)
		if err := cp.startGroup(ctx, opts, []string{name}); err != nil {
			return fmt.Errorf("restarting %s: %w", name, err)
		}
		// Back to its place in the start order, so that Stop still stops it after what
		// depends on it.
		cp.mu.Lock()
		last := len(cp.state.Processes) - 1
		restarted := cp.state.Processes[last]
		cp.state.Processes = slices.Insert(cp.state.Processes[:last], at, restarted)
		cp.mu.Unlock()
		if err := cp.state.save(cp.Dir); err != nil {
			return err
		}
	}
	return nil
}

// pickPorts chooses new ports (FreePorts; a test replaces it to hand out a taken one).
var pickPorts = FreePorts

// errNotStopped marks a failed start whose processes could not all be stopped.
var errNotStopped = errors.New("stopping what was started")

// portAttempts is how many times fresh chooses ports when a component finds one taken.
const portAttempts = 3

// fresh stops whatever state.json still shows running, then starts every component. A
// component that fails because another process took one of its ports in the meantime
// ("address already in use") is not the user's problem: everything started is stopped and
// started again on newly chosen ports (the explicit ones in opts.Ports are kept), up to
// portAttempts times.
func (cp *ControlPlane) fresh(ctx context.Context, opts Options, binDir string) error {
	if err := cp.stopProcesses(); err != nil {
		return fmt.Errorf("stopping the previous processes: %w", err)
	}
	cp.state.BinDir = binDir
	cp.state.AdvertiseAddress = opts.AdvertiseAddress
	cp.state.ServiceCIDR = opts.ServiceCIDR
	for attempt := 1; ; attempt++ {
		err := cp.startAll(ctx, opts)
		if err == nil || !freeport.InUse(err) || attempt == portAttempts || errors.Is(err, errNotStopped) {
			return err
		}
		cp.state.Ports = Ports{} // choose them all again
	}
}

// startAll chooses the ports and starts every component in order; on failure it stops what
// it started.
func (cp *ControlPlane) startAll(ctx context.Context, opts Options) error {
	cp.state.Processes = nil
	if err := cp.choosePorts(opts.Ports); err != nil {
		return err
	}
	if err := cp.writeKubeconfigs(); err != nil {
		return err
	}
	if err := cp.state.save(cp.Dir); err != nil {
		return err
	}
	for _, group := range [][]string{{Etcd}, {APIServer}, {ControllerManager, Scheduler}} {
		if err := cp.startGroup(ctx, opts, group); err != nil {
			if serr := cp.stopLocked(); serr != nil {
				// A process that would not stop stays recorded, for `down`: no retry.
				return errors.Join(err, fmt.Errorf("%w: %w", errNotStopped, serr))
			}
			return err
		}
	}
	return nil
}

// startGroup starts the named components together and waits until all are ready.
func (cp *ControlPlane) startGroup(ctx context.Context, opts Options, names []string) error {
	started := time.Now()
	procs := make([]*Process, 0, len(names))
	for _, name := range names {
		spec := cp.spec(name)
		p, err := startProcess(name, spec.Args, nil, cp.logPath(name), cp.Dir, ControlPlaneNice)
		if err != nil {
			return err
		}
		p.Probe = spec.Probe
		procs = append(procs, p)
		cp.mu.Lock()
		cp.state.Processes = append(cp.state.Processes, p)
		cp.mu.Unlock()
		if err := cp.state.save(cp.Dir); err != nil {
			return err
		}
	}
	errs := make([]error, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Go(func() {
			errs[i] = waitReady(ctx, p, cp.PKI, opts.ReadyTimeout)
			if errs[i] == nil && opts.Progress != nil {
				opts.Progress(p.Name, time.Since(started))
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (cp *ControlPlane) logPath(name string) string {
	return filepath.Join(cp.Dir, "logs", name+".log")
}

// choosePorts fills the ports: explicit ones first, then the recorded ones still free, then
// new free ones.
func (cp *ControlPlane) choosePorts(want Ports) error {
	old := cp.state.Ports
	var chosen Ports
	ws, os_, cs := want.list(), old.list(), chosen.list()
	used := map[int]bool{}
	missing := 0
	for i := range cs {
		switch {
		case *ws[i] != 0:
			*cs[i] = *ws[i]
		case *os_[i] != 0 && !used[*os_[i]] && PortFree(*os_[i]):
			*cs[i] = *os_[i]
		default:
			missing++
			continue
		}
		used[*cs[i]] = true
	}
	free, err := pickPorts(missing + len(cs))
	if err != nil {
		return err
	}
	for i := range cs {
		for *cs[i] == 0 {
			if p := free[0]; !used[p] {
				*cs[i] = p
				used[p] = true
			}
			free = free[1:]
		}
	}
	cp.state.Ports = chosen
	return nil
}

// writeKubeconfigs writes the admin kubeconfig and one per component.
func (cp *ControlPlane) writeKubeconfigs() error {
	server := cp.APIServerURL()
	if err := WriteKubeconfig(cp.Kubeconfig, server, cp.PKI, "admin"); err != nil {
		return err
	}
	for _, name := range []string{ControllerManager, Scheduler} {
		if err := WriteKubeconfig(cp.componentKubeconfig(name), server, cp.PKI, name); err != nil {
			return err
		}
	}
	return nil
}

func (cp *ControlPlane) componentKubeconfig(name string) string {
	return filepath.Join(cp.Dir, "kubeconfigs", name+".kubeconfig")
}

// Stop stops the local node (when started by this value's StartNode), then every recorded
// process in reverse start order (the operator, the scheduler, the controller manager, the
// API server, etcd last: an API server that loses etcd while shutting down hangs), waiting for
// each to exit. etcd data, certificates and state.json (with its ports) are kept.
func (cp *ControlPlane) Stop() error {
	unlock, err := lockDir(cp.Dir)
	if err != nil {
		return err
	}
	defer unlock()
	return cp.stopLocked()
}

// stopLocked is Stop with the folder lock held.
func (cp *ControlPlane) stopLocked() error {
	var errs []error
	if cp.nodeStop != nil {
		if err := cp.nodeStop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping the local node: %w", err))
		}
		cp.nodeStop = nil
	}
	errs = append(errs, cp.stopProcesses())
	return errors.Join(errs...)
}

// stopProcesses stops every recorded process in reverse order and records that they stopped.
func (cp *ControlPlane) stopProcesses() error {
	var errs []error
	procs := cp.Processes()
	for i := len(procs) - 1; i >= 0; i-- {
		p := procs[i]
		wasAlive, began := p.Alive(), time.Now()
		if err := p.Stop(cp.stopTimeout); err != nil {
			errs = append(errs, err)
		} else if wasAlive && cp.OnStopped != nil {
			cp.OnStopped(p.Name, time.Since(began))
		}
	}
	if len(procs) > 0 {
		errs = append(errs, cp.state.save(cp.Dir))
	}
	return errors.Join(errs...)
}
