package e2e

import (
	"bufio"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dolphin-operator/dolphin/internal/imagebuild/manifest"
	"github.com/dolphin-operator/dolphin/internal/operator"
	"github.com/dolphin-operator/dolphin/internal/realnode"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// The e2e stacks' networks: their own bridges and pod ranges, apart from a local cluster the
// developer runs. The host's address on the bridge (the pods' gateway) is .1 of the range.
const (
	e2eBridge       = "dle2e" // process node
	e2eProcessCIDR  = "10.244.77.0/24"
	e2eRealBridge   = "dle2er" // real node
	e2eRealCIDR     = "10.244.78.0/24"
	e2eProcessGWay  = "10.244.77.1"
	e2eRealGateway  = "10.244.78.1"
	operatorNS      = "dolphin-system"   // where config/default installs the operator
	operatorAppName = "dolphin-operator" // its pods' app.kubernetes.io/name
)

// gateway is the host's address on the stack's pod bridge (the pods' default gateway): a
// server the pods must reach from this host (the tests' S3 server) listens there.
func (s *stack) gateway() string {
	if s.node == nodeReal {
		return e2eRealGateway
	}
	return e2eProcessGWay
}

// upArgs are the `dolphin local up` arguments of a stack on node, without the binaries'
// folders (see upStackOn). A previous release's `dolphin local` knows only the process node
// and no --node flag; this build's starts a real node unless told otherwise, and keeps the
// kind a folder was started with when `up` runs again without --node (upAgain after the
// operator-upgrade test put this build in place).
func upArgs(local, node string, previousRelease bool) []string {
	switch {
	case node == nodeReal:
		return []string{"local", "up", "--dir", local, "--node", nodeReal, "--bridge", e2eRealBridge, "--pod-cidr", e2eRealCIDR}
	case previousRelease:
		return []string{"local", "up", "--dir", local, "--bridge", e2eBridge, "--pod-cidr", e2eProcessCIDR}
	}
	return []string{"local", "up", "--dir", local, "--node", nodeProcess, "--bridge", e2eBridge, "--pod-cidr", e2eProcessCIDR}
}

// upAgain runs `dolphin local up` on the running stack again, as a supervisor would: it
// restarts what died (a killed API server) and leaves the rest alone.
func (s *stack) upAgain() {
	s.t.Helper()
	s.run(s.upArgs...)
}

// restartLocalProcess kills one host process of `dolphin local` (kill -9) and has `dolphin
// local up` start it again, as a supervisor would.
func (s *stack) restartLocalProcess(name string) {
	s.t.Helper()
	before := s.process(name)
	if err := syscall.Kill(before.PID, syscall.SIGKILL); err != nil {
		s.t.Fatalf("killing %s: %v", name, err)
	}
	s.upAgain()
	if s.process(name).PID == before.PID {
		s.t.Fatalf("%s was not restarted", name)
	}
}

// crashOperator crashes the operator that acts and waits until another one acts. On the
// process node the operator is a host process: killed (-9) and started again by `local up`.
// On the real node it runs in the cluster as a Deployment of two pods with leader election:
// the leader's process is killed (-9, no chance to release its Lease) and its pod deleted,
// as when its node dies; the other pod takes the Lease once it expires, and the Deployment
// starts a new standby.
func (s *stack) crashOperator() {
	s.t.Helper()
	if s.node != nodeReal {
		s.restartLocalProcess("operator")
		return
	}
	leader := s.operatorLeader()
	var p corev1.Pod
	if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: operatorNS, Name: leader}, &p); err != nil {
		s.t.Fatalf("the operator's leader pod %s: %v", leader, err)
	}
	id, ok := strings.CutPrefix(containerID(&p, "operator"), "containerd://")
	if !ok {
		s.t.Fatalf("the operator pod %s has no running container", leader)
	}
	for _, pid := range containerPIDs(id) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// The kubelet removes a deleted pod's logs: keep the killed leader's beside the control
	// plane's, so that a run kept with DOLPHIN_E2E_KEEP shows what it did last (the chaos
	// suite's operator-restart kinds).
	podLog := filepath.Join(s.dir, "realnode", "pod-logs", fmt.Sprintf("%s_%s_%s", operatorNS, leader, p.UID), "operator", "0.log")
	if data, err := os.ReadFile(podLog); err == nil {
		_ = os.WriteFile(filepath.Join(s.dir, "logs", "operator-killed-"+leader+".log"), data, 0o644)
	}
	if err := s.c.Delete(s.ctx, &p, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		s.t.Fatalf("deleting the operator pod %s: %v", leader, err)
	}
	began, next := time.Now(), ""
	testenv.Eventually(s.t, 90*time.Second, "another operator pod leads", func() error {
		switch l := s.operatorLeader(); l {
		case leader:
			return fmt.Errorf("%s still holds the Lease", l)
		case "":
			return errors.New("nobody holds the Lease")
		default:
			next = l
			return nil
		}
	})
	s.t.Logf("operator %s crashed; %s leads %.1fs later", leader, next, time.Since(began).Seconds())
}

// operatorLeader is the name of the operator pod holding the leader-election Lease ("" when
// none holds it): the one that acts.
func (s *stack) operatorLeader() string {
	s.t.Helper()
	var lease coordinationv1.Lease
	if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: operatorNS, Name: operator.DefaultLeaderElectionID}, &lease); err != nil {
		if apierrors.IsNotFound(err) {
			return ""
		}
		s.t.Fatal(err)
	}
	// controller-runtime's identity is the pod's host name, "_", a UUID.
	holder, _, _ := strings.Cut(ptr.Deref(lease.Spec.HolderIdentity, ""), "_")
	if lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil ||
		time.Since(lease.Spec.RenewTime.Time) > time.Duration(*lease.Spec.LeaseDurationSeconds)*time.Second {
		return "" // expired: nobody leads
	}
	return holder
}

// metrics scrapes the metrics of the operator that acts. On the real node the endpoint is
// the pod's HTTPS port, authenticated and authorized as Prometheus would be: a ServiceAccount
// bound to dolphin-metrics-reader, with a token from the TokenRequest API.
func (s *stack) metrics() string {
	s.t.Helper()
	if s.node != nodeReal {
		for _, a := range s.process("operator").Args {
			if addr, ok := strings.CutPrefix(a, "--metrics-bind-address="); ok {
				return s.scrape("http://"+addr+"/metrics", "")
			}
		}
		s.t.Fatal("the operator has no metrics address")
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "e2e-metrics"}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-metrics-" + s.ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "dolphin-metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: s.ns, Name: sa.Name}}}
	for _, o := range []client.Object{sa, binding} {
		if err := s.c.Create(s.ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			s.t.Fatal(err)
		}
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}
	if err := s.c.SubResource("token").Create(s.ctx, sa, tr); err != nil {
		s.t.Fatalf("a token for %s: %v", sa.Name, err)
	}
	var out string
	testenv.Eventually(s.t, 60*time.Second, "the leading operator's metrics", func() error {
		leader := s.operatorLeader()
		if leader == "" {
			return errors.New("no operator leads")
		}
		var p corev1.Pod
		if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: operatorNS, Name: leader}, &p); err != nil {
			return err
		}
		b, err := get("https://"+p.Status.PodIP+":8443/metrics", tr.Status.Token)
		out = b
		return err
	})
	return out
}

// scrape GETs url (with a bearer token unless it is "") and fails the test on an error.
func (s *stack) scrape(url, token string) string {
	s.t.Helper()
	b, err := get(url, token)
	if err != nil {
		s.t.Fatal(err)
	}
	return b
}

// get GETs url with a bearer token (none when ""), not checking the server's certificate.
func get(url, token string) (string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the operator's self-signed serving certificate
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b), nil
}

// containerPIDs are the host PIDs of the processes that run in the container with runtime ID
// id (their cgroup names it), its main process first.
func containerPIDs(id string) []int {
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, c := range procs {
		if cg, err := os.ReadFile(c); err == nil && strings.Contains(string(cg), id) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(c)))
			pids = append(pids, pid)
		}
	}
	in := func(pid int) bool { return slices.Contains(pids, pid) }
	slices.SortFunc(pids, func(a, b int) int {
		// The main process is the one whose parent (the shim) is outside the container.
		am, bm := !in(parentPID(a)), !in(parentPID(b))
		switch {
		case am && !bm:
			return -1
		case bm && !am:
			return 1
		}
		return a - b
	})
	return pids
}

// parentPID is a process's parent's PID (0 when it cannot be read).
func parentPID(pid int) int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "PPid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// containerPID is the host PID of a pod's first container's main process (0 while it does not
// run).
func (s *stack) containerPID(pod string) int {
	s.t.Helper()
	if pod == "" {
		return 0
	}
	var p corev1.Pod
	if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: pod}, &p); err != nil || len(p.Status.ContainerStatuses) == 0 {
		return 0
	}
	id := p.Status.ContainerStatuses[0].ContainerID
	if cid, ok := strings.CutPrefix(id, "containerd://"); ok {
		if pids := containerPIDs(cid); len(pids) > 0 {
			return pids[0]
		}
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimPrefix(id, "dolphin-local://"))
	return pid
}

// ifLinkRE reads the peer's interface index from `ip -o link show eth0` in a pod's network
// namespace ("2: eth0@if17: <BROADCAST,...").
var ifLinkRE = regexp.MustCompile(`^\d+: eth0@if(\d+):`)

// podVeth is the host end of a pod's veth pair. The process node names it after its bridge
// and the pod's UID; on the real node the CNI bridge plugin names it at random, so it is the
// host interface whose index the pod's eth0 names as its peer.
func (s *stack) podVeth(pod string) string {
	s.t.Helper()
	var p corev1.Pod
	if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: pod}, &p); err != nil {
		s.t.Fatal(err)
	}
	if s.node != nodeReal {
		sum := sha256.Sum256([]byte(p.UID))
		return e2eBridge + hex.EncodeToString(sum[:])[:15-len(e2eBridge)]
	}
	// Any process of the pod is in its network namespace: the first container's.
	var pid int
	for _, c := range p.Status.ContainerStatuses {
		if id, ok := strings.CutPrefix(c.ContainerID, "containerd://"); ok {
			if pids := containerPIDs(id); len(pids) > 0 {
				pid = pids[0]
				break
			}
		}
	}
	if pid == 0 {
		s.t.Fatalf("no process of pod %s runs: no network namespace to find its link from", pod)
	}
	out, err := exec.Command("nsenter", "--net=/proc/"+strconv.Itoa(pid)+"/ns/net", "ip", "-o", "link", "show", "eth0").CombinedOutput()
	if err != nil {
		s.t.Fatalf("eth0 of pod %s: %v: %s", pod, err, out)
	}
	m := ifLinkRE.FindStringSubmatch(strings.TrimSpace(string(out)))
	if m == nil {
		s.t.Fatalf("eth0 of pod %s: no peer index in %q", pod, out)
	}
	links, _ := filepath.Glob("/sys/class/net/*/ifindex")
	for _, l := range links {
		if b, err := os.ReadFile(l); err == nil && strings.TrimSpace(string(b)) == m[1] {
			return filepath.Base(filepath.Dir(l))
		}
	}
	s.t.Fatalf("no host interface with index %s (the peer of pod %s's eth0)", m[1], pod)
	return ""
}

// setPodLink sets the host end of a pod's veth pair up or down: down, the pod is cut off from
// everything, its server and agent untouched. A pod re-created gets a new veth, up.
func (s *stack) setPodLink(pod string, up bool) {
	s.t.Helper()
	veth := s.podVeth(pod)
	state := map[bool]string{true: "up", false: "down"}[up]
	if out, err := exec.Command("ip", "link", "set", "dev", veth, state).CombinedOutput(); err != nil {
		s.t.Fatalf("ip link set %s %s (pod %s): %v: %s", veth, state, pod, err, out)
	}
}

// claimDir is the host folder of a claim's volume (both nodes' volumes are host folders:
// hostPath PVs on the process node, local PVs on the real node).
func (s *stack) claimDir(claim string) string {
	s.t.Helper()
	var pvc corev1.PersistentVolumeClaim
	if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: claim}, &pvc); err != nil {
		s.t.Fatal(err)
	}
	var pv corev1.PersistentVolume
	if err := s.c.Get(s.ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, &pv); err != nil {
		s.t.Fatal(err)
	}
	switch {
	case pv.Spec.HostPath != nil:
		return pv.Spec.HostPath.Path
	case pv.Spec.Local != nil:
		return pv.Spec.Local.Path
	}
	s.t.Fatalf("volume %s of claim %s is not a host folder", pv.Name, claim)
	return ""
}

// mariadbPatchVersion is a MariaDB 10.11 version other than the default image's tag (10.11)
// whose image the node runs: on the real node the full version make images tagged
// (Debian's), on the process node any (it runs the host's mariadbd for every tag).
func (s *stack) mariadbPatchVersion() string {
	s.t.Helper()
	if s.node != nodeReal {
		return "10.11.14"
	}
	m, err := manifest.Read(os.Getenv("DOLPHIN_IMAGES"))
	if err != nil {
		s.t.Fatal(err)
	}
	for _, img := range m.MariaDB {
		for _, ref := range img.References {
			if v, ok := strings.CutPrefix(ref, "docker.io/library/mariadb:10.11."); ok {
				return "10.11." + v
			}
		}
	}
	s.t.Fatalf("make images built no MariaDB 10.11.x image: %+v", m.MariaDB)
	return ""
}

// forbiddenInOperatorLogs fails the test when the operator's pods logged a request the API
// server refused for lack of permission: on the real node the operator runs under its own
// ServiceAccount with the RBAC of config/rbac, as users install it, and a missing rule shows
// only there (the process node ran it as an administrator). It reads the kubelet's log files of
// the operator's pods that still exist (a crashed pod's logs go with it). Lines logged inside
// one of expected (the operator's chart being uninstalled: its RBAC goes before its pods) are
// not counted.
func forbiddenInOperatorLogs(t *testing.T, local string, expected []refusalWindow) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(local, "realnode", "pod-logs", operatorNS+"_*", "*", "*.log"))
	seen := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			i := strings.Index(line, "is forbidden: User ")
			if i < 0 || refusalExpected(line, expected) {
				continue
			}
			what := line[i:min(len(line), i+220)]
			if !seen[what] {
				seen[what] = true
				at, _, _ := strings.Cut(line, " ")
				t.Errorf("the operator was refused a request (a missing RBAC rule in config/rbac) at %s in %s: ...%s", at, filepath.Base(filepath.Dir(filepath.Dir(f))), what)
			}
		}
	}
}

// refusalWindow is a time in which the operator may be refused requests: its chart's RBAC is
// being removed around running pods.
type refusalWindow struct{ from, to time.Time }

// refusalExpected reports whether a kubelet log line ("<RFC 3339 time> stderr F …") was
// written inside one of windows.
func refusalExpected(line string, windows []refusalWindow) bool {
	ts, _, _ := strings.Cut(line, " ")
	at, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return false
	}
	for _, w := range windows {
		if !at.Before(w.from) && !at.After(w.to) {
			return true
		}
	}
	return false
}

// clientNetnsName is the network namespace of the e2e stack's client on the real node.
const clientNetnsName = "dle2ecl"

// clientSysctls are the kernel's TCP settings of the client namespace: what a client pod sets
// (docs/mysqlcluster.md, "Clients and failover") so that a connection kube-proxy keeps to a
// lost primary ends in seconds instead of minutes or hours. Keepalive probes after 5 s without
// traffic, every second, 3 unanswered: the connection dies ~8 s after the server last answered
// (safe sysctls a pod may set). tcp_retries2=5 gives up a send that is never acknowledged after
// ~13 s instead of ~15 min; tcp_syn_retries=1 gives up a connection attempt after 3 s (SYNs at
// 0 and 1 s) instead of ~2 min — the connect timeout the docs ask applications for. A pod
// needs both allowed as unsafe sysctls, so applications should rather set read and connect
// timeouts in their driver (sysbench has neither). Without a connect timeout, a SYN that
// kube-proxy sent to a pod just deleted stays on that address (connection tracking) through
// every retry: sysbench waited ~2 min in such retries after a user deleted the primary's pod.
var clientSysctls = map[string]string{
	"net.ipv4.tcp_keepalive_time": "5", "net.ipv4.tcp_keepalive_intvl": "1", "net.ipv4.tcp_keepalive_probes": "3",
	"net.ipv4.tcp_retries2": "5", "net.ipv4.tcp_syn_retries": "1",
}

// clientNetns makes a network namespace on the real node's bridge at its client address
// (realnode.Network.ClientAddr, outside the pods' range), routed through the node like a pod,
// with clientSysctls, and returns its name (`ip netns exec <name> …`). It is removed when the
// test ends.
func (s *stack) clientNetns() string {
	s.t.Helper()
	netw, err := realnode.ParseNetwork(e2eRealBridge, e2eRealCIDR)
	if err != nil {
		s.t.Fatal(err)
	}
	ns, hostEnd := clientNetnsName, clientNetnsName+"0"
	_ = exec.Command("ip", "netns", "del", ns).Run() // one a killed test left
	s.t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	bits := strconv.Itoa(netw.PodCIDR.Bits())
	steps := [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "link", "add", hostEnd, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"ip", "link", "set", hostEnd, "master", netw.Bridge, "up"},
		{"ip", "-n", ns, "link", "set", "lo", "up"},
		{"ip", "-n", ns, "addr", "add", netw.ClientAddr().String() + "/" + bits, "dev", "eth0"},
		{"ip", "-n", ns, "link", "set", "eth0", "up"},
		{"ip", "-n", ns, "route", "add", "default", "via", netw.Gateway().String()},
	}
	for _, k := range slices.Sorted(maps.Keys(clientSysctls)) {
		steps = append(steps, []string{"ip", "netns", "exec", ns, "sysctl", "-qw", k + "=" + clientSysctls[k]})
	}
	for _, st := range steps {
		if out, err := exec.Command(st[0], st[1:]...).CombinedOutput(); err != nil {
			s.t.Fatalf("client namespace: %s: %v: %s", strings.Join(st, " "), err, out)
		}
	}
	return ns
}
