package e2e

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// podDeleteDuringFailover hangs the primary (SIGSTOP) and, the moment the failover shows —
// status.topology.failoverInProgress written, or the primary already moved — deletes a pod
// the failover depends on: a replica while the engine fences and chooses (the first replica
// by name: the candidate or the one that must acknowledge the candidate's writes), or the
// promoted replica itself when the promotion finished before any status showed the failover.
// Dolphin must end with one writable primary and every acknowledged write. When the promoted
// replica goes before the other one fetched what it alone received from the hung primary, it
// may hold writes that primary acknowledged: Dolphin waits for its pod to come back (docs/design/0039),
// 10–20 s on a busy machine, and sysbench's bound follows the checker's (sysbenchLimit).
//
// Every other round waits for the promotion instead, whatever status showed before: which of
// the two stages a round meets otherwise depends on the machine's speed (an idle one almost
// always shows the failover in progress), and the promoted replica's deletion — a pod-stop
// switchover away from a primary a few hundred milliseconds old, while the first lost primary
// restarts — is the path that once sent readers to that restarted primary.
func podDeleteDuringFailover(s *stack, key client.ObjectKey) func() {
	old := s.currentPrimary(key)
	waitForPromotion := podDeleteDuringFailoverRounds.Add(1)%2 == 0
	pid := signalServer(s, old, syscall.SIGSTOP)
	victim, stage := "", ""
	for deadline := time.Now().Add(60 * time.Second); victim == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var c dolphinv1.MySQLCluster
		if err := s.c.Get(s.ctx, key, &c); err != nil || c.Status.Topology == nil {
			continue
		}
		switch t := c.Status.Topology; {
		case t.FailoverInProgress != nil && !waitForPromotion:
			for _, p := range s.clusterPods(key.Name) {
				if p.Name != old && (victim == "" || p.Name < victim) {
					victim = p.Name
				}
			}
			stage = fmt.Sprintf("failover in progress (fenced: %v)", t.FailoverInProgress.Fenced)
		case t.Primary != "" && t.Primary != old:
			victim, stage = t.Primary, "just promoted"
		}
	}
	if victim == "" {
		s.t.Fatalf("pod-delete-during-failover: no failover away from the hung %s within 60 s", old)
	}
	pod := &corev1.Pod{}
	pod.Namespace, pod.Name = key.Namespace, victim
	if err := s.c.Delete(s.ctx, pod); err != nil {
		s.t.Fatalf("deleting pod %s: %v", victim, err)
	}
	s.t.Logf("pod-delete-during-failover: %s hung, pod %s deleted (%s)", old, victim, stage)
	return func() { s.killAfterFailover(key, old, pid) }
}

// podDeleteDuringFailoverRounds counts podDeleteDuringFailover's rounds (which stage to meet).
var podDeleteDuringFailoverRounds atomic.Int64

// replicasLostFor is how long replicasLostThenPrimary keeps both replicas cut off: longer than
// the 30 s after which a primary with durability Preferred acknowledges writes alone.
const replicasLostFor = 35 * time.Second

// replicasLostThenPrimary cuts both replicas off (their links down) for replicasLostFor, then
// loses the primary (its link down and its server hung) and brings the replicas back: the
// sequence that lost 21,797 acknowledged writes when the primary fell back to asynchronous
// replication after 30 s (issue 30). With durability Required (the chaos cluster's default)
// the primary acknowledges nothing meanwhile, so the replica promoted holds every
// acknowledged write; the old primary's unacknowledged tail is rolled back when it restarts.
func replicasLostThenPrimary(s *stack, key client.ObjectKey) func() {
	old := s.currentPrimary(key)
	var links []string
	for _, p := range s.clusterPods(key.Name) {
		if p.Name != old {
			links = append(links, s.podVeth(p.Name))
		}
	}
	setLinks := func(state string, veths ...string) {
		for _, v := range veths {
			if out, err := exec.Command("ip", "link", "set", "dev", v, state).CombinedOutput(); err != nil {
				s.t.Fatalf("replicas-lost-then-primary: ip link set %s %s: %v: %s", v, state, err, out)
			}
		}
	}
	setLinks("down", links...)
	time.Sleep(replicasLostFor)
	primaryLink := s.podVeth(old)
	setLinks("down", primaryLink)
	pid := signalServer(s, old, syscall.SIGSTOP)
	setLinks("up", links...)
	s.t.Logf("replicas-lost-then-primary: replicas of %s cut off for %s, then %s cut off and hung", old, replicasLostFor, old)
	return func() {
		s.killAfterFailover(key, old, pid)
		_ = exec.Command("ip", "link", "set", "dev", primaryLink, "up").Run() // gone with a re-created pod
	}
}

// diskFullReplica fills the data volume of a replica (the first by name) to the last byte
// with fallocate for 8 s, then frees it. The chaos cluster's volumes are real file systems of
// their claim's size (localnode.SizedStorageClass), so the server meets ENOSPC as on a full
// disk. The primary must keep acknowledging (the other replica acknowledges), and the full
// replica must catch up on its own once space is back.
func diskFullReplica(s *stack, key client.ObjectKey) func() {
	primary := s.currentPrimary(key)
	replica := ""
	for _, p := range s.clusterPods(key.Name) {
		if p.Name != primary && (replica == "" || p.Name < replica) {
			replica = p.Name
		}
	}
	dir := s.claimDir("data-" + replica)
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		s.t.Fatalf("disk-full-replica: statfs %s: %v", dir, err)
	}
	// fallocate all but 64 MiB (the file's own extent tree needs room), then write the rest
	// until the file system refuses.
	fill, rest := filepath.Join(dir, "chaos-disk-full"), filepath.Join(dir, "chaos-disk-full-rest")
	free := int64(st.Bavail)*st.Bsize - 64<<20
	if out, err := exec.Command("fallocate", "-l", strconv.FormatInt(free, 10), fill).CombinedOutput(); err != nil {
		s.t.Fatalf("disk-full-replica: fallocate %d bytes in %s: %v: %s", free, dir, err, out)
	}
	if err := fillUp(rest); !errors.Is(err, syscall.ENOSPC) {
		s.t.Fatalf("disk-full-replica: writing %s until the volume is full: %v", rest, err)
	}
	s.t.Logf("disk-full-replica: %s's volume full (%d MiB)", replica, free>>20+64)
	return func() {
		time.Sleep(8 * time.Second)
		if err := errors.Join(os.Remove(fill), os.Remove(rest)); err != nil {
			s.t.Errorf("disk-full-replica: freeing the volume: %v", err)
		}
	}
}

// fillUp writes zeros to a new file at path until a write fails, and returns that error.
func fillUp(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			return err
		}
	}
}

// waitWatchersBack waits until the control plane's watchers are back after a kube-apiserver
// restart: a new Service for the primary's pod gets its EndpointSlice (the controller
// manager watches again) and the Service proxy (kube-proxy, or the process node's) forwards
// it to the server (it watches again). Until then a change of primary would not reach clients: client-go retries a
// broken watch with a backoff that grows to 30 s, so a failover shortly after an API server
// outage waits for it — a finding of the first runs (operator-restart-switchover right after
// apiserver-restart: 13–18 s outages). The next fault kind starts once it is over.
func (s *stack) waitWatchersBack(key client.ObjectKey) {
	began := time.Now()
	primary := s.currentPrimary(key)
	svc := &corev1.Service{}
	svc.Namespace, svc.Name = s.ns, fmt.Sprintf("canary-%d", began.UnixNano()%1e6)
	svc.Labels = map[string]string{"app.kubernetes.io/managed-by": "dolphin"}
	svc.Spec.Selector = map[string]string{"statefulset.kubernetes.io/pod-name": primary}
	svc.Spec.Ports = []corev1.ServicePort{{Name: "mysql", Port: 3306, TargetPort: intstr.FromInt32(3306)}}
	testenv.Eventually(s.t, 120*time.Second, "canary Service created", func() error {
		if err := s.c.Create(s.ctx, svc); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	})
	defer func() { _ = s.c.Delete(s.ctx, svc) }()
	addr := s.serviceAddrWithin(svc.Name, 120*time.Second)
	testenv.Eventually(s.t, 120*time.Second, "the canary Service forwarded to "+primary, func() error {
		return mysqlGreeting(addr)
	})
	s.t.Logf("apiserver-restart: watchers back %.1fs after the API server", time.Since(began).Seconds())
}

// mysqlGreeting connects to addr and reads the first bytes of a server greeting.
func mysqlGreeting(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	b := make([]byte, 5)
	if _, err := io.ReadFull(c, b); err != nil {
		return fmt.Errorf("no greeting through %s: %w", addr, err)
	}
	if b[4] != 10 { // protocol version 10
		return fmt.Errorf("not a MySQL greeting through %s: % x", addr, b)
	}
	return nil
}
