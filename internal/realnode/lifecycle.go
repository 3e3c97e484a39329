package realnode

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	// A new node's containerd root is made from the image seed of these archives (hard
	// links, before containerd starts); else, or when that fails, they are imported.
	start = time.Now()
	seeded, seedErr := false, error(nil)
	if !cp.Process(Containerd).Alive() {
		seeded, seedErr = n.seedImages(ctx, archives)
	}
	seedTook := time.Since(start)
	for _, a := range n.AddOns() {
		start = time.Now()
		if _, err := cp.EnsureAddOn(ctx, a); err != nil {
			return n, fmt.Errorf("starting %s (log: %s/logs/%s.log): %w", a.Name, cp.Dir, a.Name, err)
		}
		progress(a.Name, time.Since(start))
		if a.Name != Containerd {
			continue
		}
		if seeded {
			progress("images linked from "+SeedsDir(), seedTook)
			continue
		}
		start = time.Now()
		if err := n.ImportImages(ctx, archives...); err != nil {
			return n, err
		}
		step := "images imported"
		if seedErr != nil {
			step += " (no image seed: " + firstLine(seedErr.Error()) + ")"
		}
		progress(step, time.Since(start))
	}
	return n, nil
}

// Down stops the node and undoes what it changed on the host: the kubelet first (it would
// start pods again), then every pod sandbox through containerd (CNI removes their network; with
// containerd dead, its containers are killed through runc), then kube-proxy, CoreDNS and
// containerd, then the host's leftovers (CleanupHost) — the host-wide ones (kube-proxy's and
// the kubelet's chains, kubepods cgroups, sysctls) only when no other kubelet runs here. On
// success the node's record (node.json) goes, so a second Down does nothing. The control
// plane keeps running. Safe to call when the node is not running or half started.
func Down(ctx context.Context, cp *localcluster.ControlPlane, o Options) error {
	var errs []error
	if _, err := cp.RemoveAddOn(Kubelet); err != nil {
		errs = append(errs, err)
	}
	layout := NewLayout(o.Dir)
	if p := cp.Process(Containerd); p.Alive() {
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		if _, err := RemoveSandboxes(rctx, layout.ContainerdSocket()); err != nil {
			errs = append(errs, err)
		}
		cancel()
	} else if err := killContainers(layout); err != nil {
		errs = append(errs, err)
	}
	for _, name := range []string{CoreDNS, KubeProxy, Containerd} {
		if _, err := cp.RemoveAddOn(name); err != nil {
			errs = append(errs, err)
		}
	}
	hostWide := otherNode(layout) == ""
	if err := CleanupHost(ctx, o.Dir, o.BinDir, o.Network, hostWide); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		if err := os.Remove(filepath.Join(o.Dir, "node.json")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing the node's record: %w", err))
		}
	}
	return errors.Join(errs...)
}

// firstLine is s up to its first line break.
func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}

// killContainers kills and deletes, through runc, the containers containerd left running when
// it died (its shims outlive it).
func killContainers(l Layout) error {
	root := l.ContainerdState() + "/runc/k8s.io"
	if _, err := os.Stat(root); err != nil {
		return nil
	}
	out, err := exec.Command(runcBinary, "--root", root, "list", "-q").Output()
	if err != nil {
		return fmt.Errorf("listing the node's containers with runc: %w", err)
	}
	var errs []error
	for _, id := range strings.Fields(string(out)) {
		if b, err := exec.Command(runcBinary, "--root", root, "delete", "--force", id).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("runc delete --force %s: %w: %s", id, err, strings.TrimSpace(string(b))))
		}
	}
	return errors.Join(errs...)
}
