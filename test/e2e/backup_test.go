package e2e

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/objectstore/s3test"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestLocalBackupAndRestore backs up a 3-instance cluster under an application writer into a
// real S3 server (versitygw), restores it into a new cluster and checks row by row that the
// restored data is exactly the source's history up to the backup's GTID position, including
// every write acknowledged before the backup started; then it checks the faults: wrong store
// credentials fail a backup without a manifest (the next one succeeds), and a corrupted object
// makes a restore refuse with the object's name before any server starts.
func TestLocalBackupAndRestore(t *testing.T) {
	s := upStack(t)
	srv := s3test.StartOn(t, s.gateway())
	s.createS3Secret("s3", srv.AccessKey, srv.SecretKey)

	src, srcKey := s.healthyAppCluster("src")
	s.setBackupStore(srcKey, srv)
	w := s.startSteadyAppWriter("src")

	// Everything acknowledged before the backup is created must be in it.
	time.Sleep(2 * time.Second)
	ackedBefore, _ := w.ackedIDs()
	b1 := s.backupAndWait("b1", "src", dolphinv1.BackupSucceeded)
	t.Logf("b1: source %s (%s), GTID %s, %s in %s at %s", b1.Status.SourceInstance, b1.Status.SourceRole,
		b1.Status.GTIDPosition, b1.Status.StoredSize, b1.Status.Duration, b1.Status.Manifest)
	if b1.Status.SourceRole != dolphinv1.RoleReplica || b1.Status.GTIDPosition == "" || b1.Status.Objects < 1 {
		t.Fatalf("backup status %+v: want it taken on a replica, with a GTID position and objects", b1.Status)
	}
	time.Sleep(time.Second) // writes after the backup, which the restore must not hold
	w.finish()
	acked, failed := w.ackedIDs()
	t.Logf("writer: %d acknowledged (%d before the backup), %d failed", len(acked), len(ackedBefore), failed)
	srcPrimary := s.sqlDB(s.serviceAddr("src-primary"))
	srcIDs := s.ids(srcPrimary)
	if lost := lostOn(t, srcPrimary, acked); lost != 0 {
		t.Fatalf("%d acknowledged writes missing on the source", lost)
	}
	s.wantClusterCondition(srcKey, dolphinv1.ConditionLastBackupSucceeded, metav1.ConditionTrue, "b1")

	// Restore into a new cluster.
	dst := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "dst"},
		Spec: dolphinv1.MySQLClusterSpec{Instances: 3, Storage: dolphinv1.StorageSpec{DeletePolicy: dolphinv1.VolumeDelete},
			MySQLConfig: src.Spec.MySQLConfig,
			Bootstrap:   &dolphinv1.BootstrapSpec{Backup: &dolphinv1.BackupReference{Name: "b1"}}}}
	if err := s.c.Create(s.ctx, dst); err != nil {
		t.Fatal(err)
	}
	dstKey := client.ObjectKeyFromObject(dst)
	s.waitHealthy(dstKey)
	s.wantClusterCondition(dstKey, dolphinv1.ConditionRestored, metav1.ConditionTrue, b1.Status.Path)

	// Row by row: the restored rows are exactly the source's rows up to some point of its
	// history (the writer commits ids in increasing order), and that point is at or after
	// every write acknowledged before the backup.
	dstPass := s.secretValue("dst-credentials", "operator-password")
	for _, pod := range s.clusterPods("dst") {
		db := s.sqlDBAs("dolphin", dstPass, pod.Status.PodIP+":3306")
		got := s.ids(db)
		if len(got) == 0 {
			t.Fatalf("%s holds no rows", pod.Name)
		}
		last := got[len(got)-1]
		var want []int64
		for _, id := range srcIDs {
			if id <= last {
				want = append(want, id)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: %d rows up to id %d, but the source holds %d rows up to that id: not a consistent point of its history", pod.Name, len(got), last, len(want))
		}
		missing := 0
		for id := range ackedBefore {
			if id > last {
				missing++
			}
		}
		if missing > 0 {
			t.Fatalf("%s: %d writes acknowledged before the backup are missing (restored up to id %d)", pod.Name, missing, last)
		}
		var pos string
		if err := db.QueryRow("SELECT @@gtid_current_pos").Scan(&pos); err != nil {
			t.Fatal(err)
		}
		if seqOf(pos) < seqOf(b1.Status.GTIDPosition) {
			t.Fatalf("%s: gtid_current_pos %s is behind the backup's %s", pod.Name, pos, b1.Status.GTIDPosition)
		}
		t.Logf("%s: %d rows (source: %d), restored up to id %d, gtid_current_pos %s", pod.Name, len(got), len(srcIDs), last, pos)
	}
	// The restored cluster takes writes from the application account it was restored with,
	// and continues the backup's GTID sequence.
	app := s.sqlDBAs(appUser, appPassword, s.serviceAddr("dst-primary"))
	for id := int64(1_000_000); id < 1_000_010; id++ {
		if _, err := app.Exec("INSERT INTO app.rows VALUES (?)", id); err != nil {
			t.Fatalf("write %d through dst-primary as the restored application account: %v", id, err)
		}
	}
	dstPrimary := s.sqlDBAs("dolphin", dstPass, s.serviceAddr("dst-primary"))
	var after string
	if err := dstPrimary.QueryRow("SELECT @@gtid_binlog_pos").Scan(&after); err != nil {
		t.Fatal(err)
	}
	if seqOf(after) <= seqOf(b1.Status.GTIDPosition) {
		t.Fatalf("the restored primary's binlog position %s does not continue the backup's %s", after, b1.Status.GTIDPosition)
	}

	// A backup with wrong store credentials fails with the reason and writes no manifest;
	// the next one, with the credentials fixed, succeeds.
	s.createS3Secret("s3", srv.AccessKey, "wrong-secret")
	b2 := s.backupAndWait("b2", "src", dolphinv1.BackupFailed)
	t.Logf("b2 failed as it should: %s", b2.Status.Error)
	if !strings.Contains(b2.Status.Error, "credentials") && !strings.Contains(strings.ToLower(b2.Status.Error), "signature") {
		t.Fatalf("b2 error %q does not say the credentials are wrong", b2.Status.Error)
	}
	if _, err := os.Stat(filepath.Join(srv.Dir, srv.Bucket, "e2e", b2.Status.Path, "manifest.json")); err == nil {
		t.Fatal("the failed backup wrote a manifest")
	}
	s.wantClusterCondition(srcKey, dolphinv1.ConditionLastBackupSucceeded, metav1.ConditionFalse, "b2")
	s.createS3Secret("s3", srv.AccessKey, srv.SecretKey)

	// A missing bucket and an unreachable endpoint fail the same way, each with its reason.
	var lastFailed *dolphinv1.MySQLBackup
	for _, tc := range []struct{ name, endpoint, bucket, want string }{
		{"b2-nobucket", srv.Endpoint, "no-such-bucket", "the S3 bucket does not exist"},
		{"b2-unreachable", "http://" + s.gateway() + ":1", srv.Bucket, "cannot reach the S3 endpoint"},
	} {
		s.setBackupStoreTo(srcKey, tc.endpoint, tc.bucket)
		b := s.backupAndWait(tc.name, "src", dolphinv1.BackupFailed)
		if !strings.Contains(b.Status.Error, tc.want) {
			t.Fatalf("%s error %q, want it to say %q", tc.name, b.Status.Error, tc.want)
		}
		t.Logf("%s failed as it should: %.160s", tc.name, b.Status.Error)
		lastFailed = b
	}
	s.setBackupStore(srcKey, srv)
	// b3 may end within the second in which the last failure was recorded (a small database,
	// MariaDB 10.11.19's quick backup tool): the condition must still name it.
	b3 := s.backupAndWait("b3", "src", dolphinv1.BackupSucceeded)
	t.Logf("b3 ended %s (created %s); %s failed at %s (created %s)", b3.Status.CompletionTime.UTC().Format(time.RFC3339),
		b3.CreationTimestamp.UTC().Format(time.RFC3339), lastFailed.Name, lastFailed.Status.CompletionTime.UTC().Format(time.RFC3339),
		lastFailed.CreationTimestamp.UTC().Format(time.RFC3339))
	s.wantClusterCondition(srcKey, dolphinv1.ConditionLastBackupSucceeded, metav1.ConditionTrue, "b3")

	// The operator killed while a backup runs: the restarted operator resumes following the
	// agent's job by its ID and records the result.
	b4 := &dolphinv1.MySQLBackup{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "b4"}, Spec: dolphinv1.MySQLBackupSpec{Cluster: "src"}}
	if err := s.c.Create(s.ctx, b4); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "b4 running", func() error {
		if err := s.c.Get(s.ctx, client.ObjectKeyFromObject(b4), b4); err != nil {
			return err
		}
		if b4.Status.Phase != dolphinv1.BackupRunning {
			return fmt.Errorf("phase %q", b4.Status.Phase)
		}
		return nil
	})
	s.crashOperator()
	testenv.Eventually(t, 120*time.Second, "b4 finished after the operator restart", func() error {
		if err := s.c.Get(s.ctx, client.ObjectKeyFromObject(b4), b4); err != nil {
			return err
		}
		switch b4.Status.Phase {
		case dolphinv1.BackupSucceeded:
			return nil
		case dolphinv1.BackupFailed:
			t.Fatalf("b4 failed after the operator restart: %s", b4.Status.Error)
		}
		return fmt.Errorf("phase %q", b4.Status.Phase)
	})
	t.Logf("b4 survived an operator restart: GTID %s, %s, job %s", b4.Status.GTIDPosition, b4.Status.StoredSize, b4.Status.JobID)
	if _, err := os.Stat(filepath.Join(srv.Dir, srv.Bucket, "e2e", b4.Status.Path, "manifest.json")); err != nil {
		t.Fatalf("b4's manifest: %v", err)
	}

	// A restore check of b1 in a throwaway pod.
	b1 = s.verifyAndWait("b1", "1", dolphinv1.VerificationVerified)
	t.Logf("b1 verified: %s", b1.Status.Verification.Message)
	if !strings.Contains(b1.Status.Verification.Message, "gtid="+b1.Status.GTIDPosition) || !strings.Contains(b1.Status.Verification.Message, "tables=1") {
		t.Fatalf("verification result %q does not name the backup's position and its table", b1.Status.Verification.Message)
	}

	// A corrupted object: the restore refuses with the object's name; no server starts.
	obj := filepath.Join(srv.Dir, srv.Bucket, "e2e", b1.Status.Path, "data.mbstream.zst")
	testenv.FlipByte(t, obj)
	bad := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "bad"},
		Spec: dolphinv1.MySQLClusterSpec{Instances: 1, Storage: dolphinv1.StorageSpec{DeletePolicy: dolphinv1.VolumeDelete},
			Bootstrap: &dolphinv1.BootstrapSpec{Backup: &dolphinv1.BackupReference{Name: "b1"}}}}
	if err := s.c.Create(s.ctx, bad); err != nil {
		t.Fatal(err)
	}
	badKey := client.ObjectKeyFromObject(bad)
	testenv.Eventually(t, 180*time.Second, "the corrupt restore reported", func() error {
		var c dolphinv1.MySQLCluster
		if err := s.c.Get(s.ctx, badKey, &c); err != nil {
			return err
		}
		ready := meta.FindStatusCondition(c.Status.Conditions, dolphinv1.ConditionReady)
		if c.Status.Phase != dolphinv1.PhaseFailed || ready == nil || ready.Reason != "RestoreFailed" {
			return fmt.Errorf("phase %s, Ready %+v", c.Status.Phase, ready)
		}
		if !strings.Contains(ready.Message, "data.mbstream.zst") {
			t.Fatalf("the failure does not name the object: %s", ready.Message)
		}
		t.Logf("bad: %s", ready.Message)
		return nil
	})
	// The check of the corrupted backup fails and says why.
	b1 = s.verifyAndWait("b1", "2", dolphinv1.VerificationFailed)
	t.Logf("b1 check after the corruption: %s", b1.Status.Verification.Message)
	if !strings.Contains(b1.Status.Verification.Message, "data.mbstream.zst") {
		t.Fatalf("failed check %q does not name the object", b1.Status.Verification.Message)
	}
	for _, p := range s.clusterPods("bad") {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == "mysqld" && (cs.State.Running != nil || cs.RestartCount > 0 || cs.LastTerminationState.Terminated != nil) {
				t.Fatalf("%s: mysqld ran on a corrupt restore: %+v", p.Name, cs)
			}
		}
	}
}

// createS3Secret creates or replaces the store credentials Secret.
func (s *stack) createS3Secret(name, access, secret string) {
	s.t.Helper()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name},
		Data: map[string][]byte{"access-key-id": []byte(access), "secret-access-key": []byte(secret)}}
	if err := s.c.Create(s.ctx, sec); err != nil {
		if err := s.c.Update(s.ctx, sec); err != nil {
			s.t.Fatal(err)
		}
	}
}

// setBackupStore points a cluster's spec.backup at the S3 server.
func (s *stack) setBackupStore(key client.ObjectKey, srv *s3test.Server) {
	s.t.Helper()
	s.setBackupStoreTo(key, srv.Endpoint, srv.Bucket)
}

// setBackupStoreTo points a cluster's spec.backup at an endpoint and bucket.
func (s *stack) setBackupStoreTo(key client.ObjectKey, endpoint, bucket string) {
	s.t.Helper()
	var c dolphinv1.MySQLCluster
	if err := s.c.Get(s.ctx, key, &c); err != nil {
		s.t.Fatal(err)
	}
	patch := client.MergeFrom(c.DeepCopy())
	c.Spec.Backup = &dolphinv1.BackupSpec{Store: &dolphinv1.BackupStore{S3: &dolphinv1.S3Store{
		Endpoint: endpoint, Bucket: bucket, Prefix: "e2e/", ForcePathStyle: true, CredentialsSecret: "s3"}}}
	if err := s.c.Patch(s.ctx, &c, patch); err != nil {
		s.t.Fatal(err)
	}
}

// backupAndWait creates a MySQLBackup and waits until it reaches phase want (failing at once
// if it ends in the other terminal phase).
func (s *stack) backupAndWait(name, cluster string, want dolphinv1.BackupPhase) *dolphinv1.MySQLBackup {
	s.t.Helper()
	b := &dolphinv1.MySQLBackup{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name}, Spec: dolphinv1.MySQLBackupSpec{Cluster: cluster}}
	if err := s.c.Create(s.ctx, b); err != nil {
		s.t.Fatal(err)
	}
	testenv.Eventually(s.t, 180*time.Second, "backup "+name+" "+string(want), func() error {
		if err := s.c.Get(s.ctx, client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		switch b.Status.Phase {
		case want:
			return nil
		case dolphinv1.BackupSucceeded, dolphinv1.BackupFailed:
			s.t.Fatalf("backup %s ended %s, want %s: %s", name, b.Status.Phase, want, b.Status.Error)
		}
		return fmt.Errorf("phase %q %v", b.Status.Phase, b.Status.Conditions)
	})
	return b
}

func (s *stack) wantClusterCondition(key client.ObjectKey, typ string, status metav1.ConditionStatus, msgPart string) {
	s.t.Helper()
	testenv.Eventually(s.t, 60*time.Second, typ+" "+string(status), func() error {
		var c dolphinv1.MySQLCluster
		if err := s.c.Get(s.ctx, key, &c); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, typ)
		if cond == nil || cond.Status != status || !strings.Contains(cond.Message, msgPart) {
			return fmt.Errorf("%s condition %+v", typ, cond)
		}
		return nil
	})
}

func (s *stack) secretValue(name, key string) string {
	s.t.Helper()
	var sec corev1.Secret
	if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: name}, &sec); err != nil {
		s.t.Fatal(err)
	}
	return string(sec.Data[key])
}

// clusterPods lists one cluster's pods.
func (s *stack) clusterPods(cluster string) []corev1.Pod {
	s.t.Helper()
	var pods corev1.PodList
	if err := s.c.List(s.ctx, &pods, client.InNamespace(s.ns), client.MatchingLabels{"app.kubernetes.io/instance": cluster}); err != nil {
		s.t.Fatal(err)
	}
	return pods.Items
}

func (s *stack) sqlDBAs(user, password, addr string) *sql.DB {
	return s.sqlDBConnectTimeout(user, password, addr, 2*time.Second)
}

// sqlDBConnectTimeout is sqlDBAs with the given connect timeout.
func (s *stack) sqlDBConnectTimeout(user, password, addr string, connect time.Duration) *sql.DB {
	db, err := sql.Open("mysql", fmt.Sprintf("%s:%s@tcp(%s)/?timeout=%s&readTimeout=5s&writeTimeout=5s", user, password, addr, connect))
	if err != nil {
		s.t.Fatal(err)
	}
	db.SetMaxIdleConns(0)
	s.t.Cleanup(func() { db.Close() })
	return db
}

// ids reads every id of app.rows in order.
func (s *stack) ids(db *sql.DB) []int64 {
	s.t.Helper()
	rows, err := db.Query("SELECT id FROM app.rows ORDER BY id")
	if err != nil {
		s.t.Fatal(err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			s.t.Fatal(err)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		s.t.Fatal(err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// seqOf is the sequence number of domain 0 in a MariaDB GTID position ("0-1-42" → 42).
func seqOf(pos string) int64 {
	for _, g := range strings.Split(pos, ",") {
		parts := strings.Split(strings.TrimSpace(g), "-")
		if len(parts) == 3 && parts[0] == "0" {
			n, _ := strconv.ParseInt(parts[2], 10, 64)
			return n
		}
	}
	return -1
}

// verifyAndWait asks for a restore check of a backup and waits for its result.
func (s *stack) verifyAndWait(name, request string, want dolphinv1.VerificationPhase) *dolphinv1.MySQLBackup {
	s.t.Helper()
	var b dolphinv1.MySQLBackup
	key := client.ObjectKey{Namespace: s.ns, Name: name}
	if err := s.c.Get(s.ctx, key, &b); err != nil {
		s.t.Fatal(err)
	}
	patch := client.MergeFrom(b.DeepCopy())
	if b.Annotations == nil {
		b.Annotations = map[string]string{}
	}
	b.Annotations[dolphinv1.VerifyAnnotation] = request
	if err := s.c.Patch(s.ctx, &b, patch); err != nil {
		s.t.Fatal(err)
	}
	testenv.Eventually(s.t, 180*time.Second, "check of "+name+" "+string(want), func() error {
		if err := s.c.Get(s.ctx, key, &b); err != nil {
			return err
		}
		v := b.Status.Verification
		if v == nil || v.Request != request || (v.Phase != dolphinv1.VerificationVerified && v.Phase != dolphinv1.VerificationFailed) {
			return fmt.Errorf("verification %+v", v)
		}
		if v.Phase != want {
			s.t.Fatalf("check of %s ended %s, want %s: %s", name, v.Phase, want, v.Message)
		}
		return nil
	})
	return &b
}
