// Package realnode runs a real Kubernetes node on this machine beside the local control plane
// (internal/localcluster): containerd with runc and the CNI bridge, the kubelet, kube-proxy
// (iptables mode) and CoreDNS, built from Go modules and Debian packages by hack/node.sh, each a
// detached add-on process of the control plane. Pods run in real containers from images built
// here (internal/imagebuild), imported into containerd: the node never pulls. See
// docs/design/0047-real-node.md.
//
// What a node changes on the host is undone by Cleanup: pod sandboxes (their veths and
// iptables rules, through CNI), kube-proxy's chains, mounts under its folder, the kubepods
// cgroups, the bridge, and the sysctls it and the kubelet set.
package realnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/dolphin-operator/dolphin/internal/localcluster"
)

// Add-on process names (and log file names) of the node.
const (
	Containerd = "containerd"
	Kubelet    = "kubelet"
	KubeProxy  = "kube-proxy"
	CoreDNS    = "coredns"
)

// Defaults of Options.
const (
	DefaultBridge        = "dlnode0"
	DefaultPodCIDR       = "10.244.64.0/24"
	DefaultNodeName      = "dolphin-node"
	DefaultClusterDomain = "cluster.local"
	// DefaultServiceCIDR is the real node's Service range, apart from the host-process node's
	// (localcluster.ServiceClusterIPRange): kube-proxy's rules for one cluster must not catch
	// the other's Service addresses when both run on the host.
	DefaultServiceCIDR = "10.96.0.0/24"
	// SandboxImage is the pause image built by make images (internal/imagebuild.PauseReference).
	SandboxImage = "localhost/dolphin-pause:1"
)

// Debian's binaries the node uses (hack/node.sh installs them).
const (
	runcBinary = "/usr/sbin/runc"
	cniBinDir  = "/usr/lib/cni"
)

// Options describe one node.
type Options struct {
	// Dir is the node's folder (normally DIR/realnode of the local cluster).
	Dir string
	// BinDir holds containerd, ctr, containerd-shim-runc-v2, kubelet, kube-proxy and coredns
	// (hack/node.sh --print).
	BinDir string
	// NodeName is the Node object's name.
	NodeName string
	// Network is the pod network; its gateway is the node's address.
	Network Network
	// ClusterDomain is the DNS domain of Services.
	ClusterDomain string
	// ServiceCIDR is the API server's Service range (default DefaultServiceCIDR; start the
	// control plane with the same).
	ServiceCIDR string
	// KubeProxyMinSyncPeriod is kube-proxy's minSyncPeriod (0: its default, 1 s).
	KubeProxyMinSyncPeriod time.Duration
}

// ports are the node's local ports, kept in DIR/ports.json so that a second start reuses them
// (an add-on whose command line is unchanged is kept running).
type ports struct {
	ContainerdMetrics int `json:"containerdMetrics"`
	Kubelet           int `json:"kubelet"`
	KubeletHealthz    int `json:"kubeletHealthz"`
	KubeProxyHealthz  int `json:"kubeProxyHealthz"`
	KubeProxyMetrics  int `json:"kubeProxyMetrics"`
	CoreDNSReady      int `json:"coreDNSReady"`
}

// Node is a prepared node: its files written, the host set up, its add-ons described.
type Node struct {
	opts   Options
	layout Layout
	ports  ports
}

// Address is the node's address: the bridge's, which pods, the API server's `kubernetes`
// endpoint and the cluster DNS use.
func (n *Node) Address() string { return n.opts.Network.Gateway().String() }

// ContainerdSocket is containerd's socket (for ctr and CRI clients).
func (n *Node) ContainerdSocket() string { return n.layout.ContainerdSocket() }

// Check reports what this machine lacks to run a node, as one error naming each missing part
// and how to get it (nil when nothing is missing).
func Check(binDir string) error {
	var errs []error
	if os.Geteuid() != 0 {
		errs = append(errs, errors.New("the real node needs root (containers, network namespaces, iptables)"))
	}
	for _, b := range []string{"containerd", "ctr", "containerd-shim-runc-v2", "kubelet", "kube-proxy", "coredns"} {
		if _, err := exec.LookPath(filepath.Join(binDir, b)); err != nil {
			errs = append(errs, fmt.Errorf("%s is not in %s: run hack/node.sh (make node)", b, binDir))
		}
	}
	for _, b := range []string{runcBinary, cniBinDir + "/bridge", cniBinDir + "/host-local", cniBinDir + "/portmap", cniBinDir + "/loopback"} {
		if _, err := os.Stat(b); err != nil {
			errs = append(errs, fmt.Errorf("%s is missing: install Debian's runc and containernetworking-plugins (hack/node.sh does)", b))
		}
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		if _, err := os.Stat("/usr/sbin/iptables"); err != nil {
			errs = append(errs, errors.New("iptables is missing (kube-proxy's mode): install Debian's iptables (hack/node.sh does)"))
		}
	}
	if fs, err := os.ReadFile("/proc/filesystems"); err != nil || !strings.Contains(string(fs), "\toverlay\n") {
		errs = append(errs, errors.New("the kernel has no overlay file system (containerd's snapshotter): load the overlay module"))
	}
	if _, err := os.Stat("/proc/sys/net/bridge/bridge-nf-call-iptables"); err != nil {
		errs = append(errs, errors.New("the kernel has no br_netfilter (Services from pods on the bridge): load the br_netfilter module"))
	}
	return errors.Join(errs...)
}

// Prepare checks the machine, writes the node's configuration, certificates and kubeconfigs
// under o.Dir, and sets up the host (the bridge with the node's address, ip_forward and
// bridge-nf-call-iptables; the previous values of every sysctl the node or its kubelet and
// kube-proxy change are saved first, for Cleanup). cp is the running control plane.
func Prepare(cp *localcluster.ControlPlane, o Options) (*Node, error) {
	if o.NodeName == "" {
		o.NodeName = DefaultNodeName
	}
	if o.ClusterDomain == "" {
		o.ClusterDomain = DefaultClusterDomain
	}
	if o.ServiceCIDR == "" {
		o.ServiceCIDR = DefaultServiceCIDR
	}
	if err := Check(o.BinDir); err != nil {
		return nil, err
	}
	if other := otherNode(NewLayout(o.Dir)); other != "" {
		return nil, fmt.Errorf("%w (its kubelet's root is %s): one at a time "+
			"(their kubelets would share the kubepods cgroups, and kube-proxy's cleanup removes every KUBE- chain); "+
			"stop it with dolphin local down --dir <its folder>", ErrOtherNode, other)
	}
	if err := o.Save(); err != nil {
		return nil, err
	}
	n := &Node{opts: o, layout: NewLayout(o.Dir)}
	for _, d := range []string{o.Dir, n.layout.CNIConfDir(), n.layout.KubeletRoot(), n.layout.ContainerdRoot(), n.layout.ContainerdState()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("creating %s: %w", d, err)
		}
	}
	if err := n.loadPorts(); err != nil {
		return nil, err
	}
	if err := saveSysctls(n.layout.Sysctls()); err != nil {
		return nil, err
	}
	if err := setupHost(n.layout, o.Network, o.ServiceCIDR); err != nil {
		return nil, err
	}
	if err := n.writeFiles(cp); err != nil {
		return nil, err
	}
	return n, nil
}

// loadPorts reuses the ports recorded in DIR/ports.json (a node started again keeps its
// command lines, so running add-ons are kept), else picks free ones and records them.
func (n *Node) loadPorts() error {
	path := filepath.Join(n.opts.Dir, "ports.json")
	if data, err := os.ReadFile(path); err == nil && json.Unmarshal(data, &n.ports) == nil && n.ports.Kubelet != 0 {
		return nil
	}
	p, err := localcluster.FreePorts(6)
	if err != nil {
		return err
	}
	n.ports = ports{ContainerdMetrics: p[0], Kubelet: p[1], KubeletHealthz: p[2], KubeProxyHealthz: p[3],
		KubeProxyMetrics: p[4], CoreDNSReady: p[5]}
	data, _ := json.Marshal(n.ports)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// writeFiles writes every configuration file, the node's client certificates and kubeconfigs.
func (n *Node) writeFiles(cp *localcluster.ControlPlane) error {
	l, o := n.layout, n.opts
	files := map[string]string{
		l.ContainerdConfig(): ContainerdConfig(ContainerdOptions{Layout: l, Runc: runcBinary, CNIBinDir: cniBinDir, SandboxImage: SandboxImage}) +
			fmt.Sprintf("\n[metrics]\n  address = \"127.0.0.1:%d\"\n", n.ports.ContainerdMetrics),
		filepath.Join(l.CNIConfDir(), "10-dolphin.conflist"): CNIConfList(o.Network, l),
		l.KubeletConfig(): KubeletConfig(KubeletOptions{Layout: l, Network: o.Network, CACert: cp.PKI.CACert(),
			Port: n.ports.Kubelet, HealthzPort: n.ports.KubeletHealthz, ClusterDomain: o.ClusterDomain}),
		l.KubeProxyConfig(): KubeProxyConfig(KubeProxyOptions{Layout: l, Network: o.Network, NodeName: o.NodeName,
			HealthzPort: n.ports.KubeProxyHealthz, MetricsPort: n.ports.KubeProxyMetrics, MinSyncPeriod: o.KubeProxyMinSyncPeriod}),
		l.Corefile():   Corefile(o.Network, l, o.ClusterDomain, n.ports.CoreDNSReady),
		l.ResolvConf(): ResolvConf(o.Network),
	}
	for path, body := range files {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
	}
	server := cp.APIServerURL()
	// The kubelet as the Node authorizer expects it; kube-proxy as the user the default
	// system:node-proxier binding names; CoreDNS reads Services, EndpointSlices, pods and
	// namespaces cluster-wide (a binding to system:kube-dns would do; the local admin is used
	// instead of adding a role, this is the host's own process).
	idents := []struct{ kubeconfig, name, cn, group string }{
		{l.KubeletKubeconfig(), "node-" + o.NodeName, "system:node:" + o.NodeName, "system:nodes"},
		{l.KubeProxyKubeconfig(), "kube-proxy", "system:kube-proxy", ""},
	}
	for _, id := range idents {
		groups := []string{}
		if id.group != "" {
			groups = append(groups, id.group)
		}
		if _, _, err := cp.PKI.IssueClientCert(id.name, id.cn, groups...); err != nil {
			return err
		}
		if err := localcluster.WriteKubeconfig(id.kubeconfig, server, cp.PKI, id.name); err != nil {
			return err
		}
	}
	if err := localcluster.WriteKubeconfig(l.CoreDNSKubeconfig(), server, cp.PKI, "admin"); err != nil {
		return err
	}
	return nil
}

// AddOns are the node's processes in start order.
func (n *Node) AddOns() []localcluster.AddOn {
	l, o, bin := n.layout, n.opts, func(b string) string { return filepath.Join(n.opts.BinDir, b) }
	// containerd finds its shim on PATH: the node's own first (a Debian containerd package may
	// have put an older one in /usr/bin).
	path := "PATH=" + o.BinDir + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	return []localcluster.AddOn{
		{
			Name: Containerd, Args: []string{bin("containerd"), "--config", l.ContainerdConfig()},
			Env:   []string{path},
			Probe: localcluster.Probe{URL: fmt.Sprintf("http://127.0.0.1:%d/v1/metrics", n.ports.ContainerdMetrics)},
		},
		{
			Name: Kubelet,
			Args: []string{bin("kubelet"), "--config=" + l.KubeletConfig(), "--kubeconfig=" + l.KubeletKubeconfig(),
				"--root-dir=" + l.KubeletRoot(), "--cert-dir=" + filepath.Join(l.Dir, "kubelet-pki"),
				"--node-ip=" + n.Address(), "--hostname-override=" + o.NodeName, "--v=1"},
			Env:          []string{path},
			Probe:        localcluster.Probe{URL: fmt.Sprintf("http://127.0.0.1:%d/healthz", n.ports.KubeletHealthz)},
			ReadyTimeout: 90 * time.Second,
		},
		{
			Name:  KubeProxy,
			Args:  []string{bin("kube-proxy"), "--config=" + l.KubeProxyConfig(), "--v=1"},
			Env:   []string{path},
			Probe: localcluster.Probe{URL: fmt.Sprintf("http://127.0.0.1:%d/livez", n.ports.KubeProxyHealthz)},
		},
		{
			Name:  CoreDNS,
			Args:  []string{bin("coredns"), "-conf", l.Corefile()},
			Probe: localcluster.Probe{URL: fmt.Sprintf("http://127.0.0.1:%d/ready", n.ports.CoreDNSReady)},
		},
	}
}

// ImportImages loads Docker archives into containerd's k8s.io namespace (the one the kubelet's
// pods use), through ctr.
func (n *Node) ImportImages(ctx context.Context, archives ...string) error {
	for _, a := range archives {
		if err := importArchive(ctx, n.opts.BinDir, n.layout.ContainerdSocket(), a); err != nil {
			return err
		}
	}
	return nil
}

// Versions of the node's parts; hack/node.sh builds them into DefaultBinDir (a test keeps the
// two in step).
const (
	KubernetesVersion = localcluster.KubernetesVersion
	ContainerdVersion = "v2.4.2"
	CoreDNSVersion    = "v1.15.0"
)

// DefaultBinDir is where hack/node.sh puts the node's binaries (`hack/node.sh --print`).
func DefaultBinDir() string {
	return filepath.Join(localcluster.CacheDir(), "node",
		"k8s-"+KubernetesVersion+"-containerd-"+ContainerdVersion+"-coredns-"+CoreDNSVersion)
}

// recorded is DIR/node.json: what Down needs to find and clean up a node another process
// started.
type recorded struct {
	BinDir        string `json:"binDir"`
	NodeName      string `json:"nodeName"`
	Bridge        string `json:"bridge"`
	PodCIDR       string `json:"podCIDR"`
	ClusterDomain string `json:"clusterDomain"`
}

// Save records o in o.Dir/node.json.
func (o Options) Save() error {
	data, err := json.MarshalIndent(recorded{BinDir: o.BinDir, NodeName: o.NodeName, Bridge: o.Network.Bridge,
		PodCIDR: o.Network.PodCIDR.String(), ClusterDomain: o.ClusterDomain}, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the node's options: %w", err)
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", o.Dir, err)
	}
	if err := os.WriteFile(filepath.Join(o.Dir, "node.json"), data, 0o600); err != nil {
		return fmt.Errorf("recording the node's options: %w", err)
	}
	return nil
}

// LoadOptions reads what Save recorded in dir (an error wrapping fs.ErrNotExist when no node
// was started there).
func LoadOptions(dir string) (Options, error) {
	data, err := os.ReadFile(filepath.Join(dir, "node.json"))
	if err != nil {
		return Options{}, fmt.Errorf("reading the node's options: %w", err)
	}
	var r recorded
	if err := json.Unmarshal(data, &r); err != nil {
		return Options{}, fmt.Errorf("parsing %s/node.json: %w", dir, err)
	}
	netw, err := ParseNetwork(r.Bridge, r.PodCIDR)
	if err != nil {
		return Options{}, err
	}
	return Options{Dir: dir, BinDir: r.BinDir, NodeName: r.NodeName, Network: netw, ClusterDomain: r.ClusterDomain}, nil
}

// hostLockPath is the lock that tests of two packages take so that their real nodes run one
// after the other: two kubelets on one host share the kubepods cgroups, and kube-proxy's
// cleanup removes every KUBE- chain.
const hostLockPath = "/run/lock/dolphin-real-node.lock"

// LockHost waits until no other holder of the host lock runs a real node (tests of different
// packages run at once under go test), and returns its release.
func LockHost() (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(hostLockPath), 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", filepath.Dir(hostLockPath), err)
	}
	f, err := os.OpenFile(hostLockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", hostLockPath, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", hostLockPath, err)
	}
	return func() { f.Close() }, nil
}

// ErrOtherNode is returned by Prepare when another kubelet runs on this host.
var ErrOtherNode = errors.New("another kubelet runs on this host")

// otherNode returns the root folder of a kubelet running on this host that is not this node's
// (another real node's, or any other kubelet: "/var/lib/kubelet" when it names none), "" when
// there is none.
func otherNode(l Layout) string {
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, c := range cmdlines {
		b, err := os.ReadFile(c)
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) == 0 || filepath.Base(args[0]) != "kubelet" {
			continue
		}
		root := "/var/lib/kubelet"
		for _, arg := range args[1:] {
			if r, ok := strings.CutPrefix(arg, "--root-dir="); ok {
				root = r
			}
		}
		if root != l.KubeletRoot() {
			return root
		}
	}
	return ""
}
