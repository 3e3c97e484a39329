package e2e

import (
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// startHostServer starts the migration tests' "old system": a MariaDB server on the host,
// outside the cluster, that the pods reach at the node's gateway, holding shop.orders with
// 5000 rows, the application account shop (shop-pw) and the migration account migrate
// (mig-pw) with grants ON *.*, whose Secret old-db it creates. It returns the server and a
// root pool on it (closed when the test ends).
func (s *stack) startHostServer(grants string) (*dbtest.Instance, *sql.DB) {
	t := s.t
	t.Helper()
	src := dbtest.Start(t, dbtest.Options{Instances: 1}).Instances[0]
	src.Stop(t)
	src.Start(t, "--bind-address="+src.Host+","+s.gateway()) // reachable from the pods
	srcDB, err := sql.Open("mysql", "root@unix("+src.SocketPath()+")/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srcDB.Close() })
	for _, q := range []string{
		"SET GLOBAL read_only = OFF",
		"CREATE DATABASE shop", "CREATE TABLE shop.orders (id INT PRIMARY KEY, item VARCHAR(50) NOT NULL)",
		"INSERT INTO shop.orders SELECT seq, CONCAT('item-', seq) FROM shop.seq_1_to_5000",
		"CREATE USER 'shop'@'%' IDENTIFIED BY 'shop-pw'", "GRANT SELECT, INSERT ON shop.* TO 'shop'@'%'",
		"CREATE USER 'migrate'@'%' IDENTIFIED BY 'mig-pw'",
		"GRANT " + grants + " ON *.* TO 'migrate'@'%'",
	} {
		if _, err := srcDB.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := s.c.Create(s.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "old-db"},
		StringData: map[string]string{"username": "migrate", "password": "mig-pw"}}); err != nil {
		t.Fatal(err)
	}
	return src, srcDB
}

// startServerWriter inserts a row into shop.orders on db every 10 ms (ids from 100001, item
// 'during') until stop is called (once or more), counting the writes acknowledged.
func startServerWriter(db *sql.DB) (acked *atomic.Int64, stop func()) {
	acked = new(atomic.Int64)
	stopc, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for id := 100001; ; id++ {
			select {
			case <-stopc:
				return
			default:
			}
			if _, err := db.Exec("INSERT INTO shop.orders VALUES (?, 'during')", id); err == nil {
				acked.Add(1)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return acked, sync.OnceFunc(func() { close(stopc); <-done })
}

// waitFollowing waits until the cluster key reaches phase Following and returns it.
func (s *stack) waitFollowing(key client.ObjectKey, what string) dolphinv1.MySQLCluster {
	s.t.Helper()
	var c dolphinv1.MySQLCluster
	testenv.Eventually(s.t, 240*time.Second, what, func() error {
		if err := s.c.Get(s.ctx, key, &c); err != nil {
			return err
		}
		if c.Status.Phase != dolphinv1.PhaseFollowing || c.Status.Topology == nil {
			return fmt.Errorf("phase %s, topology %+v", c.Status.Phase, c.Status.Topology)
		}
		return nil
	})
	return c
}

// createWayBack creates, before the cluster named cluster (spec.bootstrap is set at
// creation), the Service at which the server reaches the cluster's primary on the way back
// (docs/migrate.md), and returns its ClusterIP: from the host it works (kube-proxy runs there).
func (s *stack) createWayBack(cluster string) string {
	s.t.Helper()
	owner := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: cluster}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: cluster + "-way-back"},
		Spec: corev1.ServiceSpec{Selector: resources.RoleSelector(owner, dolphinv1.RolePrimary),
			Ports: []corev1.ServicePort{{Name: "mysql", Port: 3306, TargetPort: intstr.FromInt32(3306)}}}}
	if err := s.c.Create(s.ctx, svc); err != nil {
		s.t.Fatal(err)
	}
	return svc.Spec.ClusterIP
}
