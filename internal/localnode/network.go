package localnode

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// netnsDir is where `ip netns` keeps named network namespaces.
const netnsDir = "/run/netns"

// network is the pod network: a host bridge holding the first address of the
// pod CIDR (the pods' default gateway), and per pod a named network namespace
// joined to the bridge by a veth pair. It is built with iproute2's `ip`, as a
// CNI bridge plugin would. No iptables rules are added: the host reaches pods,
// and pods reach each other and the host's gateway address, through the bridge.
type network struct {
	bridge  string
	prefix  netip.Prefix
	gateway netip.Addr

	mu   sync.Mutex
	used map[netip.Addr]string // address -> pod UID
	last netip.Addr            // the address handed out last
}

func newNetwork(bridge, cidr string) (*network, error) {
	prefix, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil, fmt.Errorf("localnode: pod CIDR: %w", err)
	}
	prefix = prefix.Masked()
	if !prefix.Addr().Is4() || prefix.Bits() > 29 {
		return nil, fmt.Errorf("localnode: pod CIDR %s: need an IPv4 range of at least /29", cidr)
	}
	return &network{bridge: bridge, prefix: prefix, gateway: prefix.Addr().Next(), used: map[netip.Addr]string{}}, nil
}

// ip runs iproute2's ip with args.
func ip(ctx context.Context, args ...string) error {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// setUp removes what a previous run left behind (namespaces of this bridge and
// the processes in them) and creates the bridge.
func (n *network) setUp(ctx context.Context) error {
	if err := n.removeStaleNamespaces(ctx); err != nil {
		return err
	}
	if _, err := os.Stat("/sys/class/net/" + n.bridge); err == nil {
		if err := ip(ctx, "link", "del", n.bridge); err != nil {
			return fmt.Errorf("localnode: removing stale bridge: %w", err)
		}
	}
	gw := netip.PrefixFrom(n.gateway, n.prefix.Bits()).String()
	for _, args := range [][]string{
		{"link", "add", "name", n.bridge, "type", "bridge"},
		{"addr", "add", gw, "dev", n.bridge},
		{"link", "set", n.bridge, "up"},
	} {
		if err := ip(ctx, args...); err != nil {
			return fmt.Errorf("localnode: creating bridge: %w", err)
		}
	}
	return nil
}

// tearDown removes every namespace of this bridge and the bridge itself.
func (n *network) tearDown(ctx context.Context) error {
	err := n.removeStaleNamespaces(ctx)
	if _, statErr := os.Stat("/sys/class/net/" + n.bridge); statErr == nil {
		err = errors.Join(err, ip(ctx, "link", "del", n.bridge))
	}
	return err
}

func (n *network) removeStaleNamespaces(ctx context.Context) error {
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("localnode: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), n.bridge+"-") {
			errs = append(errs, n.removeNamespace(ctx, e.Name()))
		}
	}
	return errors.Join(errs...)
}

// nsName is the network namespace name of the pod with uid.
func (n *network) nsName(uid string) string { return n.bridge + "-" + uid }

// nsPath is the file a process joins to enter the namespace.
func nsPath(ns string) string { return filepath.Join(netnsDir, ns) }

// vethName is the host end of the pod's veth pair: at most 15 characters.
func (n *network) vethName(uid string) string {
	sum := sha256.Sum256([]byte(uid))
	return n.bridge + hex.EncodeToString(sum[:])[:15-len(n.bridge)]
}

// allocate reserves a free pod address for uid (the same one if it has one).
func (n *network) allocate(uid string) (netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for a, u := range n.used {
		if u == uid {
			return a, nil
		}
	}
	// Round robin from the last address handed out, as CNI's host-local IPAM does: an
	// address freed a moment ago is taken last, so neighbours that still cache the old pod's
	// MAC for it (for up to ~45 s) do not black-hole the new pod.
	first := n.gateway.Next()
	start := n.last.Next()
	if !n.last.IsValid() || !n.prefix.Contains(start) {
		start = first
	}
	for a, wrapped := start, false; ; a = a.Next() {
		if !n.prefix.Contains(a) || !n.prefix.Contains(a.Next()) { // past the end, or broadcast
			if wrapped {
				break
			}
			a, wrapped = first, true
		}
		if wrapped && a == start {
			break
		}
		if _, taken := n.used[a]; taken {
			continue
		}
		n.used[a], n.last = uid, a
		return a, nil
	}
	return netip.Addr{}, fmt.Errorf("localnode: pod CIDR %s is full", n.prefix)
}

func (n *network) release(uid string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for a, u := range n.used {
		if u == uid {
			delete(n.used, a)
		}
	}
}

// addPod creates the pod's namespace with loopback up and eth0 at addr, its
// default route via the bridge. It returns the namespace's name.
func (n *network) addPod(ctx context.Context, uid string, addr netip.Addr) (string, error) {
	ns, veth := n.nsName(uid), n.vethName(uid)
	if err := n.removeNamespace(ctx, ns); err != nil {
		return "", err
	}
	if _, err := os.Stat("/sys/class/net/" + veth); err == nil {
		_ = ip(ctx, "link", "del", veth)
	}
	cidr := netip.PrefixFrom(addr, n.prefix.Bits()).String()
	for _, args := range [][]string{
		{"netns", "add", ns},
		{"link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"link", "set", veth, "master", n.bridge, "up"},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "addr", "add", cidr, "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
		{"-n", ns, "route", "add", "default", "via", n.gateway.String()},
	} {
		if err := ip(ctx, args...); err != nil {
			return "", errors.Join(fmt.Errorf("localnode: pod network: %w", err), n.removeNamespace(ctx, ns))
		}
	}
	// The host may still cache an earlier pod's MAC for this address; forget it (best effort:
	// other pods learn the new one from the pod's first ARP request).
	_ = ip(ctx, "neigh", "flush", "to", addr.String(), "dev", n.bridge)
	return ns, nil
}

// removeNamespace kills any process still in the namespace and deletes it
// (which deletes the veth pair too). A missing namespace is not an error.
func (n *network) removeNamespace(ctx context.Context, ns string) error {
	if _, err := os.Stat(nsPath(ns)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	out, err := exec.CommandContext(ctx, "ip", "netns", "pids", ns).Output()
	if err == nil {
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	if err := ip(ctx, "netns", "del", ns); err != nil {
		return fmt.Errorf("localnode: removing network namespace: %w", err)
	}
	return nil
}
