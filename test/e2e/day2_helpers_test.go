package e2e

import (
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// appUser and appPassword are the application account every test writer uses (declared as a
// MySQLUser by declareAppAccount): unlike Dolphin's own, read_only stops it.
const appUser, appPassword = "app", "Wr1ter-Secret-42x"

// declareAppAccount declares database app and the application account app of a cluster
// (password from a Secret of the test's) as MySQLDatabase and MySQLUser resources, and waits
// until Dolphin reports both applied.
func (s *stack) declareAppAccount(cluster string) {
	s.t.Helper()
	pw := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: cluster + "-app-password"},
		StringData: map[string]string{"password": appPassword}}
	db := &dolphinv1.MySQLDatabase{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: cluster + "-app"},
		Spec: dolphinv1.MySQLDatabaseSpec{Cluster: cluster, Name: "app"}}
	user := &dolphinv1.MySQLUser{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: cluster + "-app"},
		Spec: dolphinv1.MySQLUserSpec{Cluster: cluster, Name: appUser,
			PasswordSecretKeyRef: &dolphinv1.SecretKeyReference{Name: pw.Name},
			// REPLACE needs DELETE; the table is created by the application itself.
			Grants: []dolphinv1.Grant{{Privileges: []dolphinv1.Privilege{"SELECT", "INSERT", "DELETE", "CREATE"}, Database: "app"}}}}
	for _, o := range []client.Object{pw, db, user} {
		if err := s.c.Create(s.ctx, o); err != nil {
			s.t.Fatal(err)
		}
	}
	s.waitApplied(db, user)
}

// waitApplied waits until Dolphin reports a MySQLDatabase and a MySQLUser applied.
func (s *stack) waitApplied(db *dolphinv1.MySQLDatabase, user *dolphinv1.MySQLUser) {
	s.t.Helper()
	testenv.Eventually(s.t, 60*time.Second, "MySQLDatabase "+db.Name+" and MySQLUser "+user.Name+" applied", func() error {
		for _, o := range []client.Object{db, user} {
			if err := s.c.Get(s.ctx, client.ObjectKeyFromObject(o), o); err != nil {
				return err
			}
		}
		for _, c := range [][]metav1.Condition{db.Status.Conditions, user.Status.Conditions} {
			if r := meta.FindStatusCondition(c, "Ready"); r == nil || r.Status != metav1.ConditionTrue {
				return fmt.Errorf("not applied: %+v", r)
			}
		}
		return nil
	})
}

// appWriter inserts through the primary Service as the application account, each statement
// on a fresh connection (it goes where the proxy sends it now), recording every
// acknowledged id and the longest time between two acknowledgements.
type appWriter struct {
	db         *sql.DB
	stop, done chan struct{}
	mu         sync.Mutex
	acked      map[int64]bool
	failed     int
	lastErr    error
	last       time.Time
	// lastSent is when the last acknowledged write was sent: a write acknowledged after a
	// fault may have been sent before it.
	lastSent time.Time
	gap      time.Duration
}

func (s *stack) startAppWriter(cluster string) *appWriter {
	s.t.Helper()
	return s.startAppWriterFrom(cluster, 1)
}

// startAppWriterFrom is startAppWriter with ids from first on.
func (s *stack) startAppWriterFrom(cluster string, first int64) *appWriter {
	s.t.Helper()
	addr := s.serviceAddr(cluster + "-primary")
	db, err := sql.Open("mysql", fmt.Sprintf("%s:%s@tcp(%s)/?timeout=2s&readTimeout=5s&writeTimeout=5s", appUser, appPassword, addr))
	if err != nil {
		s.t.Fatal(err)
	}
	db.SetMaxIdleConns(0)
	w := &appWriter{db: db, stop: make(chan struct{}), done: make(chan struct{}), acked: map[int64]bool{}, last: time.Now()}
	go func() {
		defer close(w.done)
		for id := first; ; id++ {
			select {
			case <-w.stop:
				return
			default:
			}
			sent := time.Now()
			_, err := db.Exec("INSERT INTO app.rows VALUES (?)", id)
			w.mu.Lock()
			if err == nil {
				w.acked[id] = true
				w.lastSent = sent
				if g := time.Since(w.last); g > w.gap {
					w.gap = g
				}
				w.last = time.Now()
			} else {
				w.failed++
				w.lastErr = err
			}
			w.mu.Unlock()
			if err != nil {
				time.Sleep(20 * time.Millisecond)
			} else {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}()
	s.t.Cleanup(func() { w.finish(); db.Close() })
	return w
}

// takeGap returns the longest gap since the last call and starts measuring anew.
func (w *appWriter) takeGap() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := max(w.gap, time.Since(w.last))
	w.gap = 0
	return g
}

func (w *appWriter) finish() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// ackedIDs returns the acknowledged ids and the number of failed writes.
func (w *appWriter) ackedIDs() (map[int64]bool, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[int64]bool, len(w.acked))
	for id := range w.acked {
		out[id] = true
	}
	return out, w.failed
}

// lostOn counts acknowledged ids that db does not hold.
func lostOn(t *testing.T, db *sql.DB, acked map[int64]bool) int {
	t.Helper()
	// A connection cut under the query (Dolphin disconnects a former primary's application
	// clients a few seconds after a failover) is asked again; a missing row is never excused.
	var present map[int64]bool
	testenv.Eventually(t, 30*time.Second, "reading app.rows", func() error {
		var err error
		present, err = presentIDs(db)
		return err
	})
	lost := 0
	for id := range acked {
		if !present[id] {
			lost++
		}
	}
	return lost
}

// presentIDs reads every id in app.rows.
func presentIDs(db *sql.DB) (map[int64]bool, error) {
	rows, err := db.Query("SELECT id FROM app.rows")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	present := map[int64]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		present[id] = true
	}
	return present, rows.Err()
}

// endpointWatch polls the ready endpoints of a Service and counts the polls that found none.
type endpointWatch struct {
	stop, done   chan struct{}
	mu           sync.Mutex
	polls, empty int
}

func (s *stack) watchEndpoints(svc string) *endpointWatch {
	w := &endpointWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			var slices discoveryv1.EndpointSliceList
			if err := s.c.List(s.ctx, &slices, client.InNamespace(s.ns), client.MatchingLabels{discoveryv1.LabelServiceName: svc}); err != nil {
				continue
			}
			ready := 0
			for _, sl := range slices.Items {
				for _, ep := range sl.Endpoints {
					if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
						ready++
					}
				}
			}
			w.mu.Lock()
			w.polls++
			if ready == 0 {
				w.empty++
			}
			w.mu.Unlock()
		}
	}()
	s.t.Cleanup(w.finish)
	return w
}

func (w *endpointWatch) finish() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// counts returns how many polls ran and how many found the Service without a ready endpoint.
func (w *endpointWatch) counts() (polls, empty int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.polls, w.empty
}

// server identifies one running mysqld: a restart or a replaced pod changes it.
type server struct {
	uid      types.UID
	pid      int
	restarts int32
}

// servers snapshots the mysqld of every pod of a cluster.
func (s *stack) servers(cluster string, n int) map[string]server {
	s.t.Helper()
	out := map[string]server{}
	for i := range n {
		name := fmt.Sprintf("%s-%d", cluster, i)
		var p corev1.Pod
		if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: name}, &p); err != nil {
			s.t.Fatal(err)
		}
		out[name] = server{p.UID, s.serverPID(name), p.Status.ContainerStatuses[0].RestartCount}
	}
	return out
}

// podIP returns the address of a pod's server.
func (s *stack) podAddr(name string) string {
	s.t.Helper()
	var p corev1.Pod
	if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: name}, &p); err != nil {
		s.t.Fatal(err)
	}
	return p.Status.PodIP + ":3306"
}

// healthyAppCluster creates a healthy 3-instance cluster (volumes deleted with it, a small
// buffer pool) with table app.rows and the application account, and returns it with its key.
func (s *stack) healthyAppCluster(name string) (*dolphinv1.MySQLCluster, client.ObjectKey) {
	s.t.Helper()
	cluster := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name},
		Spec: dolphinv1.MySQLClusterSpec{Instances: 3, Storage: dolphinv1.StorageSpec{DeletePolicy: dolphinv1.VolumeDelete},
			MySQLConfig: map[string]dolphinv1.MySQLConfigValue{"innodb_buffer_pool_size": "32M"}}}
	if err := s.c.Create(s.ctx, cluster); err != nil {
		s.t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(cluster)
	s.waitHealthy(key)
	s.primaryWithTable(name)
	return cluster, key
}

// startSteadyAppWriter starts the application writer on a cluster and lets it settle, so
// that the first gap measured is one of the change, not of the writer's start.
func (s *stack) startSteadyAppWriter(cluster string) *appWriter {
	w := s.startAppWriter(cluster)
	time.Sleep(time.Second)
	w.takeGap()
	return w
}

// wantEveryAckedWrite waits until the 3 instances of cluster name hold the writer's count of
// acknowledged writes and fails the test for each instance lacking one; it returns the
// acknowledged ids and the number of failed writes.
func (s *stack) wantEveryAckedWrite(key client.ObjectKey, name string, w *appWriter) (map[int64]bool, int) {
	s.t.Helper()
	acked, failed := w.ackedIDs()
	if len(acked) == 0 {
		s.t.Fatal("no write was acknowledged")
	}
	s.waitAllInstances(key, 3, len(acked))
	for i := range 3 {
		if lost := lostOn(s.t, s.sqlDB(s.podAddr(fmt.Sprintf("%s-%d", name, i))), acked); lost > 0 {
			s.t.Errorf("%s-%d lacks %d acknowledged writes", name, i, lost)
		}
	}
	return acked, failed
}
