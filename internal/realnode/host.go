package realnode

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// changedSysctls are the kernel settings the node (ip_forward, bridge-nf-call-iptables), the
// kubelet (overcommit, panic settings, keyring limits) and kube-proxy (route_localnet) set.
// Their values before the first start are kept in DIR/sysctls.json and put back by Cleanup.
var changedSysctls = []string{
	"net/ipv4/ip_forward",
	"net/bridge/bridge-nf-call-iptables",
	"net/ipv4/conf/all/route_localnet",
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
}

// saveSysctls records the current values of changedSysctls unless a record exists (a node
// started twice must keep the values from before the first start).
func saveSysctls(path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	values := map[string]string{}
	for _, k := range changedSysctls {
		if v, err := os.ReadFile("/proc/sys/" + k); err == nil {
			values[k] = strings.TrimSpace(string(v))
		}
	}
	data, _ := json.MarshalIndent(values, "", "  ")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("recording the host's sysctls: %w", err)
	}
	return nil
}

// restoreSysctls writes back what saveSysctls recorded, then removes the record.
func restoreSysctls(path string) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the recorded sysctls: %w", err)
	}
	var values map[string]string
	if err := json.Unmarshal(data, &values); err != nil {
		return fmt.Errorf("parsing %s: %w", path, err)
	}
	var errs []error
	for k, v := range values {
		if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring %s: %w", k, err))
		}
	}
	if len(errs) == 0 {
		os.Remove(path)
	}
	return errors.Join(errs...)
}

// bridgeMark records that the node created its bridge (and so removes it at the end).
func (l Layout) bridgeMark() string { return l.Dir + "/bridge-created" }

// isBridge reports whether the link called name exists and is a Linux bridge.
func isBridge(name string) bool {
	_, err := os.Stat("/sys/class/net/" + name + "/bridge")
	return err == nil
}

// setupHost creates the bridge with the node's address (the CNI plugin finds it and keeps
// it), turns on forwarding and iptables for bridged traffic (Services from pods), and refuses
// connections to Service addresses kube-proxy does not translate.
func setupHost(l Layout, n Network, serviceCIDR string) error {
	if err := shareMountPoint(netnsDir); err != nil {
		return err
	}
	switch {
	case exec.Command("ip", "link", "show", n.Bridge).Run() != nil:
		if out, err := exec.Command("ip", "link", "add", n.Bridge, "type", "bridge").CombinedOutput(); err != nil {
			return fmt.Errorf("creating the bridge %s: %w: %s", n.Bridge, err, strings.TrimSpace(string(out)))
		}
		if err := os.WriteFile(l.bridgeMark(), []byte(n.Bridge), 0o600); err != nil {
			return fmt.Errorf("recording the bridge: %w", err)
		}
	case !isBridge(n.Bridge):
		return fmt.Errorf("%s exists and is not a bridge: choose another --bridge", n.Bridge)
	}
	addr := fmt.Sprintf("%s/%d", n.Gateway(), n.PodCIDR.Bits())
	if out, err := exec.Command("ip", "-4", "addr", "show", "dev", n.Bridge).Output(); err != nil || !strings.Contains(string(out), " "+addr+" ") {
		if out, err := exec.Command("ip", "addr", "add", addr, "dev", n.Bridge).CombinedOutput(); err != nil {
			return fmt.Errorf("giving %s the address %s: %w: %s", n.Bridge, addr, err, strings.TrimSpace(string(out)))
		}
	}
	if out, err := exec.Command("ip", "link", "set", n.Bridge, "up").CombinedOutput(); err != nil {
		return fmt.Errorf("bringing %s up: %w: %s", n.Bridge, err, strings.TrimSpace(string(out)))
	}
	for _, k := range []string{"net/ipv4/ip_forward", "net/bridge/bridge-nf-call-iptables"} {
		if err := os.WriteFile("/proc/sys/"+k, []byte("1"), 0o644); err != nil {
			return fmt.Errorf("setting %s: %w", k, err)
		}
	}
	return refuseUnservedServiceIPs(serviceCIDR)
}

// netnsDir is where containerd's CNI setup and `ip netns` mount network namespaces.
const netnsDir = "/run/netns"

// shareMountPoint makes dir a shared mount point of its own (a bind mount of itself when it
// is none), as `ip netns add` does the first time it runs on a host: afterwards iproute2 leaves
// it alone. Done before containerd mounts any pod's network namespace there. Otherwise the
// first `ip netns add` after pods started (the e2e client namespace, an operator's debugging)
// bind-mounts the folder over their namespace mounts, and every pod sandbox created before
// can never be removed ("remove netns: unlinkat /var/run/netns/cni-…: device or resource
// busy"): its pod stays Terminating for good — measured on a freshly booted machine, where a
// primary's pod deleted in a chaos round never came back. The mount stays after the node
// stops, as iproute2's does.
func shareMountPoint(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	share := func() error { return syscall.Mount("", dir, "none", syscall.MS_SHARED|syscall.MS_REC, "") }
	err := share()
	if errors.Is(err, syscall.EINVAL) { // not a mount point
		if err := syscall.Mount(dir, dir, "none", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return fmt.Errorf("bind-mounting %s on itself: %w", dir, err)
		}
		err = share()
	}
	if err != nil {
		return fmt.Errorf("making %s a shared mount point: %w", dir, err)
	}
	return nil
}

// serviceChain is the node's own iptables chain (removed by Cleanup with the kubelet's).
const serviceChain = "DOLPHIN-NODE-SERVICES"

// refuseUnservedServiceIPs makes a connection to an address of the Service range that
// kube-proxy did not translate to an endpoint fail at once (TCP reset), from this host
// (OUTPUT) and from pods (FORWARD), instead of leaving through the default route. While
// kube-proxy swaps a Service's rules from "no endpoints: reject" to "translate to the
// endpoint", a new connection can pass with neither; off the node it meets whatever the
// network does with an address nobody has. On this kind of machine the network accepts every
// TCP connection and never answers (measured: a connection to any unused address is
// established), so such a client hung for its whole read timeout after every failover.
// Filter runs after nat's DNAT, so translated connections carry the pod's address and pass.
func refuseUnservedServiceIPs(cidr string) error {
	run := func(args ...string) error {
		if out, err := exec.Command("iptables", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("iptables %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if exec.Command("iptables", "-n", "-L", serviceChain).Run() != nil {
		if err := run("-N", serviceChain); err != nil {
			return err
		}
	}
	if err := run("-F", serviceChain); err != nil {
		return err
	}
	// Not for addresses of this host (a host-process node's proxy serves its own range there).
	local := []string{"-m", "addrtype", "!", "--dst-type", "LOCAL"}
	if err := run(append(append([]string{"-A", serviceChain, "-d", cidr}, local...), "-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset")...); err != nil {
		return err
	}
	if err := run(append(append([]string{"-A", serviceChain, "-d", cidr}, local...), "-j", "REJECT")...); err != nil {
		return err
	}
	for _, builtin := range []string{"OUTPUT", "FORWARD"} {
		if exec.Command("iptables", "-C", builtin, "-j", serviceChain).Run() != nil {
			if err := run("-A", builtin, "-j", serviceChain); err != nil {
				return err
			}
		}
	}
	return nil
}

// RemoveSandboxes stops and removes every pod sandbox through containerd's CRI (which runs
// CNI DEL for each: veths, addresses and iptables rules go with them), so that no container
// outlives the node. containerd must still run; the kubelet should not (it would start them
// again).
func RemoveSandboxes(ctx context.Context, socket string) (int, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, fmt.Errorf("connecting to containerd at %s: %w", socket, err)
	}
	defer conn.Close()
	rs := cri.NewRuntimeServiceClient(conn)
	list, err := rs.ListPodSandbox(ctx, &cri.ListPodSandboxRequest{})
	if err != nil {
		return 0, fmt.Errorf("listing pod sandboxes: %w", err)
	}
	var errs []error
	for _, sb := range list.Items {
		if _, err := rs.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			errs = append(errs, fmt.Errorf("stopping sandbox %s (%s/%s): %w", sb.Id, sb.Metadata.GetNamespace(), sb.Metadata.GetName(), err))
			continue
		}
		if _, err := rs.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			errs = append(errs, fmt.Errorf("removing sandbox %s: %w", sb.Id, err))
		}
	}
	return len(list.Items), errors.Join(errs...)
}

// CleanupHost undoes what the node left on the host once its processes are stopped: every mount
// under its folders (the kubelet's bind mount of its root, pod volumes, containerd's overlay
// and shm mounts), its short folder, the bridge when the node created it; with hostWide (no
// other kubelet runs here) also kube-proxy's and the kubelet's iptables chains, the kubepods
// cgroups and the recorded sysctls.
func CleanupHost(ctx context.Context, dir, binDir string, n Network, hostWide bool) error {
	var errs []error
	if hostWide {
		if out, err := exec.CommandContext(ctx, filepath.Join(binDir, "kube-proxy"), "--cleanup").CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("kube-proxy --cleanup: %w: %s", err, lastLine(out)))
		}
		if err := removeKubeletChains(); err != nil {
			errs = append(errs, err)
		}
	}
	l := NewLayout(dir)
	unmounted := true
	for _, d := range []string{l.Dir, l.RunDir()} {
		if err := unmountUnder(d); err != nil {
			errs = append(errs, err)
			unmounted = false
		}
	}
	// The short folder holds the kubelet's root (pods' emptyDirs, gone with their pods; the
	// pods' views of local PVs, which are bind mounts) and sockets: removed only when nothing
	// under it is mounted any more, so no volume's data can go with it.
	switch left, err := mountsUnder(l.RunDir()); {
	case err != nil:
		unmounted = false
		errs = append(errs, fmt.Errorf("%s not removed: %w", l.RunDir(), err))
	case len(left) > 0:
		unmounted = false
		errs = append(errs, fmt.Errorf("%s still has mounts %v: not removed", l.RunDir(), left))
	}
	if unmounted {
		if err := os.RemoveAll(l.RunDir()); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", l.RunDir(), err))
		}
		_ = os.Remove(runRoot) // when no other node uses it
	}
	if hostWide {
		if err := removeCgroups(); err != nil {
			errs = append(errs, err)
		}
	}
	if created, _ := os.ReadFile(l.bridgeMark()); string(created) == n.Bridge {
		if isBridge(n.Bridge) {
			if out, err := exec.Command("ip", "link", "del", n.Bridge).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("removing the bridge %s: %w: %s", n.Bridge, err, strings.TrimSpace(string(out))))
			}
		}
		_ = os.Remove(l.bridgeMark())
	}
	if hostWide {
		if err := restoreSysctls(l.Sysctls()); err != nil {
			errs = append(errs, err)
		}
	}
	// Fixed paths the kubelet, containerd's shims and its CNI cache create whatever their
	// configuration says; removed when nothing else left anything in them.
	// The kubelet links every container's log into /var/log/containers whatever podLogsDir is.
	links, _ := filepath.Glob("/var/log/containers/*.log")
	for _, l := range links {
		if target, err := os.Readlink(l); err == nil && strings.HasPrefix(target, NewLayout(dir).PodLogs()+"/") {
			_ = os.Remove(l)
		}
	}
	_ = os.Remove("/var/log/containers") // when nothing else uses it
	if fi, err := os.Lstat("/var/lib/kubelet/device-plugins/kubelet.sock"); err == nil && fi.Mode()&os.ModeSocket != 0 {
		_ = os.Remove("/var/lib/kubelet/device-plugins/kubelet.sock")
	}
	for _, d := range []string{"/var/lib/kubelet/device-plugins", "/var/lib/kubelet", "/run/containerd/s",
		"/run/containerd/runc/k8s.io", "/run/containerd/runc", "/run/containerd", "/var/lib/cni/results", "/var/lib/cni"} {
		_ = os.Remove(d) // fails, and keeps the folder, when it is not empty
	}
	return errors.Join(errs...)
}

// removeKubeletChains removes the iptables chains the kubelet makes (KUBE-FIREWALL,
// KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT) and the node's own (serviceChain), and the rules
// that jump to them, in IPv4 and IPv6; kube-proxy --cleanup has removed its own by then, so
// every KUBE- chain left is the kubelet's.
func removeKubeletChains() error {
	var errs []error
	for _, tool := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(tool); err != nil {
			continue
		}
		for _, table := range []string{"filter", "nat", "mangle"} {
			out, err := exec.Command(tool+"-save", "-t", table).Output()
			if err != nil {
				continue // the table does not exist in this kernel
			}
			var chains []string
			for _, line := range strings.Split(string(out), "\n") {
				fields := strings.Fields(line)
				switch {
				case len(fields) > 0 && (strings.HasPrefix(fields[0], ":KUBE-") || fields[0] == ":"+serviceChain):
					chains = append(chains, strings.TrimPrefix(fields[0], ":"))
				case len(fields) > 2 && fields[0] == "-A" && !ours(fields[1]) && slices.ContainsFunc(fields, ours):
					// A rule of a built-in chain that jumps to a KUBE- chain: -A → -D.
					args := append([]string{"-t", table, "-D"}, unquoteRule(fields[1:])...)
					if o, err := exec.Command(tool, args...).CombinedOutput(); err != nil {
						errs = append(errs, fmt.Errorf("%s %v: %w: %s", tool, args, err, strings.TrimSpace(string(o))))
					}
				}
			}
			for _, c := range chains {
				_ = exec.Command(tool, "-t", table, "-F", c).Run()
			}
			for _, c := range chains {
				if o, err := exec.Command(tool, "-t", table, "-X", c).CombinedOutput(); err != nil {
					errs = append(errs, fmt.Errorf("%s -t %s -X %s: %w: %s", tool, table, c, err, strings.TrimSpace(string(o))))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// ours reports whether an iptables chain is the kubelet's or the node's.
func ours(chain string) bool { return strings.HasPrefix(chain, "KUBE-") || chain == serviceChain }

// unquoteRule joins the quoted words of an iptables-save rule ("block incoming localnet
// connections") back into single arguments.
func unquoteRule(fields []string) []string {
	var out []string
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		if strings.HasPrefix(f, `"`) && !(len(f) > 1 && strings.HasSuffix(f, `"`)) {
			for i+1 < len(fields) && !strings.HasSuffix(f, `"`) {
				i++
				f += " " + fields[i]
			}
		}
		out = append(out, strings.Trim(f, `"`))
	}
	return out
}

// mountsUnder lists the mount points at or under dir (a path mounted twice twice).
func mountsUnder(dir string) ([]string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", dir, err)
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("reading mounts: %w", err)
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMount(fields[4])
		if p == abs || strings.HasPrefix(p, abs+"/") {
			points = append(points, p)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading mounts: %w", err)
	}
	return points, nil
}

// unmountUnder unmounts every mount point under dir, deepest first (lazily when busy).
func unmountUnder(dir string) error {
	points, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	// Deepest first; a path mounted twice is unmounted twice.
	slices.SortStableFunc(points, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, 0); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
				errs = append(errs, fmt.Errorf("unmounting %s: %w", p, err))
			}
		}
	}
	return errors.Join(errs...)
}

// unescapeMount decodes the octal escapes (\040 for a space) of /proc/self/mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// removeCgroups removes the kubelet's kubepods hierarchy and containerd's k8s.io cgroups in
// every cgroup v1 controller (and the unified hierarchy), children first. A cgroup that still
// has processes stays (its removal fails with EBUSY) and is reported.
func removeCgroups() error {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	var errs []error
	for _, r := range roots {
		for _, top := range []string{"kubepods", "kubepods.slice", "k8s.io"} {
			base := filepath.Join(r, top)
			if _, err := os.Stat(base); err != nil {
				continue
			}
			var dirs []string
			_ = filepath.WalkDir(base, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			slices.Reverse(dirs)
			for _, d := range dirs {
				if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
					errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
					break
				}
			}
		}
	}
	return errors.Join(errs...)
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}
