package realnode

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"time"
)

// Layout is where one node keeps its files: under the local cluster's folder, but for what
// holds Unix sockets (the kubelet's root, containerd's socket), which lives in a short folder of
// its own (RunDir): a socket path has at most 107 bytes, and a test's temporary folder is long.
type Layout struct {
	// Dir is the node's folder (DIR/realnode).
	Dir string
}

// NewLayout is the layout of the node in dir (made absolute).
func NewLayout(dir string) Layout {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return Layout{Dir: dir}
}

// runRoot holds the short folders of every node on this host.
const runRoot = "/var/lib/dolphin-node"

// RunDir is the node's short folder: runRoot/<first 12 hex digits of sha256(Dir)>.
func (l Layout) RunDir() string {
	sum := sha256.Sum256([]byte(l.Dir))
	return runRoot + "/" + hex.EncodeToString(sum[:6])
}

// ContainerdConfig is containerd's configuration file. (The node's files live in Dir; the two
// that hold sockets, ContainerdSocket and KubeletRoot, in RunDir.)
func (l Layout) ContainerdConfig() string { return l.Dir + "/containerd.toml" }

// ContainerdRoot is containerd's persistent root (images, snapshots).
func (l Layout) ContainerdRoot() string { return l.Dir + "/containerd/root" }

// ContainerdState is containerd's state folder (tasks, runc's state under runc/).
func (l Layout) ContainerdState() string { return l.Dir + "/containerd/state" }

// ContainerdSocket is containerd's gRPC socket (ttrpc: the same with .ttrpc).
func (l Layout) ContainerdSocket() string { return l.RunDir() + "/containerd.sock" }

// CNIConfDir holds the pod network's configuration list.
func (l Layout) CNIConfDir() string { return l.Dir + "/cni" }

// CNIDataDir is host-local's record of the pods' addresses.
func (l Layout) CNIDataDir() string { return l.Dir + "/cni-ipam" }

// KubeletConfig is the kubelet's configuration file.
func (l Layout) KubeletConfig() string { return l.Dir + "/kubelet.yaml" }

// KubeletRoot is the kubelet's root folder (pods' volumes, plugin sockets).
func (l Layout) KubeletRoot() string { return l.RunDir() + "/kubelet" }

// KubeletKubeconfig is the kubelet's identity (system:node:<name>).
func (l Layout) KubeletKubeconfig() string { return l.Dir + "/kubelet.kubeconfig" }

// KubeProxyConfig is kube-proxy's configuration file.
func (l Layout) KubeProxyConfig() string { return l.Dir + "/kube-proxy.yaml" }

// KubeProxyKubeconfig is kube-proxy's identity (system:kube-proxy).
func (l Layout) KubeProxyKubeconfig() string { return l.Dir + "/kube-proxy.kubeconfig" }

// Corefile is CoreDNS's configuration.
func (l Layout) Corefile() string { return l.Dir + "/Corefile" }

// CoreDNSKubeconfig is CoreDNS's access to the API server.
func (l Layout) CoreDNSKubeconfig() string { return l.Dir + "/coredns.kubeconfig" }

// ResolvConf is the resolv.conf the kubelet gives pods.
func (l Layout) ResolvConf() string { return l.Dir + "/resolv.conf" }

// PodLogs is the kubelet's podLogsDir.
func (l Layout) PodLogs() string { return l.Dir + "/pod-logs" }

// Sysctls records the host's sysctls before the node's first start.
func (l Layout) Sysctls() string { return l.Dir + "/sysctls.json" }

// Network is the node's pod network: one Linux bridge whose address is the node's own
// address (the kubelet's node IP, the API server's advertised address, the cluster DNS server).
type Network struct {
	// Bridge is the bridge's interface name (at most 15 characters).
	Bridge string
	// PodCIDR is the pods' range, e.g. 10.244.64.0/24; its first address is the gateway.
	PodCIDR netip.Prefix
}

// Gateway is the bridge's address: the first address of PodCIDR.
func (n Network) Gateway() netip.Addr { return n.PodCIDR.Masked().Addr().Next() }

// ClientAddr is the last address of PodCIDR before its broadcast address, kept out of the
// pods' range: the address of a client the host runs in a network namespace of its own on the
// bridge, as a client pod would be (the e2e suite's load generator, with the kernel's TCP
// settings of a client pod).
func (n Network) ClientAddr() netip.Addr { return n.broadcast().Prev() }

// broadcast is PodCIDR's last address.
func (n Network) broadcast() netip.Addr {
	a := n.PodCIDR.Masked().Addr().As4()
	host := uint32(1)<<(32-n.PodCIDR.Bits()) - 1
	v := (uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// ParseNetwork checks a bridge name and pod range.
func ParseNetwork(bridge, podCIDR string) (Network, error) {
	if bridge == "" || len(bridge) > 15 || strings.ContainsAny(bridge, "/ \t") {
		return Network{}, fmt.Errorf("bridge %q: an interface name is 1 to 15 characters without / or spaces", bridge)
	}
	p, err := netip.ParsePrefix(podCIDR)
	if err != nil || !p.Addr().Is4() || p.Bits() > 28 || p.Bits() < 16 {
		return Network{}, fmt.Errorf("pod range %q: want an IPv4 range from /16 to /28, e.g. 10.244.64.0/24", podCIDR)
	}
	return Network{Bridge: bridge, PodCIDR: p.Masked()}, nil
}

// ContainerdOptions are the settings of containerd's configuration.
type ContainerdOptions struct {
	Layout Layout
	// Runc is the runc binary (Debian's /usr/sbin/runc).
	Runc string
	// CNIBinDir holds the CNI plugins (Debian's /usr/lib/cni).
	CNIBinDir string
	// SandboxImage is the pause image, present on the node (never pulled).
	SandboxImage string
}

// ContainerdConfig is containerd's configuration (version 3, which containerd 2.x migrates):
// its own root, state and socket, so it never meets a containerd of the host; runc with cgroupfs
// (the kubelet's driver); the CRI's CNI from cniBinDir and the node's own conf dir; the pause
// image built here. restrict_oom_score_adj: a machine whose processes lack CAP_SYS_RESOURCE
// (as the VMs this project runs on) fails every sandbox when runc tries a negative
// oom_score_adj (../notes/real-node.md); with it runc keeps the score at least the parent's.
func ContainerdConfig(o ContainerdOptions) string {
	l := o.Layout
	return fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins.'io.containerd.internal.v1.opt']
  path = %[5]q

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[6]q

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %[7]q
        Root = %[10]q
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%[8]q]
    conf_dir = %[9]q
`, l.ContainerdRoot(), l.ContainerdState(), l.ContainerdSocket(), l.ContainerdSocket()+".ttrpc",
		l.Dir+"/containerd/opt", o.SandboxImage, o.Runc, o.CNIBinDir, l.CNIConfDir(), l.ContainerdState()+"/runc")
}

// CNIConfList is the pods' network: the node's bridge with the gateway address, addresses from
// host-local in PodCIDR up to the one before ClientAddr (state kept in the node's folder), masquerade for traffic leaving the
// range, hairpin so that a pod reaches itself through a Service, and portmap for hostPorts.
func CNIConfList(n Network, l Layout) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "dolphin",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": %q,
        "ranges": [[{"subnet": %q, "gateway": %q, "rangeEnd": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, n.Bridge, l.CNIDataDir(), n.PodCIDR.String(), n.Gateway().String(), n.ClientAddr().Prev().String())
}

// KubeletOptions are the settings of the kubelet's configuration.
type KubeletOptions struct {
	Layout  Layout
	Network Network
	// CACert verifies the API server's client certificate when it calls the kubelet (logs,
	// exec, port-forward).
	CACert string
	// Port is the kubelet's API port on the node address; HealthzPort its /healthz on
	// 127.0.0.1.
	Port, HealthzPort int
	// ClusterDomain is the DNS domain of Services (cluster.local).
	ClusterDomain string
}

// KubeletConfig is the kubelet's configuration: cgroupfs (the cgroup driver of a host without
// systemd managing containers), cgroup v1 accepted (failCgroupV1: false; the kubelet refuses
// v1 hosts otherwise since 1.35), swap tolerated, the API server authenticated by the cluster
// CA and authorised by SubjectAccessReview, the node's own DNS server, eviction thresholds low
// (a development machine's disk is often fuller than a node's), and image garbage collection
// off: the images were imported here and cannot be pulled again.
func KubeletConfig(o KubeletOptions) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]q
port: %[2]d
readOnlyPort: 0
healthzBindAddress: "127.0.0.1"
healthzPort: %[3]d
containerRuntimeEndpoint: "unix://%[4]s"
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %[5]q
authorization:
  mode: Webhook
clusterDNS: [%[1]q]
clusterDomain: %[6]q
resolvConf: %[7]q
evictionHard:
  memory.available: "50Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
maxPods: 110
rotateCertificates: false
serverTLSBootstrap: false
staticPodPath: ""
syncFrequency: 10s
fileCheckFrequency: 10s
nodeStatusUpdateFrequency: 5s
podLogsDir: %[8]q
`, o.Network.Gateway().String(), o.Port, o.HealthzPort, o.Layout.ContainerdSocket(), o.CACert,
		o.ClusterDomain, o.Layout.ResolvConf(), o.Layout.PodLogs())
}

// KubeProxyOptions are the settings of kube-proxy's configuration.
type KubeProxyOptions struct {
	Layout   Layout
	Network  Network
	NodeName string
	// HealthzPort and MetricsPort listen on 127.0.0.1.
	HealthzPort, MetricsPort int
	// MinSyncPeriod is kube-proxy's minSyncPeriod: the shortest time between two rewrites of
	// its rules (0: kube-proxy's default, 1 s, what most clusters run).
	MinSyncPeriod time.Duration
}

// KubeProxyConfig is kube-proxy in iptables mode (iptables-nft on Debian), as most clusters
// run it: established connections to an endpoint that left a Service live on, which is what a
// client of Dolphin meets on a real cluster. Conntrack limits are left as the host has them.
func KubeProxyConfig(o KubeProxyOptions) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %q
mode: iptables
clusterCIDR: %q
hostnameOverride: %q
healthzBindAddress: "127.0.0.1:%d"
metricsBindAddress: "127.0.0.1:%d"
conntrack:
  maxPerCore: 0
  min: 0
`, o.Layout.KubeProxyKubeconfig(), o.Network.PodCIDR.String(), o.NodeName, o.HealthzPort, o.MetricsPort) +
		minSync(o.MinSyncPeriod)
}

// minSync is kube-proxy's iptables.minSyncPeriod setting, when one is asked for.
func minSync(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return fmt.Sprintf("iptables:\n  minSyncPeriod: %s\n", d)
}

// Corefile is CoreDNS's configuration: the cluster's names from the API server on the node
// address, port 53; /ready on 127.0.0.1:readyPort. Nothing is cached, so a Service or a pod's
// record is answered as soon as it exists (tests create and query them at once); other names
// are refused (the node has no upstream it can rely on).
func Corefile(n Network, l Layout, domain string, readyPort int) string {
	return fmt.Sprintf(`%[1]s:53 in-addr.arpa:53 ip6.arpa:53 {
    bind %[2]s
    errors
    ready 127.0.0.1:%[3]d
    kubernetes %[1]s in-addr.arpa ip6.arpa {
        kubeconfig %[4]s
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
}
.:53 {
    bind %[2]s
    errors
    template ANY ANY {
        rcode REFUSED
    }
}
`, domain, n.Gateway().String(), readyPort, l.CoreDNSKubeconfig())
}

// ResolvConf is the resolv.conf the kubelet hands to pods with dnsPolicy Default (and whose
// search list it adds to ClusterFirst pods): the node's DNS server, no search domains of the
// host's.
func ResolvConf(n Network) string {
	return "nameserver " + n.Gateway().String() + "\n"
}
