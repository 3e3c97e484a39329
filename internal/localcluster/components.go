package localcluster

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ServiceClusterIPRange is the Service address range; its first address, 10.0.0.1, is the
// `kubernetes` Service and is in the API server certificate.
const ServiceClusterIPRange = "10.0.0.0/24"

// serviceCIDR is the Service range of this control plane: Options.ServiceCIDR as recorded,
// else ServiceClusterIPRange.
func (cp *ControlPlane) serviceCIDR() string {
	if cp.state.ServiceCIDR != "" {
		return cp.state.ServiceCIDR
	}
	return ServiceClusterIPRange
}

// ServiceAccountIssuer is the issuer of service-account tokens.
const ServiceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

// processSpec is how to run one component.
type processSpec struct {
	Args  []string
	Probe Probe
}

// spec returns the command line and probe of a control-plane component.
func (cp *ControlPlane) spec(name string) processSpec {
	bin := func(b string) string { return filepath.Join(cp.state.BinDir, b) }
	ports := cp.state.Ports
	local := func(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }
	crt, key := cp.PKI.CertKey("apiserver")
	kcrt, kkey := cp.PKI.CertKey("apiserver-kubelet-client")
	switch name {
	case Etcd:
		client, peer := "http://"+local(ports.EtcdClient), "http://"+local(ports.EtcdPeer)
		return processSpec{
			Args: []string{bin("etcd"),
				"--name=dolphin-local",
				"--data-dir=" + filepath.Join(cp.Dir, "etcd"),
				"--listen-client-urls=" + client,
				"--advertise-client-urls=" + client,
				"--listen-peer-urls=" + peer,
				"--initial-advertise-peer-urls=" + peer,
				"--initial-cluster=dolphin-local=" + peer,
				// A throw-away local cluster: fsync off makes it several times faster.
				"--unsafe-no-fsync",
			},
			Probe: Probe{URL: client + "/health"},
		}
	case APIServer:
		// Pods of a real node reach the API server at the advertised address (through the
		// `kubernetes` Service); without one it listens on loopback only.
		bind, advertise := "127.0.0.1", cp.state.AdvertiseAddress
		if advertise != "" {
			bind = "0.0.0.0"
		}
		args := []string{bin("kube-apiserver"),
			"--etcd-servers=http://" + local(ports.EtcdClient),
			// No --advertise-address=127.0.0.1: kube-apiserver 1.37 refuses a loopback
			// advertise address with an endpoint reconciler.
			"--bind-address=" + bind,
			fmt.Sprintf("--secure-port=%d", ports.APIServer),
			"--cert-dir=" + filepath.Join(cp.Dir, APIServer),
			"--tls-cert-file=" + crt,
			"--tls-private-key-file=" + key,
			"--client-ca-file=" + cp.PKI.CACert(),
			"--kubelet-client-certificate=" + kcrt,
			"--kubelet-client-key=" + kkey,
			"--service-account-issuer=" + ServiceAccountIssuer,
			"--service-account-key-file=" + cp.PKI.SAPub(),
			"--service-account-signing-key-file=" + cp.PKI.SAKey(),
			"--service-cluster-ip-range=" + cp.serviceCIDR(),
			"--authorization-mode=Node,RBAC",
			"--allow-privileged=true",
		}
		if advertise != "" {
			// The node's name is not in any DNS: logs, exec and port-forward reach the kubelet
			// at the node's address.
			args = append(args, "--advertise-address="+advertise, "--kubelet-preferred-address-types=InternalIP,Hostname")
		} else if !hasDefaultRoute() {
			// The endpoint reconciler needs a non-loopback address from the default route.
			args = append(args, "--endpoint-reconciler-type=none")
		}
		return processSpec{Args: args, Probe: Probe{URL: "https://" + local(ports.APIServer) + "/readyz", TLS: ProbeAdminTLS}}
	case ControllerManager:
		kc := cp.componentKubeconfig(name)
		return processSpec{
			Args: []string{bin("kube-controller-manager"),
				"--kubeconfig=" + kc,
				"--authentication-kubeconfig=" + kc,
				"--authorization-kubeconfig=" + kc,
				"--bind-address=127.0.0.1",
				fmt.Sprintf("--secure-port=%d", ports.ControllerManager),
				"--cert-dir=" + filepath.Join(cp.Dir, name),
				"--leader-elect=false",
				"--controllers=*",
				"--use-service-account-credentials=true",
				"--service-account-private-key-file=" + cp.PKI.SAKey(),
				"--root-ca-file=" + cp.PKI.CACert(),
				"--cluster-signing-cert-file=" + cp.PKI.CACert(),
				"--cluster-signing-key-file=" + cp.PKI.CAKey(),
				"--service-cluster-ip-range=" + cp.serviceCIDR(),
				"--cluster-name=dolphin-local",
			},
			Probe: Probe{URL: "https://" + local(ports.ControllerManager) + "/healthz", TLS: ProbeInsecureTLS},
		}
	case Scheduler:
		kc := cp.componentKubeconfig(name)
		return processSpec{
			Args: []string{bin("kube-scheduler"),
				"--kubeconfig=" + kc,
				"--authentication-kubeconfig=" + kc,
				"--authorization-kubeconfig=" + kc,
				"--bind-address=127.0.0.1",
				fmt.Sprintf("--secure-port=%d", ports.Scheduler),
				"--cert-dir=" + filepath.Join(cp.Dir, name),
				"--leader-elect=false",
			},
			Probe: Probe{URL: "https://" + local(ports.Scheduler) + "/healthz", TLS: ProbeInsecureTLS},
		}
	}
	panic("localcluster: unknown component " + name)
}

// hasDefaultRoute reports whether the host has an IPv4 or IPv6 default route.
func hasDefaultRoute() bool {
	if f, err := os.Open("/proc/net/route"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// Iface Destination Gateway Flags RefCnt Use Metric Mask …
			if fields := strings.Fields(sc.Text()); len(fields) > 7 && fields[1] == "00000000" && fields[7] == "00000000" {
				return true
			}
		}
	}
	if f, err := os.Open("/proc/net/ipv6_route"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) > 9 && fields[0] == strings.Repeat("0", 32) && fields[1] == "00" && fields[9] != "lo" {
				return true
			}
		}
	}
	return false
}
