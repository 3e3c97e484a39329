package e2e

import (
	"database/sql"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestLocalBootstrapFromExternalServer: a MariaDB server on the host, outside the cluster (a
// "VM" the pods reach at the node's gateway), with data and an application account, is the
// spec.bootstrap.external of a new 3-instance cluster on dolphin local. Its binary log format
// is MIXED at first: the cluster stays without a pod, Failed with the fix in its message;
// changed to ROW on the server, the cluster is checked again by itself, copied by its first
// instance, the others cloned, and Ready: every instance holds the server's rows, the
// application account logs in through the primary Service with its own password and writes.
//
// Then a second cluster copies the same server with replicate: true while an application
// writes on the server the whole time: it reaches phase Following with no instance writable
// and no pod behind its primary Service, and every write the server acknowledged — before,
// during and after the copy — arrives on both of its instances.
func TestLocalBootstrapFromExternalServer(t *testing.T) {
	s := upStack(t)
	// Copying, replicating in, verifying, and the cutover's fence (docs/migrate.md).
	src, srcDB := s.startHostServer("SELECT, SHOW VIEW, TRIGGER, EVENT, REPLICATION SLAVE, BINLOG MONITOR, READ_ONLY ADMIN, CONNECTION ADMIN, PROCESS")
	if _, err := srcDB.Exec("SET GLOBAL binlog_format = 'MIXED'"); err != nil { // refused by the checks, fixed below
		t.Fatal(err)
	}
	var srcPos string
	if err := srcDB.QueryRow("SELECT @@gtid_binlog_pos").Scan(&srcPos); err != nil {
		t.Fatal(err)
	}
	cl := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "moved"},
		Spec: dolphinv1.MySQLClusterSpec{Instances: 3, Storage: dolphinv1.StorageSpec{DeletePolicy: dolphinv1.VolumeDelete},
			MySQLConfig: map[string]dolphinv1.MySQLConfigValue{"innodb_buffer_pool_size": "32M"},
			Bootstrap: &dolphinv1.BootstrapSpec{External: &dolphinv1.ExternalSource{
				Host: s.gateway(), Port: int32(src.Port), AccountSecretName: "old-db"}}}}
	if err := s.c.Create(s.ctx, cl); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(cl)

	s.wantClusterCondition(key, dolphinv1.ConditionExternalSourceReady, metav1.ConditionFalse, "binlog_format")
	if pods := s.clusterPods("moved"); len(pods) != 0 {
		t.Fatalf("%d pods exist while the external server fails its checks", len(pods))
	}
	began := time.Now()
	if _, err := srcDB.Exec("SET GLOBAL binlog_format = 'ROW'"); err != nil {
		t.Fatal(err)
	}
	s.waitHealthy(key)
	t.Logf("fixed on the server: checked again, copied, cloned and healthy in %v", time.Since(began).Round(time.Second))
	s.wantClusterCondition(key, dolphinv1.ConditionExternalSourceReady, metav1.ConditionTrue, srcPos)

	opPw := s.secretValue("moved-credentials", "operator-password")
	for _, pod := range s.clusterPods("moved") {
		db := s.sqlDBAs("dolphin", opPw, pod.Status.PodIP+":3306")
		var n int
		var pos string
		if err := db.QueryRow("SELECT COUNT(*), @@gtid_current_pos FROM shop.orders").Scan(&n, &pos); err != nil {
			t.Fatalf("%s: %v", pod.Name, err)
		}
		if n != 5000 || !strings.Contains(pos, srcPos) {
			t.Errorf("%s: %d rows at %s, want 5000 at the server's position %s", pod.Name, n, pos, srcPos)
		}
	}
	app := s.sqlDBAs("shop", "shop-pw", s.serviceAddr("moved-primary"))
	for id := 5001; id <= 5010; id++ {
		if _, err := app.Exec("INSERT INTO shop.orders VALUES (?, ?)", id, fmt.Sprintf("new-%d", id)); err != nil {
			t.Fatalf("the copied application account writing through moved-primary: %v", err)
		}
	}
	var n int
	if err := app.QueryRow("SELECT COUNT(*) FROM shop.orders").Scan(&n); err != nil || n != 5010 {
		t.Errorf("after the application's writes: %d rows (%v), want 5010", n, err)
	}
	s.deleteCluster("moved") // room on the node for the next one

	// Following: the server keeps taking writes through the copy and after it.
	acked, stopWriter := startServerWriter(srcDB)
	defer stopWriter()
	fl := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "follow"},
		Spec: dolphinv1.MySQLClusterSpec{Instances: 2, Storage: dolphinv1.StorageSpec{DeletePolicy: dolphinv1.VolumeDelete},
			MySQLConfig: map[string]dolphinv1.MySQLConfigValue{"innodb_buffer_pool_size": "32M"},
			Bootstrap: &dolphinv1.BootstrapSpec{External: &dolphinv1.ExternalSource{
				Host: s.gateway(), Port: int32(src.Port), AccountSecretName: "old-db", Replicate: true}}}}
	if err := s.c.Create(s.ctx, fl); err != nil {
		t.Fatal(err)
	}
	fkey := client.ObjectKeyFromObject(fl)
	began = time.Now()
	s.waitFollowing(fkey, "phase Following")
	t.Logf("copied and following in %v", time.Since(began).Round(time.Second))
	s.wantClusterCondition(fkey, dolphinv1.ConditionFollowingExternalSource, metav1.ConditionTrue, "replicates from")
	time.Sleep(2 * time.Second) // writes after the copy too
	stopWriter()
	want := s.wantFollowingHoldsServer(fkey, srcDB, acked.Load())
	t.Logf("%d rows, %d written on the server during the copy and after it, on both instances", want, acked.Load())

	s.verifyAndCutOver(fkey, src, srcDB)
}

// wantFollowingHoldsServer checks, once the application on the server (acked writes
// acknowledged) stopped, that every instance of the following cluster fkey holds every row of
// shop.orders the server holds, none is writable and the primary Service has no endpoint; it
// returns the number of rows.
func (s *stack) wantFollowingHoldsServer(fkey client.ObjectKey, srcDB *sql.DB, acked int64) int {
	t := s.t
	t.Helper()
	var want int
	if err := srcDB.QueryRow("SELECT COUNT(*) FROM shop.orders").Scan(&want); err != nil {
		t.Fatal(err)
	}
	if int64(want) < 5000+acked || acked == 0 {
		t.Fatalf("the server holds %d rows after %d acknowledged writes", want, acked)
	}
	opPw := s.secretValue(fkey.Name+"-credentials", "operator-password")
	for _, pod := range s.clusterPods(fkey.Name) {
		db := s.sqlDBAs("dolphin", opPw, pod.Status.PodIP+":3306")
		testenv.Eventually(t, 60*time.Second, pod.Name+" holds every row of the server", func() error {
			var n int
			var ro, host string
			// Read apart from the table: MariaDB 10.11 answers @@read_only with 0 in a SELECT
			// that reads a table (measured: `SELECT COUNT(*), @@read_only FROM t` 0, `SELECT
			// @@read_only` 1 on the same read-only server).
			if err := db.QueryRow("SELECT @@read_only, @@hostname").Scan(&ro, &host); err != nil {
				return err
			}
			if err := db.QueryRow("SELECT COUNT(*) FROM shop.orders").Scan(&n); err != nil {
				return err
			}
			if ro != "1" {
				var c dolphinv1.MySQLCluster
				_ = s.c.Get(s.ctx, fkey, &c)
				t.Fatalf("%s (%s at %s) has read_only=%s while the cluster follows the server; topology %+v", pod.Name, host, pod.Status.PodIP, ro, c.Status.Topology)
			}
			if n != want {
				return fmt.Errorf("%d rows, the server has %d", n, want)
			}
			return nil
		})
	}
	if eps := s.endpointAddresses(fkey.Name + "-primary"); len(eps) != 0 {
		t.Errorf("the primary Service of a following cluster has endpoints %v", eps)
	}
	return want
}

// verifyAndCutOver asks the following cluster fkey to verify its copy of the server src (a
// real comparison under an application writing on the server) and then to cut over, under an
// application that writes on the server until refused and then through the cluster's primary
// Service ClusterIP: the cluster is Ready, the record has a position and no warning, the
// server is read-only, and every write acknowledged across the cutover is in the cluster.
func (s *stack) verifyAndCutOver(fkey client.ObjectKey, src *dbtest.Instance, srcDB *sql.DB) {
	t := s.t
	t.Helper()
	// The application writes on the server until it refuses, then through the cluster's
	// primary Service (its ClusterIP: no endpoint until the cutover).
	var svc corev1.Service
	if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: fkey.Name + "-primary"}, &svc); err != nil {
		t.Fatal(err)
	}
	app := s.sqlDBConnectTimeout("shop", "shop-pw", src.Addr(), time.Second)
	w := startMovingWriter(app, s.sqlDBConnectTimeout("shop", "shop-pw", net.JoinHostPort(svc.Spec.ClusterIP, "3306"), time.Second))
	defer w.stop()

	// A verification, asked by annotation, while the application writes on the server.
	s.patchCluster(fkey, func(c *dolphinv1.MySQLCluster) {
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[dolphinv1.VerifyExternalAnnotation] = "v1"
	})
	testenv.Eventually(t, 120*time.Second, "the copy verified", func() error {
		var c dolphinv1.MySQLCluster
		if err := s.c.Get(s.ctx, fkey, &c); err != nil {
			return err
		}
		topo := c.Status.Topology
		if topo == nil || topo.ExternalSource == nil || topo.ExternalSource.LastVerification == nil || topo.ExternalSource.LastVerification.Request != "v1" {
			return fmt.Errorf("not verified yet: %+v", topo)
		}
		if v := topo.ExternalSource.LastVerification; v.Error != "" || len(v.Mismatched) > 0 || v.Tables < 1 {
			t.Fatalf("verification under writes: %+v", v)
		}
		t.Logf("verified under writes: %d table(s) equal at %s", topo.ExternalSource.LastVerification.Tables, topo.ExternalSource.LastVerification.Position)
		return nil
	})

	// The cutover, asked by annotation, under the application.
	s.patchCluster(fkey, func(c *dolphinv1.MySQLCluster) {
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[dolphinv1.CutoverAnnotation] = "true"
	})
	var rec *dolphinv1.CutoverRecord
	testenv.Eventually(t, 120*time.Second, "cut over and Ready", func() error {
		var c dolphinv1.MySQLCluster
		if err := s.c.Get(s.ctx, fkey, &c); err != nil {
			return err
		}
		if t := c.Status.Topology; t == nil || t.ExternalSource == nil || t.ExternalSource.CutOver == nil {
			return fmt.Errorf("not cut over: %+v", c.Status.Topology)
		}
		rec = c.Status.Topology.ExternalSource.CutOver
		if !meta.IsStatusConditionTrue(c.Status.Conditions, dolphinv1.ConditionReady) || w.onTarget.Load() < 20 {
			return fmt.Errorf("phase %s, %d writes through the primary Service", c.Status.Phase, w.onTarget.Load())
		}
		return nil
	})
	w.stop()
	t.Logf("cut over to %s at %s: the servers' write pause %d ms, the application's %s (%d writes on the server, %d through the primary Service)",
		rec.Instance, rec.Position, rec.WritePauseMilliseconds, w.pause().Round(time.Millisecond), w.onSource.Load(), w.onTarget.Load())
	if rec.Position == "" || rec.Warning != "" {
		t.Errorf("cutover record %+v", rec)
	}
	var ro int
	if err := srcDB.QueryRow("SELECT @@read_only").Scan(&ro); err != nil || ro != 1 {
		t.Errorf("the server after the cutover: read_only %d (%v), want 1", ro, err)
	}
	s.wantAckedInCluster(fkey.Name, w)
}

// wantAckedInCluster checks that every write w had acknowledged (on the server or through
// the primary Service) is in cluster's primary: the ids are the primary key, so once each; a
// write whose session the fence ended may have committed unacknowledged.
func (s *stack) wantAckedInCluster(cluster string, w *movingWriter) {
	t := s.t
	t.Helper()
	primaryDB := s.sqlDBAs("shop", "shop-pw", s.serviceAddr(cluster+"-primary"))
	rows, err := primaryDB.Query("SELECT id FROM shop.orders WHERE item = 'moving'")
	if err != nil {
		t.Fatal(err)
	}
	have := map[int]bool{}
	for rows.Next() {
		var id int
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		have[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	lost := 0
	for _, id := range w.ackedIDs() {
		if !have[id] {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of the application's %d acknowledged writes across the cutover are not in the cluster", lost, len(w.ackedIDs()))
	}
}

// movingWriter inserts rows into shop.orders through `from` until it refuses (read-only, or
// its session ended by the fence), then through `to`, as an application told to move does:
// it counts the writes acknowledged on each and the pause between the last on `from` and the
// first on `to`.
type movingWriter struct {
	from, to           *sql.DB
	onSource, onTarget atomic.Int64
	mu                 sync.Mutex
	lastFrom, firstTo  time.Time
	acked              []int
	stopc, done        chan struct{}
	once               sync.Once
}

func (w *movingWriter) ackedIDs() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]int(nil), w.acked...)
}

// movingWriterIDs hands each moving writer its own range of ids: a server outlives several
// clusters in one test (each cut over and fallen back), and a writer must not collide with
// the rows of the one before.
var movingWriterIDs atomic.Int64

func startMovingWriter(from, to *sql.DB) *movingWriter {
	w := &movingWriter{from: from, to: to, stopc: make(chan struct{}), done: make(chan struct{})}
	firstID := 200001 + int(movingWriterIDs.Add(1)-1)*100000
	go func() {
		defer close(w.done)
		moved := false
		for id := firstID; ; id++ {
			select {
			case <-w.stopc:
				return
			default:
			}
			db := w.from
			if moved {
				db = w.to
			}
			_, err := db.Exec("INSERT INTO shop.orders VALUES (?, 'moving')", id)
			now := time.Now()
			w.mu.Lock()
			if err == nil {
				w.acked = append(w.acked, id)
			}
			switch {
			case err == nil && !moved:
				w.onSource.Add(1)
				w.lastFrom = now
			case err == nil:
				if w.onTarget.Add(1) == 1 {
					w.firstTo = now
				}
			default:
				moved = true
			}
			w.mu.Unlock()
			if err != nil {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}()
	return w
}

func (w *movingWriter) stop() { w.once.Do(func() { close(w.stopc); <-w.done }) }

// pause is the time between the last write acknowledged through `from` and the first
// through `to`.
func (w *movingWriter) pause() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.firstTo.Sub(w.lastFrom)
}

// endpointAddresses lists the ready endpoints of a Service (its EndpointSlices).
func (s *stack) endpointAddresses(svc string) []string {
	s.t.Helper()
	var slices_ discoveryv1.EndpointSliceList
	if err := s.c.List(s.ctx, &slices_, client.InNamespace(s.ns), client.MatchingLabels{discoveryv1.LabelServiceName: svc}); err != nil {
		s.t.Fatal(err)
	}
	var out []string
	for _, sl := range slices_.Items {
		for _, e := range sl.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				out = append(out, e.Addresses...)
			}
		}
	}
	return out
}
