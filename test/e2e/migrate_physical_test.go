package e2e

import (
	"bytes"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/objectstore/s3test"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestLocalPhysicalCopyFollowsExternalServer: the physical way in. A MariaDB server on the
// host, outside the cluster, takes an application's writes the whole time; on its host,
// `dolphin backup` (the pod binary, as a user runs it there) streams a mariadb-backup of it
// into an S3 bucket; a 2-instance cluster names that backup in
// spec.bootstrap.external.physicalCopy with replicate: true. Both instances restore it
// (checksums verified) and the cluster follows the server from the backup's position: phase
// Following, every write the server acknowledged — before, during and after the backup — on
// both instances, none writable. Then the copy is verified and the cluster cut over under
// an application that moves from the server to the primary Service, as after the logical
// copy (verifyAndCutOver).
func TestLocalPhysicalCopyFollowsExternalServer(t *testing.T) {
	s := upStack(t)
	srv := s3test.StartOn(t, s.gateway())
	s.createS3Secret("s3", srv.AccessKey, srv.SecretKey)
	src := dbtest.Start(t, dbtest.Options{Instances: 1}).Instances[0]
	src.Stop(t)
	src.Start(t, "--bind-address="+src.Host+","+s.gateway()) // reachable from the pods
	srcDB, err := sql.Open("mysql", "root@unix("+src.SocketPath()+")/")
	if err != nil {
		t.Fatal(err)
	}
	defer srcDB.Close()
	for _, q := range []string{
		"SET GLOBAL read_only = OFF",
		"CREATE DATABASE shop", "CREATE TABLE shop.orders (id INT PRIMARY KEY, item VARCHAR(50) NOT NULL)",
		"INSERT INTO shop.orders SELECT seq, CONCAT('item-', seq) FROM shop.seq_1_to_5000",
		"CREATE USER 'shop'@'%' IDENTIFIED BY 'shop-pw'", "GRANT SELECT, INSERT ON shop.* TO 'shop'@'%'",
		"CREATE USER 'migrate'@'%' IDENTIFIED BY 'mig-pw'",
		// Replicating in, verifying (SELECT) and the cutover's fence (docs/migrate.md).
		"GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR, READ_ONLY ADMIN, CONNECTION ADMIN, PROCESS ON *.* TO 'migrate'@'%'",
	} {
		if _, err := srcDB.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := s.c.Create(s.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "old-db"},
		StringData: map[string]string{"username": "migrate", "password": "mig-pw"}}); err != nil {
		t.Fatal(err)
	}

	// The application writes on the server through the backup, the restore and after.
	var acked atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for id := 100001; ; id++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := srcDB.Exec("INSERT INTO shop.orders VALUES (?, 'during')", id); err == nil {
				acked.Add(1)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	stopWriter := sync.OnceFunc(func() { close(stop); <-done })
	defer stopWriter()

	// On the server's host: the pod binary's `dolphin backup`, as docs/migrate.md shows it.
	bin := filepath.Join(t.TempDir(), "dolphin-pod")
	build := exec.Command("go", "build", "-o", bin, "./cmd/dolphin-pod")
	build.Dir = repoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building dolphin-pod: %v\n%s", err, out)
	}
	began := time.Now()
	cmd := exec.CommandContext(s.ctx, bin, "backup", "--socket", src.SocketPath(), "--datadir", src.DataDir,
		"--defaults-file", src.ConfigFile, "--tmp-dir", t.TempDir(), "--path", "migrations/shop/",
		"--s3-endpoint", srv.Endpoint, "--s3-bucket", srv.Bucket, "--s3-prefix", "e2e/", "--s3-path-style")
	cmd.Env = append(os.Environ(), "DOLPHIN_BACKUP_USER=root", "S3_ACCESS_KEY_ID="+srv.AccessKey, "S3_SECRET_ACCESS_KEY="+srv.SecretKey)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("dolphin backup on the server's host: %v\n%s", err, out.String())
	}
	t.Logf("dolphin backup on the server's host in %v, %d writes acknowledged by the server so far", time.Since(began).Round(time.Millisecond), acked.Load())

	fl := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "phys"},
		Spec: dolphinv1.MySQLClusterSpec{Instances: 2, Storage: dolphinv1.StorageSpec{DeletePolicy: dolphinv1.VolumeDelete},
			MySQLConfig: map[string]dolphinv1.MySQLConfigValue{"innodb_buffer_pool_size": "32M"},
			Bootstrap: &dolphinv1.BootstrapSpec{External: &dolphinv1.ExternalSource{
				Host: s.gateway(), Port: int32(src.Port), AccountSecretName: "old-db", Replicate: true,
				PhysicalCopy: &dolphinv1.BackupLocation{Path: "migrations/shop/", Store: &dolphinv1.BackupStore{S3: &dolphinv1.S3Store{
					Endpoint: srv.Endpoint, Bucket: srv.Bucket, Prefix: "e2e/", ForcePathStyle: true, CredentialsSecret: "s3"}}}}}}}
	if err := s.c.Create(s.ctx, fl); err != nil {
		t.Fatal(err)
	}
	fkey := client.ObjectKeyFromObject(fl)
	began = time.Now()
	testenv.Eventually(t, 240*time.Second, "phase Following", func() error {
		var c dolphinv1.MySQLCluster
		if err := s.c.Get(s.ctx, fkey, &c); err != nil {
			return err
		}
		if c.Status.Phase != dolphinv1.PhaseFollowing {
			return fmt.Errorf("phase %s, topology %+v", c.Status.Phase, c.Status.Topology)
		}
		return nil
	})
	t.Logf("restored on both instances and following in %v", time.Since(began).Round(time.Second))
	s.wantClusterCondition(fkey, dolphinv1.ConditionExternalSourceReady, metav1.ConditionTrue, "the backup migrations/shop/ was taken from it")
	s.wantClusterCondition(fkey, dolphinv1.ConditionRestored, metav1.ConditionTrue, "migrations/shop/")
	time.Sleep(2 * time.Second) // writes after the restore too
	stopWriter()
	want := s.wantFollowingHoldsServer(fkey, srcDB, acked.Load())
	t.Logf("%d rows, %d written on the server during the backup and after it, on both instances", want, acked.Load())

	s.verifyAndCutOver(fkey, src, srcDB)
}
