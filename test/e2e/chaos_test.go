package e2e

import (
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/chaos"
	"github.com/dolphin-operator/dolphin/internal/controller"
	"github.com/dolphin-operator/dolphin/internal/localnode"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// chaosUser is the checker's application account (MariaDB's read_only stops it).
const chaosUser, chaosPassword = "chaos", "Ch4os-Checker-Secret-19"

// chaosFault is one kind of fault the suite injects into the primary of a running cluster.
// inject starts it and returns what ends it; heal runs once the client-view outage is measured.
type chaosFault struct {
	name   string
	inject func(s *stack, key client.ObjectKey) (heal func())
}

// chaosStalls are the write stalls fault kinds cause on purpose before the primary is lost;
// the client-view limit (sysbench committing again) starts after it.
var chaosStalls = map[string]time.Duration{"replicas-lost-then-primary": replicasLostFor}

// sysbenchBehindChecker is how long after the checker's clients sysbench may commit again: its
// 3 s connect timeout (clientSysctls), a reconnect and a transaction on a busy machine.
const sysbenchBehindChecker = 10 * time.Second

// sysbenchLimit is how long after a fault of the kind sysbench may take to commit again: 30 s
// plus the kind's designed stall, or sysbenchBehindChecker after the checker's clients came
// back (checkerBack after the fault) when Dolphin itself needed longer — a double fault that
// takes the promoted primary's pod waits for that pod to restart (it alone may hold writes
// the lost primary acknowledged, docs/design/0039). The checker's own outage is bounded and
// reported apart; this limit catches a client left stuck after Dolphin recovered.
func sysbenchLimit(kind string, checkerBack time.Duration) time.Duration {
	return max(30*time.Second+chaosStalls[kind], checkerBack+sysbenchBehindChecker)
}

// chaosFaults are the fault kinds, each injected with the real tool.
var chaosFaults = []chaosFault{
	{"kill9", func(s *stack, key client.ObjectKey) func() {
		signalServer(s, s.currentPrimary(key), syscall.SIGKILL)
		return func() {}
	}},
	{"sigstop", func(s *stack, key client.ObjectKey) func() {
		old := s.currentPrimary(key)
		pid := signalServer(s, old, syscall.SIGSTOP)
		return func() { s.killAfterFailover(key, old, pid) }
	}},
	{"partition", func(s *stack, key client.ObjectKey) func() {
		old := s.currentPrimary(key)
		veth := s.podVeth(old)
		if out, err := exec.Command("ip", "link", "set", "dev", veth, "down").CombinedOutput(); err != nil {
			s.t.Fatalf("partition %s: %v: %s", old, err, out)
		}
		return func() {
			s.waitPrimaryNot(key, old)
			time.Sleep(5 * time.Second) // the partition outlasts the failover
			// Dolphin deleted the lost primary's pod, or will once the node hears it: a
			// re-created pod has a new link, and this one may be gone.
			_ = exec.Command("ip", "link", "set", "dev", veth, "up").Run()
		}
	}},
	{"netem-delay", func(s *stack, key client.ObjectKey) func() {
		veth := s.podVeth(s.currentPrimary(key))
		if out, err := exec.Command("tc", "qdisc", "add", "dev", veth, "root", "netem", "delay", "50ms", "10ms").CombinedOutput(); err != nil {
			s.t.Fatalf("tc netem on %s: %v: %s", veth, err, out)
		}
		return func() {
			time.Sleep(8 * time.Second)
			_ = exec.Command("tc", "qdisc", "del", "dev", veth, "root").Run()
		}
	}},
	{"packet-loss", func(s *stack, key client.ObjectKey) func() {
		// 30% of the packets the primary's pod sends dropped, with nftables' random numbers
		// on the ingress hook of its veth (works where tc netem is missing).
		veth := s.podVeth(s.currentPrimary(key))
		for _, args := range [][]string{
			{"add", "table", "netdev", "dolphin_chaos"},
			{"add", "chain", "netdev", "dolphin_chaos", "loss", "{ type filter hook ingress device \"" + veth + "\" priority 0 ; }"},
			{"add", "rule", "netdev", "dolphin_chaos", "loss", "numgen", "random", "mod", "100", "<", "30", "drop"},
		} {
			if out, err := exec.Command("nft", args...).CombinedOutput(); err != nil {
				s.t.Fatalf("nft %s: %v: %s", strings.Join(args, " "), err, out)
			}
		}
		return func() {
			time.Sleep(8 * time.Second)
			_ = exec.Command("nft", "delete", "table", "netdev", "dolphin_chaos").Run()
		}
	}},
	{"operator-restart-failover", func(s *stack, key client.ObjectKey) func() {
		old := s.currentPrimary(key)
		pid := signalServer(s, old, syscall.SIGSTOP)
		time.Sleep(1500 * time.Millisecond) // detection under way
		s.crashOperator()
		return func() { s.killAfterFailover(key, old, pid) }
	}},
	{"operator-restart-switchover", func(s *stack, key client.ObjectKey) func() {
		old := s.currentPrimary(key)
		s.patchCluster(key, func(c *dolphinv1.MySQLCluster) {
			if c.Annotations == nil {
				c.Annotations = map[string]string{}
			}
			c.Annotations[controller.SwitchoverAnnotation] = "auto"
		})
		time.Sleep(300 * time.Millisecond) // the operator is fencing or promoting
		s.crashOperator()
		return func() {
			// Not fatal: a switchover lost in the restart is a finding the suite reports
			// (with the cluster's state), and the next rounds still run.
			for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
				if p := s.currentPrimary(key); p != old && p != "" {
					return
				}
				if time.Now().After(deadline) {
					var c dolphinv1.MySQLCluster
					_ = s.c.Get(s.ctx, key, &c)
					var events corev1.EventList
					_ = s.c.List(s.ctx, &events, client.InNamespace(key.Namespace))
					var said []string
					for _, e := range events.Items {
						if e.InvolvedObject.Name == key.Name && strings.HasPrefix(e.Reason, "Switchover") {
							said = append(said, e.Reason+": "+e.Message)
						}
					}
					s.t.Errorf("operator-restart-switchover: %s still primary 90 s after the request; annotations %v, topology %+v, conditions %+v, switchover events %q",
						old, c.Annotations, c.Status.Topology, c.Status.Conditions, said)
					return
				}
			}
		}
	}},
	{"pod-delete-during-failover", podDeleteDuringFailover},
	{"disk-full-replica", diskFullReplica},
	{"replicas-lost-then-primary", replicasLostThenPrimary},
	{"apiserver-restart", func(s *stack, key client.ObjectKey) func() {
		s.restartLocalProcess("kube-apiserver")
		return func() { s.waitWatchersBack(key) }
	}},
}

// knownFailingChaosFaults are fault kinds the suite has and Dolphin does not survive yet; they
// run only when DOLPHIN_CHAOS_FAULTS names them.
var knownFailingChaosFaults = map[string]string{
	// Empty: apiserver-restart left it once `dolphin local up` restarted only the dead
	// component instead of the node agent and its Service proxy (it had dropped every client
	// connection); every kind then ran 20 rounds clean in one run (2026-12-04, README).
}

// shortChaosFaults are the kinds of the short version, which fits in `make test`: the three
// ways a primary is lost, and the two kinds whose findings were fixed last (an operator
// restarted in a switchover; a replica deleted during a failover — docs/design/0036, 0039).
var shortChaosFaults = []string{"kill9", "sigstop", "partition", "operator-restart-switchover", "pod-delete-during-failover"}

// TestChaos injects every fault kind into the primary of a 3-instance cluster on `dolphin
// local`, DOLPHIN_CHAOS_ROUNDS rounds each (`make chaos`), while the checker's clients (internal/chaos) write and read through the primary
// Service and sysbench runs beside them. It prints one line per fault kind and fails on a lost
// acknowledged write, a split-brain window, a stale read, sysbench not committing again within
// 30 s, or a cluster not healthy again within 4 minutes. Without DOLPHIN_CHAOS_ROUNDS it is
// the short version `make test` runs: one round of shortChaosFaults.
func TestChaos(t *testing.T) {
	rounds := 1
	kinds := slices.DeleteFunc(slices.Clone(chaosFaults), func(f chaosFault) bool { return knownFailingChaosFaults[f.name] != "" })
	if n, err := strconv.Atoi(os.Getenv("DOLPHIN_CHAOS_ROUNDS")); err == nil && n > 0 {
		rounds = n
	} else {
		kinds = slices.DeleteFunc(kinds, func(f chaosFault) bool { return !slices.Contains(shortChaosFaults, f.name) })
	}
	if only := os.Getenv("DOLPHIN_CHAOS_FAULTS"); only != "" {
		kinds = slices.DeleteFunc(slices.Clone(chaosFaults), func(f chaosFault) bool {
			return !slices.Contains(strings.Split(only, ","), f.name)
		})
	}
	s := upStack(t)
	if !netemAvailable() {
		// This kernel was built without sch_netem (tc answers "Specified qdisc kind is
		// unknown"): no delay can be injected; packet-loss (nftables) still runs.
		t.Log("chaos fault=netem-delay skipped: the kernel has no sch_netem")
		kinds = slices.DeleteFunc(kinds, func(f chaosFault) bool { return f.name == "netem-delay" })
	}
	cluster := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "chaos"},
		Spec: dolphinv1.MySQLClusterSpec{Instances: 3, Storage: dolphinv1.StorageSpec{
			// Real file systems of the claim's size (sparse images): a volume fills up like a
			// disk, for disk-full-replica; 20 GiB holds the binary logs of long runs.
			Size: ptr.To(resource.MustParse("20Gi")), StorageClassName: ptr.To(localnode.SizedStorageClass),
			DeletePolicy: dolphinv1.VolumeDelete},
			// Binary logs older than an hour are purged: a run of hundreds of rounds (a day)
			// writes more than the volumes hold.
			MySQLConfig: map[string]dolphinv1.MySQLConfigValue{"binlog_expire_logs_seconds": "3600"}}}
	// DOLPHIN_CHAOS_DETECTION_INTERVAL (for example 500ms) sets the cluster's
	// failover.detection.interval, to measure what a shorter one buys (docs/mysqlcluster.md).
	detection := "default"
	if iv := os.Getenv("DOLPHIN_CHAOS_DETECTION_INTERVAL"); iv != "" {
		d, err := time.ParseDuration(iv)
		if err != nil {
			t.Fatalf("DOLPHIN_CHAOS_DETECTION_INTERVAL: %v", err)
		}
		cluster.Spec.Failover.Detection.Interval = &metav1.Duration{Duration: d}
		detection = d.String()
	}
	if err := s.c.Create(s.ctx, cluster); err != nil {
		t.Fatal(err)
	}
	t.Logf("chaos cluster: failover.detection.interval %s", detection)
	key := client.ObjectKeyFromObject(cluster)
	testenv.Eventually(t, 180*time.Second, "cluster Ready", func() error { return s.chaosHealthy(key) })
	s.primaryWithTable("chaos") // declares database app and the application account
	s.declareAccount("chaos", chaosUser, chaosPassword, "SELECT", "INSERT", "UPDATE", "CREATE")
	// The checker connects as docs/mysqlcluster.md ("Clients and failover") recommends: a 1 s connect
	// timeout, so a connection sent to a lost primary gives up and retries at the new one.
	db := s.sqlDBConnectTimeout(chaosUser, chaosPassword, s.serviceAddr("chaos-primary"), time.Second)
	for _, q := range chaos.Schema("app") {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s.declareSysbenchAccount("chaos")
	sb := s.startSysbench("chaos", 4)
	timeline := s.watchPrimaryTimeline("chaos")
	witness := &staleWitness{timeline: timeline, service: s.serviceAddr("chaos-primary")}
	defer func() {
		// After the checker stopped (deferred below, so it runs first), and once the witness
		// had its second to gather what it describes.
		if w := witness.String(); w != "" {
			time.Sleep(time.Second)
			t.Logf("what carried the first stale reads:\n%s", witness.String())
		}
	}()
	checker := chaos.Start(db, chaos.Options{Database: "app", OnStaleRead: witness.observe})
	defer checker.Stop()

	outages := map[string][]time.Duration{}
	errant := map[string]int{}
	// consented counts the former primaries held for consent (ErrantFormerPrimary) that the
	// run approved re-cloning, as a person would: Dolphin keeps a copy first.
	consented := map[string]int{}
	completed, faults := false, 0
	defer func() {
		// A run stopped by a failed round still gets the checker's verdict on the faults it
		// injected: lost writes, split brain and stale reads are what such a run is for.
		if !completed && faults > 0 {
			chaosVerdict(t, s, checker, kinds, outages, errant, fmt.Sprintf(" (partial: the run stopped after %d faults)", faults))
		}
	}()
	for r := 1; r <= rounds; r++ {
		for _, f := range kinds {
			testenv.Eventually(t, 240*time.Second, "healthy before "+f.name, func() error { return s.chaosHealthy(key) })
			time.Sleep(time.Second) // steady load before the fault
			old := s.currentPrimary(key)
			oldIPs := s.podIPs(old)
			lag := s.replicaLag(key)
			at := time.Now()
			timeline.arm(old, oldIPs, at)
			checker.Mark(f.name, at)
			faults++
			heal := f.inject(s, key)
			testenv.Eventually(t, 120*time.Second, f.name+": a write sent after the fault acknowledged", func() error {
				if _, ok := checker.FirstAckOfWriteSentAfter(at); !ok {
					return fmt.Errorf("not yet (%v)", checker.LastError())
				}
				return nil
			})
			heal()
			checkerBack, _ := checker.FirstAckOfWriteSentAfter(at)
			limit := sysbenchLimit(f.name, checkerBack.Sub(at))
			rec, ok := sb.recovery(at, limit)
			if !ok {
				t.Errorf("round %d (%s): sysbench did not commit again within %.1f s of the fault (the checker's clients were back after %.2fs, their writers' longest gap %.2fs):\n%s\n%s\n%s",
					r, f.name, limit.Seconds(), checkerBack.Sub(at).Seconds(), checker.Outage(at, time.Now()).Seconds(),
					sb.lastLines(15), s.primaryServiceState("chaos"), sb.sockets())
			}
			sawErrant := false
			testenv.Eventually(t, 240*time.Second, f.name+": healthy again", func() error {
				var c dolphinv1.MySQLCluster
				if err := s.c.Get(s.ctx, key, &c); err == nil && c.Status.Topology != nil && len(c.Status.Topology.ErrantInstances) > 0 {
					sawErrant = true
				}
				if held := heldFormerPrimary(&c); held != "" && c.Annotations[controller.RecloneApprovedAnnotation] != held {
					t.Logf("round %d (%s): %s held as an errant former primary; approving its re-clone (a copy is kept first)", r, f.name, held)
					s.patchCluster(key, func(c *dolphinv1.MySQLCluster) {
						if c.Annotations == nil {
							c.Annotations = map[string]string{}
						}
						c.Annotations[controller.RecloneApprovedAnnotation] = held
					})
					consented[f.name]++
				}
				return s.chaosHealthy(key)
			})
			if sawErrant {
				errant[f.name]++
			}
			// The outage: the longest stretch without an acknowledged write from the fault
			// until the cluster is healthy again.
			gapFrom, gapTo := checker.OutageWindow(at, time.Now())
			outage := gapTo.Sub(gapFrom)
			outages[f.name] = append(outages[f.name], outage)
			// The timeline says how much of a failover's outage came after the new primary's
			// label (the EndpointSlice controller, the proxy, the clients' reconnects).
			t.Logf("round %d: %s %s -> %s, client-view outage %.2fs (+%.2fs..+%.2fs; %s; replica lag before: %s), sysbench committing again after %.0fs, errant on the way: %v (fault at %s)",
				r, f.name, old, s.currentPrimary(key), outage.Seconds(), gapFrom.Sub(at).Seconds(), gapTo.Sub(at).Seconds(),
				timeline, lag, rec.Seconds(), sawErrant, at.UTC().Format("15:04:05.000"))
		}
	}
	completed = true
	if slow := slowChaosRounds(outages); len(slow) > 0 {
		// Rounds far slower than the rest of their kind: keep the logs (the round lines say
		// when each fault was injected) so they can be explained.
		t.Logf("slow rounds, logs kept with DOLPHIN_E2E_KEEP: %s", strings.Join(slow, "; "))
		s.keepLogs = true
	}
	note := ""
	if len(consented) > 0 {
		note = fmt.Sprintf(" former_primaries_approved=%v", consented)
	}
	writes, reads, incs := chaosVerdict(t, s, checker, kinds, outages, errant, note)
	if writes < 100*faults || reads == 0 || incs == 0 {
		t.Errorf("too little load to judge: %d writes, %d reads, %d increments over %d faults", writes, reads, incs, faults)
	}
}

// chaosVerdict asks the checker for its verdict on everything the run did, logs one line per
// fault kind and the summary (note is appended to it), writes them to DOLPHIN_CHAOS_OUT, and
// fails the test on a lost write, a split-brain window or a stale read. It returns the
// checker's write count. It never stops the test itself (it also runs after a failed round).
func chaosVerdict(t *testing.T, s *stack, checker *chaos.Checker, kinds []chaosFault, outages map[string][]time.Duration,
	errant map[string]int, note string) (writes, reads, incs int) {
	var v chaos.Verdict
	var err error
	dbs := map[string]*sql.DB{}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(time.Second) {
		// Looked up each time, without stopping the test: the Service may have no ready
		// endpoint yet after a failed round.
		var addr string
		if addr, err = s.lookupServiceAddr("chaos-primary", max(time.Second, min(10*time.Second, time.Until(deadline)))); err == nil {
			if dbs[addr] == nil {
				dbs[addr] = s.sqlDBAs(chaosUser, chaosPassword, addr)
			}
			if v, err = checker.Finish(s.ctx, dbs[addr]); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Errorf("the checker's rows could not be read through the primary Service: %v", err)
			return
		}
	}
	lostBy, splitBy, staleBy := v.Lost, v.SplitBrain, v.StaleReads
	var lines []string
	failed := false
	for name, why := range knownFailingChaosFaults {
		if !slices.ContainsFunc(kinds, func(f chaosFault) bool { return f.name == name }) {
			t.Logf("chaos fault=%s not run (known failing: %s)", name, why)
		}
	}
	for _, f := range kinds {
		line := chaos.Line(f.name, outages[f.name], lostBy[f.name], splitBy[f.name], staleBy[f.name])
		lines = append(lines, line)
		failed = failed || lostBy[f.name] > 0 || splitBy[f.name] > 0 || staleBy[f.name] > 0
	}
	writes, reads, incs = checker.Counts()
	summary := fmt.Sprintf("chaos writes=%d reads=%d increments=%d lost_before_faults=%d errant_on_the_way=%v%s", writes, reads, incs, lostBy[""], errant, note)
	lines = append(lines, summary)
	for _, l := range lines {
		t.Log(l)
	}
	if out := os.Getenv("DOLPHIN_CHAOS_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Errorf("writing %s: %v", out, err)
		}
	}
	if failed || lostBy[""] > 0 || staleBy[""] > 0 || splitBy[""] > 0 {
		t.Errorf("the checker found lost writes, split brain or stale reads: lost %v, split brain %v, stale reads %v",
			v.Lost, v.SplitBrain, v.StaleReads)
		for _, r := range v.LostRuns {
			t.Logf("lost: %s", r)
		}
		shown := map[string]int{}
		for _, r := range checker.StaleReads() {
			if shown[r.Fault]++; shown[r.Fault] <= 3 {
				t.Logf("stale read at %s in %s: read %d from server_id %d, %d was known committed (session %s)", r.At.UTC().Format("15:04:05.000"), r.Fault, r.Got, r.ServerID, r.Want, r.Client)
			}
		}
	}
	return writes, reads, incs
}

// netemAvailable reports whether tc can attach a netem qdisc (to a throwaway dummy device).
func netemAvailable() bool {
	const dev = "dlchaosprobe"
	if exec.Command("ip", "link", "add", dev, "type", "dummy").Run() != nil {
		return false
	}
	defer exec.Command("ip", "link", "del", dev).Run()
	return exec.Command("tc", "qdisc", "add", "dev", dev, "root", "netem", "delay", "1ms").Run() == nil
}

// staleWitness keeps, for the first stale reads of a run, what carried them: the session's
// address, the host's connection-tracking entries towards the primary Service (kube-proxy
// DNATs each connection once, at its first packet) and the primary Service's selector and
// endpoints over the seconds before. A stale read then tells whether the Service, the proxy
// or a reused connection-tracking entry sent the client to a server that was not primary.
type staleWitness struct {
	timeline *primaryTimeline
	service  string // the primary Service's ClusterIP:port
	mu       sync.Mutex
	notes    []string
}

// maxStaleWitnessed bounds how many stale reads are described.
const maxStaleWitnessed = 4

// observe is the checker's OnStaleRead.
func (w *staleWitness) observe(r chaos.StaleRead) {
	w.mu.Lock()
	if len(w.notes) >= maxStaleWitnessed {
		w.mu.Unlock()
		return
	}
	w.notes = append(w.notes, "") // reserved: the picture is taken outside the lock
	i := len(w.notes) - 1
	w.mu.Unlock()
	tracked := conntrackTowards(w.service, r.Client)
	time.Sleep(time.Second) // the watches deliver what happened up to the read
	note := fmt.Sprintf("stale read at %s: read %d from server_id %d, %d known committed, session %s\nconnection tracking towards %s (reply source, state: entries):\n%sprimary Service before it:\n%s",
		r.At.UTC().Format("15:04:05.000"), r.Got, r.ServerID, r.Want, r.Client, w.service, tracked,
		w.timeline.History(r.At.Add(-20*time.Second), r.At.Add(time.Second)))
	w.mu.Lock()
	w.notes[i] = note
	w.mu.Unlock()
}

// String is every description taken so far ("" when there was no stale read).
func (w *staleWitness) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.notes, "\n")
}

// conntrackTowards describes the host's connection-tracking entries whose original destination
// is addr (ip:port), from /proc/net/nf_conntrack: how many per endpoint (the reply's source)
// and state, and in full those of the session whose address (as the server saw it) is client.
// It says why when the table cannot be read.
func conntrackTowards(addr, client string) string {
	raw, err := os.ReadFile("/proc/net/nf_conntrack")
	if err != nil {
		return err.Error()
	}
	return describeConntrack(string(raw), addr, client)
}

// describeConntrack is conntrackTowards on the table's text.
func describeConntrack(raw, addr, client string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err.Error()
	}
	_, clientPort, _ := net.SplitHostPort(client)
	counts := map[string]int{}
	var session []string
	for _, line := range strings.Split(raw, "\n") {
		f := strings.Fields(line)
		// The first dst= and dport= are the original direction's, the second src= the reply's.
		if !slices.Contains(f, "dst="+host) || firstField(f, "dport=", 0) != "dport="+port {
			continue
		}
		state := "-"
		if len(f) > 5 && !strings.Contains(f[5], "=") {
			state = f[5]
		}
		counts[strings.TrimPrefix(firstField(f, "src=", 1), "src=")+" "+state]++
		if clientPort != "" && (slices.Contains(f, "sport="+clientPort) || slices.Contains(f, "dport="+clientPort)) {
			session = append(session, strings.Join(f, " "))
		}
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		fmt.Fprintf(&b, "  %s: %d\n", k, counts[k])
	}
	for _, l := range session {
		fmt.Fprintf(&b, "  session's: %s\n", l)
	}
	return b.String()
}

// firstField is the field with prefix after skip earlier ones, or "".
func firstField(fields []string, prefix string, skip int) string {
	for _, f := range fields {
		if strings.HasPrefix(f, prefix) {
			if skip == 0 {
				return f
			}
			skip--
		}
	}
	return ""
}

// primaryServiceState describes the pods' roles and the primary Service's endpoints (for a
// failure message).
func (s *stack) primaryServiceState(cluster string) string {
	var b strings.Builder
	for _, p := range s.clusterPods(cluster) {
		fmt.Fprintf(&b, "pod %s ip %s labels %v deleting %v\n", p.Name, p.Status.PodIP, p.Labels, p.DeletionTimestamp != nil)
	}
	var slices_ discoveryv1.EndpointSliceList
	if err := s.c.List(s.ctx, &slices_, client.InNamespace(s.ns), client.MatchingLabels{discoveryv1.LabelServiceName: cluster + "-primary"}); err == nil {
		for _, sl := range slices_.Items {
			for _, e := range sl.Endpoints {
				fmt.Fprintf(&b, "endpoint %v ready %v\n", e.Addresses, e.Conditions.Ready != nil && *e.Conditions.Ready)
			}
		}
	}
	return b.String()
}

// chaosHealthy is nil when the cluster is Ready with a Healthy topology and no errant instance.
func (s *stack) chaosHealthy(key client.ObjectKey) error {
	var c dolphinv1.MySQLCluster
	if err := s.c.Get(s.ctx, key, &c); err != nil {
		return err
	}
	if !meta.IsStatusConditionTrue(c.Status.Conditions, "Ready") || c.Status.Topology == nil ||
		len(c.Status.Topology.ErrantInstances) > 0 || c.Status.Topology.State != "Healthy" {
		return fmt.Errorf("phase %s topology %+v", c.Status.Phase, c.Status.Topology)
	}
	return nil
}

// signalServer sends sig to the server of pod and returns its PID.
func signalServer(s *stack, pod string, sig syscall.Signal) int {
	s.t.Helper()
	pid := s.serverPID(pod)
	if err := syscall.Kill(pid, sig); err != nil {
		s.t.Fatalf("%v to %s (pid %d): %v", sig, pod, pid, err)
	}
	return pid
}

// waitPrimaryNot waits until another instance than old is the primary.
func (s *stack) waitPrimaryNot(key client.ObjectKey, old string) {
	s.t.Helper()
	testenv.Eventually(s.t, 90*time.Second, "a primary other than "+old, func() error {
		if p := s.currentPrimary(key); p == old || p == "" {
			return fmt.Errorf("primary %q", p)
		}
		return nil
	})
}

// killAfterFailover waits for the failover away from a hung primary, then kills its server
// (Dolphin may have deleted the pod, and so the process, already). A failover that must not
// promote any candidate left (the one that received the most was lost with what it had not
// applied) restarts the hung primary instead, which stays the primary: its server gone is
// the end of the fault too.
func (s *stack) killAfterFailover(key client.ObjectKey, old string, pid int) {
	s.t.Helper()
	testenv.Eventually(s.t, 90*time.Second, "a primary other than "+old+", or "+old+"'s hung server restarted", func() error {
		p := s.currentPrimary(key)
		if p != old && p != "" {
			return nil
		}
		if err := syscall.Kill(pid, 0); p == old && errors.Is(err, syscall.ESRCH) {
			s.t.Logf("%s's hung server was restarted by Dolphin (no candidate held every write it had acknowledged)", old)
			return nil
		}
		return fmt.Errorf("primary %q, hung server %d still there", s.currentPrimary(key), pid)
	})
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		s.t.Errorf("killing the hung server of %s: %v", old, err)
	}
}

// declareAccount declares an application account on database app with the given privileges
// and waits until Dolphin reports it applied.
func (s *stack) declareAccount(cluster, user, password string, privileges ...dolphinv1.Privilege) {
	s.t.Helper()
	pw := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: cluster + "-" + user + "-password"},
		StringData: map[string]string{"password": password}}
	u := &dolphinv1.MySQLUser{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: cluster + "-" + user},
		Spec: dolphinv1.MySQLUserSpec{Cluster: cluster, Name: user,
			PasswordSecretKeyRef: &dolphinv1.SecretKeyReference{Name: pw.Name},
			Grants:               []dolphinv1.Grant{{Privileges: privileges, Database: "app"}}}}
	for _, o := range []client.Object{pw, u} {
		if err := s.c.Create(s.ctx, o); err != nil {
			s.t.Fatal(err)
		}
	}
	testenv.Eventually(s.t, 60*time.Second, "MySQLUser "+user+" of "+cluster+" applied", func() error {
		if err := s.c.Get(s.ctx, client.ObjectKeyFromObject(u), u); err != nil {
			return err
		}
		if r := meta.FindStatusCondition(u.Status.Conditions, "Ready"); r == nil || r.Status != metav1.ConditionTrue {
			return fmt.Errorf("not applied: %+v", r)
		}
		return nil
	})
}

// slowChaosRounds names the rounds whose outage was over twice their kind's median and over
// 6 s (the 2026-12-04 run had three: sigstop 14 s and 17 s against a median of 4.3 s).
func slowChaosRounds(outages map[string][]time.Duration) []string {
	var slow []string
	for _, name := range slices.Sorted(maps.Keys(outages)) {
		median := chaos.Percentile(outages[name], 50) // as the kind's outage_p50
		for i, d := range outages[name] {
			if d.Seconds() > 2*median && d > 6*time.Second {
				slow = append(slow, fmt.Sprintf("%s round %d %.2fs (median %.2fs)", name, i+1, d.Seconds(), median))
			}
		}
	}
	return slow
}

// heldFormerPrimary names an instance the cluster holds for consent (Degraded
// ErrantFormerPrimary names it in its message), or "".
func heldFormerPrimary(c *dolphinv1.MySQLCluster) string {
	t := c.Status.Topology
	if t == nil {
		return ""
	}
	for _, n := range t.ReplacedPrimaries {
		for _, in := range t.Instances {
			if in.Name == n && (slices.Contains(t.ErrantInstances, n) || (!in.Replicating && strings.Contains(in.Error, "1236"))) {
				return n
			}
		}
	}
	return ""
}
