package e2e

import (
	"bytes"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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
	// Replicating in, verifying (SELECT) and the cutover's fence (docs/migrate.md); and the
	// way back (fallback): following the cluster, and detached when writes move back.
	src, srcDB := s.startHostServer("SELECT, REPLICATION SLAVE, BINLOG MONITOR, READ_ONLY ADMIN, CONNECTION ADMIN, PROCESS, REPLICATION SLAVE ADMIN, SLAVE MONITOR, RELOAD")

	// The application writes on the server through the backup, the restore and after.
	acked, stopWriter := startServerWriter(srcDB)
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

	// The way back: the server reaches the cluster's primary at a Service of its own, made
	// before the cluster (spec.bootstrap is set at creation) as docs/migrate.md shows; from the
	// host its ClusterIP works (kube-proxy runs there).
	wayBack := s.createWayBack("phys")
	fl := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "phys"},
		Spec: dolphinv1.MySQLClusterSpec{Instances: 2, Storage: dolphinv1.StorageSpec{DeletePolicy: dolphinv1.VolumeDelete},
			MySQLConfig: map[string]dolphinv1.MySQLConfigValue{"innodb_buffer_pool_size": "32M"},
			Bootstrap: &dolphinv1.BootstrapSpec{External: &dolphinv1.ExternalSource{
				Host: s.gateway(), Port: int32(src.Port), AccountSecretName: "old-db", Replicate: true,
				PhysicalCopy: &dolphinv1.BackupLocation{Path: "migrations/shop/", Store: &dolphinv1.BackupStore{S3: &dolphinv1.S3Store{
					Endpoint: srv.Endpoint, Bucket: srv.Bucket, Prefix: "e2e/", ForcePathStyle: true, CredentialsSecret: "s3"}}},
				Fallback: &dolphinv1.ExternalFallback{PrimaryHost: wayBack}}}}}
	if err := s.c.Create(s.ctx, fl); err != nil {
		t.Fatal(err)
	}
	fkey := client.ObjectKeyFromObject(fl)
	began = time.Now()
	s.waitFollowing(fkey, "phase Following")
	t.Logf("restored on both instances and following in %v", time.Since(began).Round(time.Second))
	s.wantClusterCondition(fkey, dolphinv1.ConditionExternalSourceReady, metav1.ConditionTrue, "the backup migrations/shop/ was taken from it")
	s.wantClusterCondition(fkey, dolphinv1.ConditionRestored, metav1.ConditionTrue, "migrations/shop/")
	time.Sleep(2 * time.Second) // writes after the restore too
	stopWriter()
	want := s.wantFollowingHoldsServer(fkey, srcDB, acked.Load())
	t.Logf("%d rows, %d written on the server during the backup and after it, on both instances", want, acked.Load())

	s.verifyAndCutOver(fkey, src, srcDB)
	s.fallBack(fkey, src, srcDB, nil)
}

// fallBack waits until the server src follows the cluster fkey after its cutover (the way
// back), then asks for the fall back under an application that writes through the primary
// Service until refused and then to the server (held, unless nil, is called once the fall
// back is asked): the cluster is FellBack with no endpoint
// behind its primary Service, the server writable and detached, and every write the
// application was told committed on the server.
func (s *stack) fallBack(fkey client.ObjectKey, src *dbtest.Instance, srcDB *sql.DB, held func()) {
	t := s.t
	t.Helper()
	testenv.Eventually(t, 120*time.Second, "the server follows the cluster (the way back)", func() error {
		var c dolphinv1.MySQLCluster
		if err := s.c.Get(s.ctx, fkey, &c); err != nil {
			return err
		}
		x := c.Status.Topology.ExternalSource
		if x == nil || x.Fallback == nil || !x.Fallback.Replicating {
			return fmt.Errorf("externalSource %+v", x)
		}
		return nil
	})
	var svc corev1.Service
	if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: fkey.Name + "-primary"}, &svc); err != nil {
		t.Fatal(err)
	}
	w := startMovingWriter(s.sqlDBConnectTimeout("shop", "shop-pw", net.JoinHostPort(svc.Spec.ClusterIP, "3306"), time.Second),
		s.sqlDBConnectTimeout("shop", "shop-pw", src.Addr(), time.Second))
	defer w.stop()
	time.Sleep(time.Second)
	s.patchCluster(fkey, func(c *dolphinv1.MySQLCluster) { c.Annotations[dolphinv1.FallBackAnnotation] = "back" })
	if held != nil {
		held()
	}
	var rec *dolphinv1.CutoverRecord
	testenv.Eventually(t, 120*time.Second, "fell back", func() error {
		var c dolphinv1.MySQLCluster
		if err := s.c.Get(s.ctx, fkey, &c); err != nil {
			return err
		}
		x := c.Status.Topology.ExternalSource
		if x.LastFallBackFailure != nil {
			t.Fatalf("the fall back failed: %+v", x.LastFallBackFailure)
		}
		if x.FellBack == nil || c.Status.Phase != dolphinv1.PhaseFellBack || w.onTarget.Load() < 20 {
			return fmt.Errorf("phase %s, fell back %+v, %d writes on the server", c.Status.Phase, x.FellBack, w.onTarget.Load())
		}
		rec = x.FellBack
		return nil
	})
	w.stop()
	t.Logf("fell back to %s at %s: the servers' write pause %d ms, the application's %s (%d writes through the primary Service, %d on the server)",
		rec.Instance, rec.Position, rec.WritePauseMilliseconds, w.pause().Round(time.Millisecond), w.onSource.Load(), w.onTarget.Load())
	var ro int
	if err := srcDB.QueryRow("SELECT @@read_only").Scan(&ro); err != nil || ro != 0 {
		t.Errorf("the server after the fall back: read_only %d (%v), want 0", ro, err)
	}
	if eps := s.endpointAddresses(fkey.Name + "-primary"); len(eps) != 0 {
		t.Errorf("the primary Service of a cluster that fell back has endpoints %v", eps)
	}
	have := map[int]bool{}
	rows, err := srcDB.Query("SELECT id FROM shop.orders WHERE item = 'moving'")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		have[id] = true
	}
	lost := 0
	for _, id := range w.ackedIDs() {
		if !have[id] {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of the application's %d acknowledged writes across the fall back are not on the server", lost, len(w.ackedIDs()))
	}
}
