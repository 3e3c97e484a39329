package controller

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/binlog"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// TestEnvtestBinlogArchive follows continuous archiving through its life: it waits for a
// base backup, then runs the archiver (Deployment and Secret owned by the cluster, reading
// from the replicas Service first, starting at the newest backup's position), reports what
// the archiver says (True while it keeps up, False once the primary has been ahead for longer
// than stallAfter or when its pod does not run), and removes the archiver when it is turned
// off.
func TestEnvtestBinlogArchive(t *testing.T) {
	needEnvtest(t)
	ctx := context.Background()
	c := directClient(t, nil)
	ns := newNamespace(t)
	mustCreate(t, c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: ns},
		Data: map[string][]byte{S3AccessKeyIDKey: []byte("AKID"), S3SecretAccessKeyKey: []byte("sekrit")}})
	key := createCluster(t, c, ns, "db", dolphinv1.MySQLClusterSpec{Backup: &dolphinv1.BackupSpec{
		Store:               &dolphinv1.BackupStore{S3: &dolphinv1.S3Store{Endpoint: "http://127.0.0.1:1", Bucket: "backups", Prefix: "prod/", CredentialsSecret: "s3"}},
		ContinuousArchiving: &dolphinv1.ContinuousArchiving{Enabled: true, SegmentMaxAge: &metav1.Duration{Duration: 2 * time.Second}},
	}})
	var mu sync.Mutex
	answer := binlog.Status{}
	var asked []string
	r := &MySQLClusterReconciler{Client: c, Scheme: envScheme,
		ArchiveStatus: func(_ context.Context, _ *dolphinv1.MySQLCluster, pod *corev1.Pod) (binlog.Status, error) {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, pod.Status.PodIP)
			return answer, nil
		}}
	reconcile := func() *dolphinv1.MySQLCluster {
		t.Helper()
		if _, err := r.Reconcile(ctrl.LoggerInto(ctx, ctrl.Log), ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatalf("reconcile: %v", err)
		}
		return getCluster(t, c, key)
	}
	wantCond := func(cl *dolphinv1.MySQLCluster, status metav1.ConditionStatus, reason, msg string) {
		t.Helper()
		got := meta.FindStatusCondition(cl.Status.Conditions, dolphinv1.ConditionContinuousArchiving)
		if got == nil || got.Status != status || got.Reason != reason || !strings.Contains(got.Message, msg) {
			t.Fatalf("ContinuousArchiving = %+v, want %s %s containing %q", got, status, reason, msg)
		}
	}
	name := types.NamespacedName{Namespace: ns, Name: "db-binlog-archive"}

	// No backup yet: nothing runs, and the condition says what to do.
	cl := reconcile()
	wantCond(cl, metav1.ConditionFalse, "WaitingForBaseBackup", "create a MySQLBackup")
	if err := c.Get(ctx, name, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Fatalf("an archiver Deployment before any backup: %v", err)
	}

	// Two successful backups: the archive starts at the newest one's position.
	for i, b := range []struct {
		name, gtid string
		ended      time.Time
	}{{"old", "0-1-3", time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)}, {"new", "0-1-5", time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)}} {
		bk := &dolphinv1.MySQLBackup{ObjectMeta: metav1.ObjectMeta{Name: b.name, Namespace: ns}, Spec: dolphinv1.MySQLBackupSpec{Cluster: "db"}}
		mustCreate(t, c, bk)
		done := metav1.NewTime(b.ended)
		bk.Status = dolphinv1.MySQLBackupStatus{Phase: dolphinv1.BackupSucceeded, GTIDPosition: b.gtid, CompletionTime: &done}
		if err := c.Status().Update(ctx, bk); err != nil {
			t.Fatalf("backup %d: %v", i, err)
		}
	}
	cl = reconcile()
	wantCond(cl, metav1.ConditionFalse, "ArchiverNotRunning", "has no pod yet")
	var d appsv1.Deployment
	if err := c.Get(ctx, name, &d); err != nil {
		t.Fatalf("the archiver's Deployment: %v", err)
	}
	args := d.Spec.Template.Spec.Containers[0].Command
	n := resources.NamesFor(cl)
	var replicas, primary corev1.Service
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: n.ReplicaService}, &replicas); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: n.PrimaryService}, &primary); err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(args, " ")
	for _, want := range []string{"binlog-archive", "--start 0-1-5", "--segment-max-age 2s", "--prefix " + ns + "/db/binlog/",
		"--source " + replicas.Spec.ClusterIP + ":3306", "--user " + resources.ReplicationUser} {
		if !strings.Contains(joined, want) {
			t.Errorf("archiver command %q lacks %q", joined, want)
		}
	}
	// Never the primary while there are replicas: its binary log may end in a transaction
	// no replica acknowledged.
	if strings.Count(joined, "--source ") != 1 || strings.Contains(joined, primary.Spec.ClusterIP+":3306") {
		t.Errorf("archiver command %q: want the replicas Service as its only source", joined)
	}
	if refs := d.OwnerReferences; len(refs) != 1 || refs[0].UID != cl.UID || refs[0].Controller == nil || !*refs[0].Controller {
		t.Errorf("Deployment owners %+v: want the cluster as controller", refs)
	}
	if d.Spec.Template.Labels[resources.LabelName] == resources.SelectorLabels(cl)[resources.LabelName] {
		t.Errorf("the archiver pod has the instances' labels %v: the cluster's Services would select it", d.Spec.Template.Labels)
	}
	var sec corev1.Secret
	if err := c.Get(ctx, name, &sec); err != nil {
		t.Fatal(err)
	}
	var creds corev1.Secret
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: resources.CredentialsSecretName(cl)}, &creds); err != nil {
		t.Fatal(err)
	}
	var cfg objectstore.Config
	if err := json.Unmarshal(sec.Data[resources.ArchiveStoreConfigKey], &cfg); err != nil || cfg.S3 == nil || cfg.S3.Bucket != "backups" || cfg.S3.SecretAccessKey != "sekrit" {
		t.Errorf("store.json %s (%v)", sec.Data[resources.ArchiveStoreConfigKey], err)
	}
	if string(sec.Data[resources.ArchivePasswordKey]) != string(creds.Data[resources.ReplicationPasswordKey]) || len(sec.Data[resources.AgentTokenKey]) == 0 {
		t.Errorf("the archiver's Secret lacks the replication password or the token: keys %v", mapKeys(sec.Data))
	}
	if d.Spec.Template.Annotations[resources.BinlogArchiveSecretHashAnnotation] != secretDigest(&sec) {
		t.Errorf("pod template annotation %q, Secret digest %q", d.Spec.Template.Annotations[resources.BinlogArchiveSecretHashAnnotation], secretDigest(&sec))
	}
	rv := d.ResourceVersion
	reconcile()
	if err := c.Get(ctx, name, &d); err != nil || d.ResourceVersion != rv {
		t.Errorf("an unchanged Deployment was written again (resourceVersion %s → %s, %v)", rv, d.ResourceVersion, err)
	}

	// Its pod runs; the primary is where the archive is.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-binlog-archive-x", Namespace: ns, Labels: resources.BinlogArchiveLabels(cl)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: resources.ContainerBinlogArchive, Image: "dolphin"}}}}
	mustCreate(t, c, pod)
	pod.Status = corev1.PodStatus{PodIP: "10.0.0.42", Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	cl.Status.Topology = &dolphinv1.TopologyStatus{Primary: "db-0", Instances: []dolphinv1.InstanceTopology{{Name: "db-0", Reachable: true, GTIDExecuted: "0-1-9"}}}
	if err := c.Status().Update(ctx, cl); err != nil {
		t.Fatal(err)
	}
	commit := time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)
	mu.Lock()
	answer = binlog.Status{Position: "0-1-9", Connected: true, Source: replicas.Spec.ClusterIP + ":3306", LastCommit: commit, LastUpload: commit.Add(time.Second)}
	mu.Unlock()
	cl = reconcile()
	wantCond(cl, metav1.ConditionTrue, "Archiving", `archived up to "0-1-9"`)
	a := cl.Status.Backup.Archive
	if a == nil || a.LastArchivedGTID != "0-1-9" || a.Location != "s3://backups/prod/"+ns+"/db/binlog/" || a.LagSeconds != 0 ||
		a.LastRecoverableTime == nil || !a.LastRecoverableTime.Time.Equal(commit) ||
		a.FirstRecoverableTime == nil || !a.FirstRecoverableTime.Time.Equal(time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)) {
		t.Fatalf("status.backup.archive %+v", a)
	}
	mu.Lock()
	if !slices.Contains(asked, "10.0.0.42") {
		t.Errorf("the archiver was asked at %v, not at its pod IP", asked)
	}
	mu.Unlock()

	// The primary moves on and the archive does not, for longer than stallAfter (1m).
	cl.Status.Topology.Instances[0].GTIDExecuted = "0-1-200"
	if err := c.Status().Update(ctx, cl); err != nil {
		t.Fatal(err)
	}
	r.archives.setBehindSince(key, time.Now().Add(-90*time.Second))
	mu.Lock()
	answer.Connected, answer.LastError, answer.LastErrorTime = false, "storing segment 0000000007: 503 Slow Down", time.Now()
	mu.Unlock()
	cl = reconcile()
	wantCond(cl, metav1.ConditionFalse, "Stalled", "503 Slow Down")
	if a := cl.Status.Backup.Archive; a.LagSeconds < 90 || a.LastError == "" {
		t.Errorf("status.backup.archive %+v: want the lag and the error", a)
	}

	// TLS turned on: the archiver gets the instances' CA and reads over TLS, verifying the
	// Service's name.
	if strings.Contains(joined, "--source-ca") {
		t.Errorf("archiver command without TLS %q has --source-ca", joined)
	}
	cl.Spec.TLS.Enabled = true
	if err := c.Update(ctx, cl); err != nil {
		t.Fatal(err)
	}
	cl = reconcile()
	if err := c.Get(ctx, name, &sec); err != nil {
		t.Fatal(err)
	}
	var tlsSecret corev1.Secret
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: resources.TLSSecretName(cl)}, &tlsSecret); err != nil {
		t.Fatal(err)
	}
	if ca := sec.Data[resources.ArchiveServerCAKey]; len(ca) == 0 || string(ca) != string(tlsSecret.Data[resources.TLSCAKey]) {
		t.Errorf("the archiver's Secret has CA %q, want the TLS Secret's ca.crt", ca)
	}
	if err := c.Get(ctx, name, &d); err != nil {
		t.Fatal(err)
	}
	joined = strings.Join(d.Spec.Template.Spec.Containers[0].Command, " ")
	if want := "--source-server-name " + n.ReplicaService + "." + ns + ".svc"; !strings.Contains(joined, want) || !strings.Contains(joined, "--source-ca ") {
		t.Errorf("archiver command with TLS %q lacks --source-ca and %q", joined, want)
	}

	// Turned off: the archiver goes, the archive's status and condition too.
	cl.Spec.Backup.ContinuousArchiving.Enabled = false
	if err := c.Update(ctx, cl); err != nil {
		t.Fatal(err)
	}
	cl = reconcile()
	if got := meta.FindStatusCondition(cl.Status.Conditions, dolphinv1.ConditionContinuousArchiving); got != nil || cl.Status.Backup.Archive != nil {
		t.Errorf("after turning archiving off: condition %+v, archive %+v", got, cl.Status.Backup.Archive)
	}
	if err := c.Get(ctx, name, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Deployment after turning archiving off: %v", err)
	}
	if err := c.Get(ctx, name, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Secret after turning archiving off: %v", err)
	}
}

func mapKeys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
