package e2e

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
)

// TestLocalBootstrapFromExternalServer: a MariaDB server on the host, outside the cluster (a
// "VM" the pods reach at the node's gateway), with data and an application account, is the
// spec.bootstrap.external of a new 3-instance cluster on dolphin local. Its binary log format
// is MIXED at first: the cluster stays without a pod, Failed with the fix in its message;
// changed to ROW on the server, the cluster is checked again by itself, copied by its first
// instance, the others cloned, and Ready: every instance holds the server's rows, the
// application account logs in through the primary Service with its own password and writes.
func TestLocalBootstrapFromExternalServer(t *testing.T) {
	s := upStack(t)
	src := dbtest.Start(t, dbtest.Options{Instances: 1}).Instances[0]
	src.Stop(t)
	src.Start(t, "--bind-address="+src.Host+","+s.gateway()) // reachable from the pods
	srcDB, err := sql.Open("mysql", "root@unix("+src.SocketPath()+")/")
	if err != nil {
		t.Fatal(err)
	}
	defer srcDB.Close()
	for _, q := range []string{
		"SET GLOBAL read_only = OFF", "SET GLOBAL binlog_format = 'MIXED'",
		"CREATE DATABASE shop", "CREATE TABLE shop.orders (id INT PRIMARY KEY, item VARCHAR(50) NOT NULL)",
		"INSERT INTO shop.orders SELECT seq, CONCAT('item-', seq) FROM shop.seq_1_to_5000",
		"CREATE USER 'shop'@'%' IDENTIFIED BY 'shop-pw'", "GRANT SELECT, INSERT ON shop.* TO 'shop'@'%'",
		"CREATE USER 'migrate'@'%' IDENTIFIED BY 'mig-pw'",
		"GRANT SELECT, SHOW VIEW, TRIGGER, EVENT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'migrate'@'%'",
	} {
		if _, err := srcDB.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var srcPos string
	if err := srcDB.QueryRow("SELECT @@gtid_binlog_pos").Scan(&srcPos); err != nil {
		t.Fatal(err)
	}
	if err := s.c.Create(s.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "old-db"},
		StringData: map[string]string{"username": "migrate", "password": "mig-pw"}}); err != nil {
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
}
