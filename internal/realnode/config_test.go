package realnode

import (
	"os"
	"slices"
	"strings"
	"testing"
)

func TestParseNetwork(t *testing.T) {
	n, err := ParseNetwork("dlnode0", "10.244.64.7/24")
	if err != nil {
		t.Fatal(err)
	}
	if n.PodCIDR.String() != "10.244.64.0/24" || n.Gateway().String() != "10.244.64.1" {
		t.Fatalf("got %s gateway %s", n.PodCIDR, n.Gateway())
	}
	for _, c := range []struct{ bridge, cidr string }{
		{"", "10.244.64.0/24"}, {"a-name-longer-than-15", "10.244.64.0/24"}, {"dl0", "fd00::/64"},
		{"dl0", "10.244.64.0/30"}, {"dl0", "10.0.0.0/8"}, {"dl0", "not a range"},
	} {
		if _, err := ParseNetwork(c.bridge, c.cidr); err == nil {
			t.Errorf("%q %q accepted", c.bridge, c.cidr)
		}
	}
}

// TestConfigsCarryTheSettingsThisMachineNeeds pins the settings found necessary on this kind of
// machine (../shared/notes/real-node.md): without any one of them no pod runs.
func TestConfigsCarryTheSettingsThisMachineNeeds(t *testing.T) {
	l := Layout{Dir: "/d"}
	n, _ := ParseNetwork("dl0", "10.244.64.0/24")
	for _, c := range []struct{ name, text, want string }{
		{"containerd", ContainerdConfig(ContainerdOptions{Layout: l, Runc: "/usr/sbin/runc", CNIBinDir: "/usr/lib/cni", SandboxImage: SandboxImage}), "restrict_oom_score_adj = true"},
		{"containerd", ContainerdConfig(ContainerdOptions{Layout: l, SandboxImage: SandboxImage}), `sandbox = "localhost/dolphin-pause:1"`},
		{"containerd", ContainerdConfig(ContainerdOptions{Layout: l}), `address = "` + l.RunDir() + `/containerd.sock"`},
		{"kubelet", KubeletConfig(KubeletOptions{Layout: l, Network: n}), "failCgroupV1: false"},
		{"kubelet", KubeletConfig(KubeletOptions{Layout: l, Network: n}), "cgroupDriver: cgroupfs"},
		{"kubelet", KubeletConfig(KubeletOptions{Layout: l, Network: n}), `clusterDNS: ["10.244.64.1"]`},
		{"kubelet", KubeletConfig(KubeletOptions{Layout: l, Network: n}), "imageGCHighThresholdPercent: 100"},
		{"kube-proxy", KubeProxyConfig(KubeProxyOptions{Layout: l, Network: n}), "mode: iptables"},
		{"cni", CNIConfList(n, l), `"gateway": "10.244.64.1"`},
		{"cni", CNIConfList(n, l), `"rangeEnd": "10.244.64.253"`}, // ClientAddr .254 stays free
		{"coredns", Corefile(n, l, "cluster.local", 1), "bind 10.244.64.1"},
	} {
		if !strings.Contains(c.text, c.want) {
			t.Errorf("%s configuration lacks %q:\n%s", c.name, c.want, c.text)
		}
	}
}

func TestClientAddrIsOutOfThePodsRange(t *testing.T) {
	for cidr, want := range map[string]string{"10.244.64.0/24": "10.244.64.254", "10.244.0.0/16": "10.244.255.254", "10.244.64.16/28": "10.244.64.30"} {
		n, err := ParseNetwork("dl0", cidr)
		if err != nil || n.ClientAddr().String() != want {
			t.Errorf("%s: client address %v (%v), want %s", cidr, n.ClientAddr(), err, want)
		}
	}
}

func TestUnquoteRule(t *testing.T) {
	got := unquoteRule(strings.Fields(`INPUT -m comment --comment "block incoming localnet connections" -j KUBE-FIREWALL`))
	want := []string{"INPUT", "-m", "comment", "--comment", "block incoming localnet connections", "-j", "KUBE-FIREWALL"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q", got)
	}
}

// TestVersionsMatchTheBuildScript keeps DefaultBinDir where hack/node.sh builds.
func TestVersionsMatchTheBuildScript(t *testing.T) {
	b, err := os.ReadFile("../../hack/node.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"K8S_VERSION=" + KubernetesVersion + " ", "CONTAINERD_VERSION=" + ContainerdVersion + "\n", "COREDNS_VERSION=" + CoreDNSVersion + "\n",
		`out="$cache/node/k8s-$K8S_VERSION-containerd-$CONTAINERD_VERSION-coredns-$COREDNS_VERSION"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("hack/node.sh does not say %q", want)
		}
	}
}

// TestSocketsFitInAUnixSocketPath keeps every socket of a node in a deep folder (a test's
// temporary folder) under the 107 bytes a Unix socket path may have: the kubelet binds
// <root>/pod-resources/<10 digits> and <root>/plugins_registry/<name>.sock.
func TestSocketsFitInAUnixSocketPath(t *testing.T) {
	l := NewLayout("/tmp/TestRealNodeClusterFailsOverInTheClientsView2686892465/001/local/realnode")
	for _, p := range []string{l.ContainerdSocket() + ".ttrpc", l.KubeletRoot() + "/pod-resources/1871116759",
		l.KubeletRoot() + "/plugins_registry/some-csi-driver-reg.sock"} {
		if len(p) > 100 {
			t.Errorf("%s is %d bytes", p, len(p))
		}
	}
	if NewLayout("/a").RunDir() == NewLayout("/b").RunDir() {
		t.Fatal("two nodes share a short folder")
	}
}
