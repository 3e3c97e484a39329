// Package e2e drives Dolphin end to end on the `dolphin local` stack — a real control plane,
// the operator and a local node running real mariadbd pods — only through the Kubernetes API
// and SQL clients.
package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	_ "github.com/go-sql-driver/mysql"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/localcluster"
	"github.com/dolphin-operator/dolphin/internal/operator"
	"github.com/dolphin-operator/dolphin/internal/realnode"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

type stack struct {
	t      *testing.T
	dir    string
	bin    string
	c      client.Client
	cfg    *rest.Config // the local control plane's admin, for watches
	ctx    context.Context
	ns     string
	dbPass string
	// keepLogs keeps the logs (DOLPHIN_E2E_KEEP) of a test that passed: the chaos suite sets
	// it when a round was far slower than its kind's others, so it can be explained later.
	keepLogs bool
	// refusalsExpected are the times the operator may be refused requests (its chart being
	// uninstalled around running pods): forbiddenInOperatorLogs skips them.
	refusalsExpected []refusalWindow
	// node is the node kind: nodeProcess (pods as host processes, Services on 127.0.0.1
	// ports) or nodeReal (containers; Services at their ClusterIPs through kube-proxy).
	node string
	// upArgs are the arguments of the stack's `dolphin local up` (upAgain runs it again).
	upArgs []string
}

func repoRoot() string { return filepath.Join("..", "..") }

// upStack builds the dolphin binary and runs `dolphin local up` in a fresh folder, with its
// own bridge and pod range so it does not disturb a local cluster the developer runs, on the
// node e2eNode names (the real node unless DOLPHIN_E2E_NODE says otherwise).
func upStack(t *testing.T) *stack {
	t.Helper()
	return upStackOn(t, repoRoot(), e2eNode())
}

// Node kinds of `dolphin local up --node`.
const (
	nodeProcess = "process"
	nodeReal    = "real"
)

// e2eNode is the node kind DOLPHIN_E2E_NODE names (`make bench-local BENCH_NODE=process`),
// nodeReal when unset: every suite runs on the real node unless told otherwise.
func e2eNode() string {
	if n := os.Getenv("DOLPHIN_E2E_NODE"); n != "" {
		return n
	}
	return nodeReal
}

// upStackOn is upStack with the dolphin binary built from the source tree at src (another
// build of Dolphin, for the upgrade test), on a node of the given kind: nodeReal runs containerd, the kubelet,
// kube-proxy and CoreDNS with the images of make images, and Dolphin installed in the cluster
// from its image (its own bridge and pod range, apart from the process node's).
func upStackOn(t *testing.T, src, node string) *stack {
	t.Helper()
	return upStackOnWith(t, src, node)
}

// upStackOnWith is upStackOn with more arguments of `dolphin local up` (--no-dolphin).
func upStackOnWith(t *testing.T, src, node string, extraUpArgs ...string) *stack {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end: skipped under -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("the local node needs root (network and mount namespaces): run as root, as CI does")
	}
	dbtest.RequireMariaDB(t)
	s := &stack{t: t, dir: t.TempDir(), ctx: context.Background(), ns: "e2e", node: node}
	s.bin = filepath.Join(s.dir, "dolphin")
	build := exec.Command("go", "build", "-o", s.bin, "./cmd/dolphin")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building dolphin: %v\n%s", err, out)
	}
	local := filepath.Join(s.dir, "local")
	if node == nodeReal {
		// One real node on the host at a time (internal/realnode tests may run at once).
		unlock, err := realnode.LockHost()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(unlock) // registered first: runs after `down`
	}
	// Registered before `up`, so that a stack whose start failed part way is stopped too
	// (`up` stops what it started when it fails; down also catches what a killed up left).
	t.Cleanup(func() {
		if s.node == nodeReal {
			forbiddenInOperatorLogs(t, local, s.refusalsExpected)
		}
		if (t.Failed() || s.keepLogs) && s.node == nodeReal {
			// The operator runs in the cluster: its pods' logs (the leader's and the
			// standby's), as a user reads them.
			out, _ := exec.Command(filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl"), "--kubeconfig", filepath.Join(local, "kubeconfig"),
				"-n", operatorNS, "logs", "-l", "app.kubernetes.io/name="+operatorAppName, "--prefix", "--tail=40").CombinedOutput()
			t.Logf("--- operator (kubectl logs, tail)\n%s", out)
		}
		if t.Failed() || s.keepLogs {
			for _, f := range []string{"operator.log", "node.log"} {
				if b, err := os.ReadFile(filepath.Join(local, "logs", f)); err == nil {
					t.Logf("--- %s (tail)\n%s", f, tail(string(b), 30))
				}
			}
			// DOLPHIN_E2E_KEEP=<dir> keeps every log of a failed test (control plane, node,
			// every container; on the real node the kubelet's pod logs) for a later look.
			if keep := os.Getenv("DOLPHIN_E2E_KEEP"); keep != "" {
				dst := filepath.Join(keep, t.Name())
				keepLogs := exec.Command("sh", "-c", `mkdir -p "$1" && for d in logs node/pods realnode/pod-logs; do if [ -d "$d" ]; then find "$d" -name '*.log' -exec cp --parents {} "$1" \; || exit 1; fi; done`, "sh", dst)
				keepLogs.Dir = local
				if out, err := keepLogs.CombinedOutput(); err != nil {
					t.Logf("keeping logs: %v: %s", err, out)
				} else {
					t.Logf("logs kept in %s", dst)
				}
			}
		}
		cmd := exec.Command(s.bin, "local", "down", "--dir", local, "--wipe")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("dolphin local down: %v\n%s", err, out)
		}
	})
	s.upArgs = append(upArgs(local, node, src != repoRoot()), extraUpArgs...)
	if node == nodeReal {
		if d := os.Getenv("DOLPHIN_NODE_BIN"); d != "" {
			s.upArgs = append(s.upArgs, "--node-bin-dir", d)
		}
		if d := os.Getenv("DOLPHIN_IMAGES"); d != "" {
			s.upArgs = append(s.upArgs, "--images", d)
		}
		if d := os.Getenv("DOLPHIN_E2E_KUBE_PROXY_MIN_SYNC"); d != "" { // an experiment's setting
			s.upArgs = append(s.upArgs, "--kube-proxy-min-sync-period", d)
		}
	}
	t.Log(s.run(s.upArgs...))
	s.dir = local
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(local, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	scheme, err := operator.NewScheme() // Kubernetes, CRDs, Dolphin's v1beta1 and v1alpha1
	if err != nil {
		t.Fatal(err)
	}
	ctrllog.SetLogger(logr.Discard()) // the test's client logs nothing worth reading
	s.cfg = cfg
	if s.c, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	if err := s.c.Create(s.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}}); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *stack) run(args ...string) string {
	s.t.Helper()
	cmd := exec.Command(s.bin, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		s.t.Fatalf("dolphin %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// serviceAddr is where this host reaches a Service's port 3306: its ClusterIP through
// kube-proxy on the real node (once an endpoint is ready), the port the Service proxy forwards
// on the process node.
func (s *stack) serviceAddr(svc string) string {
	s.t.Helper()
	return s.serviceAddrWithin(svc, 30*time.Second)
}

// serviceAddrWithin is serviceAddr, waiting up to within for a ready endpoint or the route.
func (s *stack) serviceAddrWithin(svc string, within time.Duration) string {
	s.t.Helper()
	addr, err := s.lookupServiceAddr(svc, within)
	if err != nil {
		s.t.Fatal(err)
	}
	return addr
}

// lookupServiceAddr is serviceAddrWithin returning an error instead of stopping the test, for a
// caller that must go on (chaosVerdict).
func (s *stack) lookupServiceAddr(svc string, within time.Duration) (string, error) {
	if s.node != nodeReal {
		port, err := s.lookupServicePort(svc, within)
		if err != nil {
			return "", err
		}
		return "127.0.0.1:" + strconv.Itoa(port), nil
	}
	deadline := time.Now().Add(within) // one budget for the endpoint and the route
	var ip string
	err := testenv.Poll(within, func() error {
		var svcObj corev1.Service
		if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: svc}, &svcObj); err != nil {
			return err
		}
		var slices discoveryv1.EndpointSliceList
		if err := s.c.List(s.ctx, &slices, client.InNamespace(s.ns), client.MatchingLabels{discoveryv1.LabelServiceName: svc}); err != nil {
			return err
		}
		for _, sl := range slices.Items {
			for _, e := range sl.Endpoints {
				if e.Conditions.Ready != nil && *e.Conditions.Ready {
					ip = svcObj.Spec.ClusterIP
					return nil
				}
			}
		}
		return errors.New("no ready endpoint")
	})
	if err != nil {
		return "", fmt.Errorf("Service %s with a ready endpoint: not reached within %s: %w", svc, within, err)
	}
	// A ready endpoint in the EndpointSlice is not yet a route: kube-proxy programs it on its
	// next sync, and until then the ClusterIP refuses connections (a busy CI run wrote to a
	// restored cluster's primary Service in that gap: "connect: connection refused"). A
	// connection proves a route, not that it leads to the newest endpoint.
	addr := net.JoinHostPort(ip, "3306")
	routeWait := max(time.Until(deadline), 5*time.Second)
	if err := testenv.Poll(routeWait, func() error {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		return conn.Close()
	}); err != nil {
		return "", fmt.Errorf("kube-proxy routing Service %s: not reached within %s: %w", svc, routeWait, err)
	}
	return addr, nil
}

// servicePort is the host port `dolphin local` forwards a Service to.
func (s *stack) servicePort(svc string) int {
	s.t.Helper()
	return s.servicePortWithin(svc, 30*time.Second)
}

// servicePortWithin is servicePort, waiting up to within for the route.
func (s *stack) servicePortWithin(svc string, within time.Duration) int {
	s.t.Helper()
	port, err := s.lookupServicePort(svc, within)
	if err != nil {
		s.t.Fatal(err)
	}
	return port
}

// lookupServicePort is servicePortWithin returning an error instead of stopping the test.
func (s *stack) lookupServicePort(svc string, within time.Duration) (int, error) {
	var port int
	err := testenv.Poll(within, func() error {
		b, err := os.ReadFile(filepath.Join(s.dir, "services.json"))
		if err != nil {
			return err
		}
		var routes map[string]int
		if err := json.Unmarshal(b, &routes); err != nil {
			return err
		}
		p, ok := routes[s.ns+"/"+svc+":3306"]
		if !ok {
			return fmt.Errorf("not in %v", routes)
		}
		port = p
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("Service %s forwarded: not reached within %s: %w", svc, within, err)
	}
	return port, nil
}

func (s *stack) sqlDB(addr string) *sql.DB {
	db, err := sql.Open("mysql", fmt.Sprintf("dolphin:%s@tcp(%s)/?timeout=2s&readTimeout=5s&writeTimeout=5s", s.dbPass, addr))
	if err != nil {
		s.t.Fatal(err)
	}
	db.SetMaxIdleConns(0) // every statement on a fresh connection: it goes where the proxy sends it now
	s.t.Cleanup(func() { db.Close() })
	return db
}

func (s *stack) count(db *sql.DB) (int, error) {
	var n int
	err := db.QueryRow("SELECT COUNT(*) FROM app.rows").Scan(&n)
	return n, err
}

func TestLocalStackEndToEnd(t *testing.T) {
	s := upStack(t)
	cluster := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "shop"},
		Spec: dolphinv1.MySQLClusterSpec{
			Instances:   3,
			Storage:     dolphinv1.StorageSpec{DeletePolicy: dolphinv1.VolumeDelete},
			MySQLConfig: map[string]dolphinv1.MySQLConfigValue{"innodb_buffer_pool_size": "32M"},
			Failover:    dolphinv1.FailoverSpec{Detection: dolphinv1.DetectionSpec{Interval: &metav1.Duration{Duration: 500 * time.Millisecond}, Attempts: 2}},
		}}
	applied := time.Now()
	if err := s.c.Create(s.ctx, cluster); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(cluster)
	testenv.Eventually(t, 180*time.Second, "cluster Ready", func() error {
		if err := s.c.Get(s.ctx, key, cluster); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(cluster.Status.Conditions, "Ready") {
			return fmt.Errorf("phase %s: %+v", cluster.Status.Phase, cluster.Status.Topology)
		}
		return nil
	})
	t.Logf("apply to Ready: %.1fs", time.Since(applied).Seconds())

	primary := s.primaryWithTable("shop")

	// A writer through the primary Service records every acknowledged write.
	var mu sync.Mutex
	acked := map[int64]bool{}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for id := int64(1); ; id++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := primary.Exec("INSERT INTO app.rows VALUES (?)", id); err == nil {
				mu.Lock()
				acked[id] = true
				mu.Unlock()
			} else {
				time.Sleep(50 * time.Millisecond)
			}
		}
	}()
	ackedCount := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	testenv.Eventually(t, 30*time.Second, "writes through the primary Service", func() error {
		if n := ackedCount(); n < 50 {
			return fmt.Errorf("%d acknowledged", n)
		}
		return nil
	})

	// Kill the primary's server process (as a crash would).
	old := cluster.Status.CurrentPrimary
	pid := s.serverPID(old)
	before := ackedCount()
	killed := time.Now()
	if err := exec.Command("kill", "-9", strconv.Itoa(pid)).Run(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "writes resume through the primary Service", func() error {
		if n := ackedCount(); n < before+50 {
			return fmt.Errorf("%d acknowledged, %d before the kill", n, before)
		}
		return nil
	})
	t.Logf("writes resumed %.1fs after kill -9 of %s", time.Since(killed).Seconds(), old)
	close(stop)
	<-done

	// No acknowledged write is missing on the primary, and every instance has them all: the
	// crashed primary, restarted by the node with --init-rpl-role=SLAVE, rolled back what
	// nobody acknowledged and is primary again or a replica of whoever was promoted — never
	// errant (docs/design/0011).
	want := ackedCount()
	var ids []int64
	mu.Lock()
	for id := range acked {
		ids = append(ids, id)
	}
	mu.Unlock()
	for _, id := range ids {
		var n int
		if err := primary.QueryRow("SELECT COUNT(*) FROM app.rows WHERE id=?", id).Scan(&n); err != nil || n != 1 {
			t.Fatalf("acknowledged write %d missing through the primary Service (%v)", id, err)
		}
	}
	s.waitAllInstances(key, 3, want)

	// A deleted replica pod comes back (same volume) and catches up.
	if err := s.c.Get(s.ctx, key, cluster); err != nil {
		t.Fatal(err)
	}
	replica := "shop-1"
	if cluster.Status.CurrentPrimary == replica {
		replica = "shop-2"
	}
	if err := s.c.Delete(s.ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: replica}}); err != nil {
		t.Fatal(err)
	}
	// The other replica acknowledges this write while the deleted one comes back; retried in
	// case the Service is moving.
	testenv.Eventually(t, 90*time.Second, "a write while a replica restarts", func() error {
		_, err := primary.Exec("INSERT IGNORE INTO app.rows VALUES (1000000)")
		return err
	})
	s.waitAllInstances(key, 3, want+1)

	// Scale 3 → 5 → 3: new instances join as replicas with every row; scaling back keeps the
	// primary and the data.
	for _, n := range []int32{5, 3} {
		if err := s.c.Get(s.ctx, key, cluster); err != nil {
			t.Fatal(err)
		}
		scale := client.MergeFrom(cluster.DeepCopy()) // the operator may write the object meanwhile
		cluster.Spec.Instances = n
		if err := s.c.Patch(s.ctx, cluster, scale); err != nil {
			t.Fatal(err)
		}
		s.waitAllInstances(key, int(n), want+1)
	}

	// Restarting the operator changes nothing it should not: same primary, no pod restarted
	// or replaced, the StatefulSet untouched.
	snap := s.snapshot(key)
	s.crashOperator()
	time.Sleep(5 * time.Second) // let the new operator reconcile and run its engine
	if after := s.snapshot(key); after != snap {
		t.Errorf("an operator restart changed the cluster:\n before %s\n after  %s", snap, after)
	}

	// A hung primary (SIGSTOP: it accepts TCP but answers nothing) is failed over; status,
	// events and metrics record it, and writes through the primary Service resume.
	if err := s.c.Get(s.ctx, key, cluster); err != nil {
		t.Fatal(err)
	}
	hung := cluster.Status.CurrentPrimary
	hungPID := s.serverPID(hung)
	var hungPod corev1.Pod
	if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: hung}, &hungPod); err != nil {
		t.Fatal(err)
	}
	hungUID := hungPod.UID
	stopped := time.Now()
	if err := exec.Command("kill", "-STOP", strconv.Itoa(hungPID)).Run(); err != nil {
		t.Fatal(err)
	}
	defer exec.Command("kill", "-CONT", strconv.Itoa(hungPID)).Run()
	testenv.Eventually(t, 90*time.Second, "failover away from the hung primary", func() error {
		if err := s.c.Get(s.ctx, key, cluster); err != nil {
			return err
		}
		lp := cluster.Status.Topology.LastPromotion
		if lp == nil || lp.From != hung || lp.Planned {
			return fmt.Errorf("lastPromotion %+v, state %s: %s", lp, cluster.Status.Topology.State, cluster.Status.Topology.Message)
		}
		return nil
	})
	testenv.Eventually(t, 30*time.Second, "a write through the primary Service after the failover", func() error {
		_, err := primary.Exec("INSERT IGNORE INTO app.rows VALUES (2000000)")
		return err
	})
	t.Logf("hung primary %s replaced by %s; writes through the Service %.1fs after SIGSTOP",
		hung, cluster.Status.Topology.LastPromotion.To, time.Since(stopped).Seconds())
	var evs eventsv1.EventList
	if err := s.c.List(s.ctx, &evs, client.InNamespace(s.ns)); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(evs.Items, func(e eventsv1.Event) bool { return e.Reason == "Failover" && e.Regarding.Name == "shop" }) {
		t.Error("no Failover event on the cluster")
	}
	if m := s.metrics(); !strings.Contains(m, `mysql_cluster_promotions_total{kind="failover",name="shop",namespace="e2e"}`) {
		t.Errorf("the operator's metrics do not count the failover:\n%s", grepLines(m, "mysql_cluster_"))
	}
	// Dolphin deletes the pod of the replaced primary that did not answer; the StatefulSet
	// re-creates it on the same volume, and the server (--init-rpl-role=SLAVE) rolls back what
	// nobody acknowledged and rejoins as a read-only replica with every row.
	testenv.Eventually(t, 120*time.Second, "the hung primary's pod replaced and back as a read-only replica", func() error {
		var p corev1.Pod
		if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: hung}, &p); err != nil {
			return err
		}
		if p.UID == hungUID {
			return fmt.Errorf("pod %s not replaced yet", hung)
		}
		if p.Labels["mysql.dolphin.dev/role"] != "replica" {
			return fmt.Errorf("role label %q", p.Labels["mysql.dolphin.dev/role"])
		}
		var ro int
		if err := s.sqlDB(p.Status.PodIP + ":3306").QueryRow("SELECT @@read_only").Scan(&ro); err != nil || ro != 1 {
			return fmt.Errorf("read_only=%d (%v)", ro, err)
		}
		return nil
	})
	s.waitAllInstances(key, 3, want+2)

	// Deleting the cluster removes its children and, with deletePolicy Delete, its volumes.
	if err := s.c.Delete(s.ctx, cluster); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 120*time.Second, "children and volumes garbage-collected", func() error {
		if err := s.c.Get(s.ctx, key, &dolphinv1.MySQLCluster{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("cluster still there: %v", err)
		}
		var sts appsv1.StatefulSetList
		var pvcs corev1.PersistentVolumeClaimList
		var pods corev1.PodList
		if err := s.c.List(s.ctx, &sts, client.InNamespace(s.ns)); err != nil {
			return err
		}
		if err := s.c.List(s.ctx, &pvcs, client.InNamespace(s.ns)); err != nil {
			return err
		}
		if err := s.c.List(s.ctx, &pods, client.InNamespace(s.ns)); err != nil {
			return err
		}
		if len(sts.Items)+len(pvcs.Items)+len(pods.Items) > 0 {
			return fmt.Errorf("%d StatefulSets, %d PVCs, %d pods left", len(sts.Items), len(pvcs.Items), len(pods.Items))
		}
		return nil
	})
}

// waitAllInstances waits until the cluster is Ready with n instances, each holding at least
// rows rows.
func (s *stack) waitAllInstances(key client.ObjectKey, n, rows int) {
	s.t.Helper()
	testenv.Eventually(s.t, 180*time.Second, fmt.Sprintf("%d ready instances with %d rows each", n, rows), func() error {
		var c dolphinv1.MySQLCluster
		if err := s.c.Get(s.ctx, key, &c); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(c.Status.Conditions, "Ready") || int(c.Status.ReadyInstances) != n {
			return fmt.Errorf("phase %s, %d ready: %v", c.Status.Phase, c.Status.ReadyInstances, c.Status.Topology)
		}
		var pods corev1.PodList
		if err := s.c.List(s.ctx, &pods, client.InNamespace(s.ns)); err != nil {
			return err
		}
		if len(pods.Items) != n {
			return fmt.Errorf("%d pods", len(pods.Items))
		}
		for _, p := range pods.Items {
			if c.Status.Topology != nil && slices.Contains(c.Status.Topology.ErrantInstances, p.Name) {
				s.t.Fatalf("%s is errant: %s", p.Name, c.Status.Topology.Message)
			}
			got, err := s.count(s.sqlDB(p.Status.PodIP + ":3306"))
			if err != nil || got < rows {
				return fmt.Errorf("%s: %d rows (%v)", p.Name, got, err)
			}
		}
		return nil
	})
}

// process reads one process of `dolphin local` from its state file.
func (s *stack) process(name string) localcluster.Process {
	s.t.Helper()
	b, err := os.ReadFile(filepath.Join(s.dir, "state.json"))
	if err != nil {
		s.t.Fatal(err)
	}
	var st struct {
		Processes []localcluster.Process `json:"processes"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		s.t.Fatal(err)
	}
	for _, p := range st.Processes {
		if p.Name == name {
			return p
		}
	}
	s.t.Fatalf("no %s process in state.json", name)
	return localcluster.Process{}
}

// snapshot summarises what an operator restart must not change.
func (s *stack) snapshot(key client.ObjectKey) string {
	s.t.Helper()
	var c dolphinv1.MySQLCluster
	var sts appsv1.StatefulSet
	var pods corev1.PodList
	if err := s.c.Get(s.ctx, key, &c); err != nil {
		s.t.Fatal(err)
	}
	if err := s.c.Get(s.ctx, key, &sts); err != nil {
		s.t.Fatal(err)
	}
	if err := s.c.List(s.ctx, &pods, client.InNamespace(s.ns)); err != nil {
		s.t.Fatal(err)
	}
	out := fmt.Sprintf("primary=%s sts-generation=%d", c.Status.Topology.Primary, sts.Generation)
	for _, p := range pods.Items {
		out += fmt.Sprintf(" %s(uid=%s,restarts=%d)", p.Name, p.UID, p.Status.ContainerStatuses[0].RestartCount)
	}
	return out
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// primaryWithTable declares the application account and database of a cluster (a
// MySQLUser and a MySQLDatabase, as users do), creates table app.rows through the primary
// Service as that account, and returns its connection pool there: every test writer writes
// as an application, which read_only stops, never as Dolphin's own account.
func (s *stack) primaryWithTable(cluster string) *sql.DB {
	s.t.Helper()
	s.declareAppAccount(cluster)
	return s.appTable(cluster)
}

// appTable creates table app.rows through the primary Service as the application account,
// declared already, and returns its connection pool there.
func (s *stack) appTable(cluster string) *sql.DB {
	s.t.Helper()
	var secret corev1.Secret
	if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: cluster + "-credentials"}, &secret); err != nil {
		s.t.Fatal(err)
	}
	s.dbPass = string(secret.Data["operator-password"]) // for the tests' own administrative statements
	primary := s.sqlDBAs(appUser, appPassword, s.serviceAddr(cluster+"-primary"))
	// Ready says the pods and the topology are; the Service's endpoints reach the proxy a
	// moment later (as they reach kube-proxy), and until then a connection is accepted and
	// closed ("invalid connection"). Wait for the Service to answer, as a client would retry.
	testenv.Eventually(s.t, 30*time.Second, "the primary Service answers the application account", func() error {
		return primary.QueryRow("SELECT 1").Scan(new(int))
	})
	if _, err := primary.Exec("CREATE TABLE app.rows (id BIGINT PRIMARY KEY)"); err != nil {
		s.t.Fatalf("CREATE TABLE through the primary Service as the application account: %v", err)
	}
	return primary
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
