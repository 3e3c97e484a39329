package realnode

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dolphin-operator/dolphin/internal/localcluster"
)

// Up prepares the node and makes sure each of its processes runs (kept when already running
// with the same command line), importing the image archives into containerd before the
// kubelet starts. progress, when set, is told each step and its time.
func Up(ctx context.Context, cp *localcluster.ControlPlane, o Options, archives []string, progress func(step string, took time.Duration)) (*Node, error) {
	if progress == nil {
		progress = func(string, time.Duration) {}
	}
	start := time.Now()
	n, err := Prepare(cp, o)
	if err != nil {
		return nil, err
	}
	progress("host set up", time.Since(start))
	for _, a := range n.AddOns() {
		start = time.Now()
		if _, err := cp.EnsureAddOn(ctx, a); err != nil {
			return n, fmt.Errorf("starting %s (log: %s/logs/%s.log): %w", a.Name, cp.Dir, a.Name, err)
		}
		progress(a.Name, time.Since(start))
		if a.Name == Containerd {
			start = time.Now()
			if err := n.ImportImages(ctx, archives...); err != nil {
				return n, err
			}
			progress("images imported", time.Since(start))
		}
	}
	return n, nil
}

// Down stops the node and undoes what it changed on the host: the kubelet first (it would
// start pods again), then every pod sandbox through containerd (CNI removes their network),
// then kube-proxy, CoreDNS and containerd, then the host's leftovers (CleanupHost). The
// control plane keeps running. Safe to call when the node is not running or half started.
func Down(ctx context.Context, cp *localcluster.ControlPlane, o Options) error {
	var errs []error
	if _, err := cp.RemoveAddOn(Kubelet); err != nil {
		errs = append(errs, err)
	}
	layout := NewLayout(o.Dir)
	if p := cp.Process(Containerd); p != nil && p.Alive() {
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		if _, err := RemoveSandboxes(rctx, layout.ContainerdSocket()); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	for _, name := range []string{CoreDNS, KubeProxy, Containerd} {
		if _, err := cp.RemoveAddOn(name); err != nil {
			errs = append(errs, err)
		}
	}
	if err := CleanupHost(ctx, o.Dir, o.BinDir, o.Network); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
