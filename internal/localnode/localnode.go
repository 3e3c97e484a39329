// Package localnode is a Kubernetes node that runs pods as host processes on
// this Linux machine, for `dolphin local` and end-to-end tests without Docker.
//
// It registers a Node (with a Lease heartbeat) and runs the pods bound to it
// through virtual-kubelet's node and pod controllers; this package is the
// virtual-kubelet "provider". Each pod gets its own network namespace joined to
// a host bridge by a veth pair and an address from Options.PodCIDR, reachable
// from the host. Each container is a host process started in the pod's network
// namespace and in its own mount namespace, where the pod's volumes are
// bind-mounted at the container's mount paths. There are no images: a small
// table (see resolveBinary) maps images to host binaries, and a container must
// give its command.
//
// The package also runs a small provisioner that gives every pending
// PersistentVolumeClaim without a storage class (or of class "dolphin-local",
// the default class it creates, which allows volume expansion) a host folder
// under Options.Dir, so data survives pod restarts, and that reports a grown
// claim's new capacity.
//
// Starting containers re-executes the current binary (see shim.go): any
// program that calls Run must link this package, which it does by calling Run.
// Everything needs root. See docs/design/0008-local-node.md.
package localnode

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Options configure Run. NodeName, Dir and PodCIDR are required, and one of
// Kubeconfig or RESTConfig.
type Options struct {
	// Kubeconfig is the path of a kubeconfig with rights to manage nodes,
	// leases, pods, PVs and PVCs, and to read configMaps and secrets.
	Kubeconfig string
	// RESTConfig is used instead of Kubeconfig when set (tests).
	RESTConfig *rest.Config
	// NodeName is the Node's name (and its kubernetes.io/hostname label).
	NodeName string
	// Dir holds the node's state: Dir/pods/<ns>_<name>/ (container logs,
	// emptyDir, configMap, secret and downwardAPI volumes) and
	// Dir/volumes/<pvc-uid>/ (persistent volumes).
	Dir string
	// PodCIDR is the pod address range, e.g. "10.244.0.0/24". Its first address
	// goes to the bridge (the pods' gateway); pods get the others.
	PodCIDR string
	// Bridge is the host bridge's name (default "dolphin0"). Network namespaces
	// and veth pairs are named after it, so two nodes on one host need two
	// bridges and two CIDRs.
	Bridge string
	// DolphinBinary is the host binary that runs containers whose image names
	// Dolphin itself (default: the running executable).
	DolphinBinary string
	// Capacity reported for the node (defaults: 64 CPUs, 64Gi memory, 110 pods).
	CPU, Memory string
	Pods        int
	// Log receives the node's messages (default: discard).
	Log logr.Logger
	// LocalVolumes makes the provisioner create local PVs (for a real kubelet, which applies
	// a pod's fsGroup to them) instead of hostPath ones (RunProvisioner).
	LocalVolumes bool
}

// Run registers the node and runs the pods bound to it until ctx is done. On
// the way out it stops every container it started (each pod's grace period,
// SIGTERM then SIGKILL), removes the pods' network namespaces and the bridge,
// and returns. The pods' API objects stay: a node that comes back starts them
// again.
func Run(ctx context.Context, opts Options) error {
	if err := opts.defaults(); err != nil {
		return err
	}
	cfg := opts.RESTConfig
	if cfg == nil {
		var err error
		if cfg, err = clientcmd.BuildConfigFromFlags("", opts.Kubeconfig); err != nil {
			return fmt.Errorf("localnode: loading kubeconfig %s: %w", opts.Kubeconfig, err)
		}
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("localnode: building client: %w", err)
	}
	for _, d := range []string{podsDir(opts.Dir), volumesDir(opts.Dir)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("localnode: %w", err)
		}
	}

	netw, err := newNetwork(opts.Bridge, opts.PodCIDR)
	if err != nil {
		return err
	}
	if err := netw.setUp(ctx); err != nil {
		return errors.Join(err, netw.tearDown(context.WithoutCancel(ctx)))
	}
	p := newProvider(opts, client, netw)
	defer func() {
		// Run's context is done: stop with a fresh one.
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		defer cancel()
		p.shutdown(stopCtx)
		if err := netw.tearDown(stopCtx); err != nil {
			opts.Log.Error(err, "removing the pod network")
		}
		p.mounts.removeCreated()
	}()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 3)
	go func() { errc <- runProvisioner(ctx, client, opts) }()
	go func() { errc <- runControllers(ctx, client, p, opts) }()
	go func() { errc <- p.resyncStatuses(ctx) }()
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
}

func (o *Options) defaults() error {
	if o.NodeName == "" || o.Dir == "" || o.PodCIDR == "" {
		return errors.New("localnode: NodeName, Dir and PodCIDR are required")
	}
	if o.Kubeconfig == "" && o.RESTConfig == nil {
		return errors.New("localnode: Kubeconfig is required")
	}
	if _, err := netip.ParsePrefix(o.PodCIDR); err != nil {
		return fmt.Errorf("localnode: PodCIDR: %w", err)
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return fmt.Errorf("localnode: Dir: %w", err)
	}
	o.Dir = dir
	if o.Bridge == "" {
		o.Bridge = "dolphin0"
	}
	if len(o.Bridge) > 10 {
		// veth names are the bridge name plus 5 characters, at most 15.
		return fmt.Errorf("localnode: Bridge %q: at most 10 characters", o.Bridge)
	}
	if o.DolphinBinary == "" {
		if o.DolphinBinary, err = os.Executable(); err != nil {
			return fmt.Errorf("localnode: finding the dolphin binary: %w", err)
		}
	}
	if o.CPU == "" {
		o.CPU = "64"
	}
	if o.Memory == "" {
		o.Memory = "64Gi"
	}
	if o.Pods == 0 {
		o.Pods = 110
	}
	if o.Log.GetSink() == nil {
		o.Log = logr.Discard()
	}
	return nil
}

func podsDir(dir string) string    { return filepath.Join(dir, "pods") }
func volumesDir(dir string) string { return filepath.Join(dir, "volumes") }
