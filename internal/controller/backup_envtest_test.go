package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/binlog"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// fakeAgent stands in for instance agents in the controller's envtest (the real agent and
// backups are proven in internal/agent, internal/backup and the e2e suite). It records the
// requests and answers with whatever status the test sets.
type fakeAgent struct {
	mu        sync.Mutex
	requests  []agent.BackupRequest
	pods      []string
	status    agent.BackupStatus
	statusErr error
	cancelled []string
	seeds     []agent.SeedRequest
	reseeds   []string
	keeps     []agent.KeepRequest
	// reseedKeeps are the copies named by each reseed request (nil: none).
	reseedKeeps []*agent.ReseedKeep
	keepResp    *agent.KeepResponse // nil: nothing to keep
	keepErr     error
	releases    int // ReleaseStop calls
	// upgradeGate, when set, holds every EngineUpgrade until it is closed; upgradeErr is
	// what EngineUpgrade then answers; upgrades counts the calls.
	upgradeGate chan struct{}
	upgradeErr  error
	upgrades    int
}

func (f *fakeAgent) Agent(_ context.Context, _ *dolphinv1.MySQLCluster, pod *corev1.Pod) (InstanceAgent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods = append(f.pods, pod.Name)
	return f, nil
}

func (f *fakeAgent) StartBackup(_ context.Context, req agent.BackupRequest) (agent.BackupStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, req)
	st := f.status
	st.ID = req.ID
	return st, nil
}

func (f *fakeAgent) BackupStatus(_ context.Context, id string) (agent.BackupStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.status
	st.ID = id
	return st, f.statusErr
}

func (f *fakeAgent) CancelBackup(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cancelled = append(f.cancelled, id)
	f.status.Phase = agent.BackupFailed
	return nil
}

func (f *fakeAgent) Seed(_ context.Context, req agent.SeedRequest) (agent.SeedStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seeds = append(f.seeds, req)
	return agent.SeedStatus{Phase: agent.SeedRunning, Mode: req.Mode}, nil
}

func (f *fakeAgent) Reseed(_ context.Context, req agent.ReseedRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reseeds = append(f.reseeds, req.Reason)
	f.reseedKeeps = append(f.reseedKeeps, req.Keep)
	return nil
}

func (f *fakeAgent) Keep(_ context.Context, req agent.KeepRequest) (*agent.KeepResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keeps = append(f.keeps, req)
	if f.keepErr != nil {
		return nil, f.keepErr
	}
	if f.keepResp == nil {
		return &agent.KeepResponse{Copy: binlog.KeptCopy{Name: req.Name, Instance: req.Instance, Primary: req.Primary}}, nil
	}
	r := *f.keepResp
	r.Copy.Name, r.Copy.Instance, r.Copy.Primary, r.Copy.PrimaryState = req.Name, req.Instance, req.Primary, req.PrimaryState
	return &r, nil
}

// GTIDState answers as every instance's server: the test's primary state.
func (f *fakeAgent) GTIDState(context.Context, agent.DBConn) (string, error) { return "0-1000-10", nil }

// EngineUpgrade answers as an agent whose server's tables are at its version already (after
// upgradeGate closes, when set), or upgradeErr.
func (f *fakeAgent) EngineUpgrade(ctx context.Context, _ agent.DBConn) (agent.EngineUpgradeResponse, error) {
	f.mu.Lock()
	f.upgrades++
	gate, err := f.upgradeGate, f.upgradeErr
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return agent.EngineUpgradeResponse{}, ctx.Err()
		}
	}
	if err != nil {
		return agent.EngineUpgradeResponse{}, err
	}
	return agent.EngineUpgradeResponse{From: "10.11.19-MariaDB", To: "10.11.19-MariaDB"}, nil
}

// ReleaseStop records the release.
func (f *fakeAgent) ReleaseStop(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.releases++
	return nil
}

func (f *fakeAgent) SeedStatus(context.Context) (agent.SeedStatus, error) {
	return agent.SeedStatus{Phase: agent.SeedWaiting}, nil
}

func (f *fakeAgent) set(st agent.BackupStatus, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.status, f.statusErr = st, err
}

// orderedStore records the order of deletions of a directory store.
type orderedStore struct {
	objectstore.Store
	mu      sync.Mutex
	deleted []string
}

func (s *orderedStore) Delete(ctx context.Context, keys ...string) error {
	s.mu.Lock()
	s.deleted = append(s.deleted, keys...)
	s.mu.Unlock()
	return s.Store.Delete(ctx, keys...)
}

// backupFixture is a cluster with a backup store, its Secrets, an observed topology and two
// ready pods (db-0 primary, db-1 replica) in a fresh namespace.
type backupFixture struct {
	t       *testing.T
	c       client.Client
	ns      string
	cluster types.NamespacedName
	agent   *fakeAgent
	store   *orderedStore
	r       *MySQLBackupReconciler
}

func newBackupFixture(t *testing.T, withSecret bool) *backupFixture {
	t.Helper()
	return newBackupFixtureWith(t, &dolphinv1.BackupSpec{Store: &dolphinv1.BackupStore{
		S3: &dolphinv1.S3Store{Endpoint: "http://127.0.0.1:1", Bucket: "backups", Prefix: "prod/", CredentialsSecret: "s3"}}}, withSecret)
}

// newBackupFixtureWith is newBackupFixture with the cluster's spec.backup given.
func newBackupFixtureWith(t *testing.T, spec *dolphinv1.BackupSpec, withSecret bool) *backupFixture {
	t.Helper()
	c := directClient(t, nil)
	ns := newNamespace(t)
	key := createCluster(t, c, ns, "db", dolphinv1.MySQLClusterSpec{Backup: spec})
	if withSecret {
		mustCreate(t, c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: ns},
			Data: map[string][]byte{S3AccessKeyIDKey: []byte("AKID"), S3SecretAccessKeyKey: []byte("sekrit\n")}})
	}
	mustCreate(t, c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db-credentials", Namespace: ns},
		Data: map[string][]byte{resources.OperatorPasswordKey: []byte("op-pw")}})
	dir, err := objectstore.NewDirectory(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := &backupFixture{t: t, c: c, ns: ns, cluster: key, agent: &fakeAgent{}, store: &orderedStore{Store: dir}}
	f.r = &MySQLBackupReconciler{Client: c, APIReader: c, Scheme: envScheme, Agents: f.agent,
		OpenStore: func(context.Context, objectstore.Config) (objectstore.Store, error) { return f.store, nil }}
	return f
}

func mustCreate(t *testing.T, c client.Client, o client.Object) {
	t.Helper()
	if err := c.Create(context.Background(), o); err != nil {
		t.Fatal(err)
	}
}

// observeTopology writes what the topology engine would: db-0 primary, db-1 a replica.
func (f *backupFixture) observeTopology() {
	f.t.Helper()
	ctx := context.Background()
	cl := getCluster(f.t, f.c, f.cluster)
	cl.Status.Topology = &dolphinv1.TopologyStatus{Primary: "db-0", Instances: []dolphinv1.InstanceTopology{
		{Name: "db-0", Reachable: true},
		{Name: "db-1", Reachable: true, Replicating: true, ReplicationLagSeconds: ptr.To(int64(0))},
	}}
	if err := f.c.Status().Update(ctx, cl); err != nil {
		f.t.Fatal(err)
	}
	for _, name := range []string{"db-0", "db-1"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Labels: resources.SelectorLabels(cl)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "mysqld", Image: "mariadb"}}}}
		mustCreate(f.t, f.c, p)
		p.Status = corev1.PodStatus{PodIP: "10.0.0.9", ContainerStatuses: []corev1.ContainerStatus{
			{Name: resources.ContainerMySQLD, Ready: true}, {Name: resources.ContainerAgent, Ready: true}}}
		if err := f.c.Status().Update(ctx, p); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *backupFixture) newBackup(name string) types.NamespacedName {
	f.t.Helper()
	mustCreate(f.t, f.c, &dolphinv1.MySQLBackup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: dolphinv1.MySQLBackupSpec{Cluster: "db"}})
	return types.NamespacedName{Namespace: f.ns, Name: name}
}

func (f *backupFixture) reconcile(key types.NamespacedName) {
	f.t.Helper()
	if _, err := f.r.Reconcile(ctrl.LoggerInto(context.Background(), ctrl.Log), ctrl.Request{NamespacedName: key}); err != nil {
		f.t.Fatalf("reconcile %s: %v", key, err)
	}
}

func (f *backupFixture) get(key types.NamespacedName) *dolphinv1.MySQLBackup {
	f.t.Helper()
	var b dolphinv1.MySQLBackup
	if err := f.c.Get(context.Background(), key, &b); err != nil {
		f.t.Fatal(err)
	}
	return &b
}

func wantBackupCondition(t *testing.T, b *dolphinv1.MySQLBackup, phase dolphinv1.BackupPhase, reason, msgPart string) {
	t.Helper()
	cond := meta.FindStatusCondition(b.Status.Conditions, dolphinv1.ConditionBackupComplete)
	if b.Status.Phase != phase || cond == nil || cond.Reason != reason || !strings.Contains(cond.Message, msgPart) {
		t.Fatalf("phase %q condition %+v; want phase %s, reason %s, message containing %q", b.Status.Phase, cond, phase, reason, msgPart)
	}
	// Succeeded says how it ended: a failure is never taken for a success.
	want := metav1.ConditionUnknown
	switch phase {
	case dolphinv1.BackupSucceeded:
		want = metav1.ConditionTrue
	case dolphinv1.BackupFailed:
		want = metav1.ConditionFalse
	}
	if s := meta.FindStatusCondition(b.Status.Conditions, dolphinv1.ConditionBackupSucceeded); s == nil || s.Status != want {
		t.Fatalf("phase %s: Succeeded condition %+v, want %s", phase, s, want)
	}
}

func TestEnvtestBackupWaitsWithReasons(t *testing.T) {
	needEnvtest(t)
	f := newBackupFixture(t, false)
	key := f.newBackup("first")
	f.reconcile(key)
	wantBackupCondition(t, f.get(key), dolphinv1.BackupPending, "BackupStoreSecretMissing", "Secret "+f.ns+"/s3")
	mustCreate(t, f.c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: f.ns},
		Data: map[string][]byte{S3AccessKeyIDKey: []byte("AKID")}})
	f.reconcile(key)
	wantBackupCondition(t, f.get(key), dolphinv1.BackupPending, "BackupStoreSecretIncomplete", "no key secret-access-key")
	other := types.NamespacedName{Namespace: f.ns, Name: "orphan"}
	mustCreate(t, f.c, &dolphinv1.MySQLBackup{ObjectMeta: metav1.ObjectMeta{Name: other.Name, Namespace: f.ns},
		Spec: dolphinv1.MySQLBackupSpec{Cluster: "nope"}})
	f.reconcile(other)
	wantBackupCondition(t, f.get(other), dolphinv1.BackupPending, "ClusterNotFound", "MySQLCluster nope does not exist")
	if len(f.agent.requests) != 0 {
		t.Fatalf("the agent was asked %d times before the backup could start", len(f.agent.requests))
	}
}

func TestEnvtestBackupLifecycle(t *testing.T) {
	needEnvtest(t)
	f := newBackupFixture(t, true)
	key := f.newBackup("nightly")
	f.reconcile(key)
	wantBackupCondition(t, f.get(key), dolphinv1.BackupPending, "NoBackupSource", "no established primary")

	f.observeTopology()
	f.agent.set(agent.BackupStatus{Phase: agent.BackupRunning}, nil)
	f.reconcile(key)
	b := f.get(key)
	wantBackupCondition(t, b, dolphinv1.BackupRunning, "Running", "db-1 (replica)")
	if len(f.agent.requests) != 1 {
		t.Fatalf("%d backup requests, want 1", len(f.agent.requests))
	}
	req := f.agent.requests[0]
	if req.ID != string(b.UID) || req.DB.User != resources.OperatorUser || req.DB.Password != "op-pw" || req.Meta.SourceInstance != "db-1" || req.Meta.SourceRole != "replica" {
		t.Fatalf("request %+v", req)
	}
	if !strings.HasPrefix(req.Prefix, f.ns+"/db/nightly-") || !strings.HasSuffix(req.Prefix, "Z/") || req.Prefix != b.Status.Path {
		t.Fatalf("prefix %q (status path %q)", req.Prefix, b.Status.Path)
	}
	var sc objectstore.Config
	if err := json.Unmarshal(req.Store, &sc); err != nil || sc.S3 == nil || sc.S3.AccessKeyID != "AKID" || sc.S3.SecretAccessKey != "sekrit" || sc.S3.Prefix != "prod/" {
		t.Fatalf("store %s (%v)", req.Store, err)
	}
	if !controllerContainsFinalizer(b) {
		t.Fatal("no finalizer on a running backup")
	}

	// Progress, then success.
	f.agent.set(agent.BackupStatus{Phase: agent.BackupRunning, StoredBytes: 4096}, nil)
	f.reconcile(key)
	if got := f.get(key).Status.StoredBytes; got != 4096 {
		t.Fatalf("stored bytes %d", got)
	}
	end := time.Now().UTC().Truncate(time.Second)
	m := &backup.Manifest{GTIDPosition: "0-1-42", EndTime: end, Objects: []backup.Object{{Key: "data.mbstream.zst", Size: 3 << 20, SHA256: "ab"}}}
	f.agent.set(agent.BackupStatus{Phase: agent.BackupSucceeded, Manifest: m}, nil)
	f.reconcile(key)
	b = f.get(key)
	wantBackupCondition(t, b, dolphinv1.BackupSucceeded, "Succeeded", "0-1-42")
	if b.Status.GTIDPosition != "0-1-42" || b.Status.StoredSize != "3.0Mi" || b.Status.Objects != 1 || b.Status.Duration == "" ||
		!strings.HasSuffix(b.Status.Manifest, b.Status.Path+"manifest.json") {
		t.Fatalf("status %+v", b.Status)
	}

	// The cluster reports it.
	if err := reconcileOnce(t, f.c, f.cluster); err != nil {
		t.Fatal(err)
	}
	cl := getCluster(t, f.c, f.cluster)
	cond := meta.FindStatusCondition(cl.Status.Conditions, dolphinv1.ConditionLastBackupSucceeded)
	if cond == nil || cond.Status != metav1.ConditionTrue || cl.Status.Backup == nil || cl.Status.Backup.LastSuccessfulBackup != "nightly" {
		t.Fatalf("cluster backup status %+v condition %+v", cl.Status.Backup, cond)
	}

	// A failure is reported on the backup and the cluster, with the tool's reason.
	key2 := f.newBackup("broken")
	f.agent.set(agent.BackupStatus{Phase: agent.BackupRunning}, nil)
	f.reconcile(key2)
	f.agent.set(agent.BackupStatus{Phase: agent.BackupFailed, Error: "mariadb-backup: Access denied"}, nil)
	f.reconcile(key2)
	wantBackupCondition(t, f.get(key2), dolphinv1.BackupFailed, "Failed", "Access denied")
	if err := reconcileOnce(t, f.c, f.cluster); err != nil {
		t.Fatal(err)
	}
	cl = getCluster(t, f.c, f.cluster)
	cond = meta.FindStatusCondition(cl.Status.Conditions, dolphinv1.ConditionLastBackupSucceeded)
	if cond == nil || cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, "Access denied") || !strings.Contains(cond.Message, "nightly") {
		t.Fatalf("cluster condition %+v", cond)
	}

	// Deleting the successful backup, its deletionPolicy changed to Delete (the one field of
	// the spec that may change), deletes its objects, the manifest first.
	ctx := context.Background()
	patch := client.MergeFrom(b.DeepCopy())
	b.Spec.DeletionPolicy = dolphinv1.BackupDelete
	if err := f.c.Patch(ctx, b, patch); err != nil {
		t.Fatalf("changing the deletionPolicy: %v", err)
	}
	for _, k := range []string{"data.mbstream.zst", backup.ManifestKey} {
		up, err := f.store.Create(ctx, b.Status.Path+k)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := up.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := up.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.c.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	f.reconcile(key)
	if err := f.c.Get(ctx, key, &dolphinv1.MySQLBackup{}); !apierrors.IsNotFound(err) {
		t.Fatalf("backup still there after its objects were deleted: %v", err)
	}
	if left, _ := f.store.List(ctx, b.Status.Path); len(left) != 0 || len(f.store.deleted) < 2 || f.store.deleted[0] != b.Status.Path+backup.ManifestKey {
		t.Fatalf("left %v, deleted in order %v: want the manifest first and nothing left", left, f.store.deleted)
	}
}

// Deleting a MySQLBackup keeps its data by default (deletionPolicy Retain): the object goes,
// the objects in the store stay and an event says where; the retention rules still delete the
// data of what they expire.
func TestEnvtestBackupRetainedOnDeletion(t *testing.T) {
	needEnvtest(t)
	ctx := context.Background()
	f := newBackupFixture(t, true)
	f.observeTopology()
	key := f.newBackup("kept")
	f.agent.set(agent.BackupStatus{Phase: agent.BackupRunning}, nil)
	f.reconcile(key)
	m := &backup.Manifest{GTIDPosition: "0-1-42", EndTime: time.Now().UTC().Truncate(time.Second), Objects: []backup.Object{{Key: "data.mbstream.zst", Size: 1, SHA256: "ab"}}}
	f.agent.set(agent.BackupStatus{Phase: agent.BackupSucceeded, Manifest: m}, nil)
	f.reconcile(key)
	b := f.get(key)
	if b.Status.Phase != dolphinv1.BackupSucceeded || b.Spec.DeletionPolicy != dolphinv1.BackupRetain {
		t.Fatalf("phase %s, deletionPolicy %q: want Succeeded and the default Retain", b.Status.Phase, b.Spec.DeletionPolicy)
	}
	for _, k := range []string{"data.mbstream.zst", backup.ManifestKey} {
		up, err := f.store.Create(ctx, b.Status.Path+k)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := up.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := up.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.c.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	f.reconcile(key)
	if err := f.c.Get(ctx, key, &dolphinv1.MySQLBackup{}); !apierrors.IsNotFound(err) {
		t.Fatalf("backup still there: %v", err)
	}
	if left, _ := f.store.List(ctx, b.Status.Path); len(left) != 2 || len(f.store.deleted) != 0 {
		t.Fatalf("left %v, deleted %v: want both objects kept", left, f.store.deleted)
	}
}

func TestEnvtestBackupAgentLostTheJob(t *testing.T) {
	needEnvtest(t)
	f := newBackupFixture(t, true)
	f.observeTopology()
	key := f.newBackup("lost")
	f.agent.set(agent.BackupStatus{Phase: agent.BackupRunning}, nil)
	f.reconcile(key)
	// The agent restarted: it no longer knows the job. Backdate the start so that the
	// reconciler does not take it for a request that never arrived.
	b := f.get(key)
	old := metav1.NewTime(time.Now().Add(-time.Minute))
	b.Status.StartTime = &old
	if err := f.c.Status().Update(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	f.agent.set(agent.BackupStatus{}, fmt.Errorf("agent https://10.0.0.9:9443: GET /v1/backups/x: 404: %w", agent.ErrUnknownBackup))
	f.reconcile(key)
	wantBackupCondition(t, f.get(key), dolphinv1.BackupFailed, "Failed", "no manifest was written")
}

func TestEnvtestBackupDeletedWhileRunningIsCancelledFirst(t *testing.T) {
	needEnvtest(t)
	f := newBackupFixture(t, true)
	f.observeTopology()
	key := f.newBackup("cancel-me")
	f.agent.set(agent.BackupStatus{Phase: agent.BackupRunning}, nil)
	f.reconcile(key)
	b := f.get(key)
	if err := f.c.Delete(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	// First pass: the run is cancelled and deletion waits for it to stop.
	if _, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err == nil {
		t.Fatal("deletion went on while the backup still ran")
	}
	if len(f.agent.cancelled) != 1 || f.agent.cancelled[0] != string(b.UID) {
		t.Fatalf("cancelled %v", f.agent.cancelled)
	}
	// The fake agent now reports the run failed (cancelled): deletion completes.
	f.reconcile(key)
	if err := f.c.Get(context.Background(), key, &dolphinv1.MySQLBackup{}); !apierrors.IsNotFound(err) {
		t.Fatalf("backup still there: %v", err)
	}
}

func TestEnvtestBackupScheduleAndRetention(t *testing.T) {
	needEnvtest(t)
	ctx := context.Background()
	f := newBackupFixture(t, true)
	cl := getCluster(t, f.c, f.cluster)
	cl.Spec.Backup.Schedule = &dolphinv1.BackupSchedule{Cron: "@hourly"}
	cl.Spec.Backup.Retention = &dolphinv1.BackupRetention{Keep: ptr.To(int32(2))}
	if err := f.c.Update(ctx, cl); err != nil {
		t.Fatal(err)
	}
	// Three old successful scheduled backups; the newest slot is three hours ago.
	for i, h := range []int{5, 4, 3} {
		slot := time.Now().UTC().Truncate(time.Hour).Add(-time.Duration(h) * time.Hour)
		b := &dolphinv1.MySQLBackup{ObjectMeta: metav1.ObjectMeta{Name: "old-" + string(rune('a'+i)), Namespace: f.ns,
			Labels:      map[string]string{BackupScheduledLabel: "true", BackupClusterLabel: "db"},
			Annotations: map[string]string{BackupSlotAnnotation: slot.Format(time.RFC3339)}},
			Spec: dolphinv1.MySQLBackupSpec{Cluster: "db"}}
		mustCreate(t, f.c, b)
		done := metav1.NewTime(slot.Add(time.Minute))
		b.Status = dolphinv1.MySQLBackupStatus{Phase: dolphinv1.BackupSucceeded, CompletionTime: &done}
		if err := f.c.Status().Update(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := reconcileOnce(t, f.c, f.cluster); err != nil {
		t.Fatal(err)
	}
	var list dolphinv1.MySQLBackupList
	if err := f.c.List(ctx, &list, client.InNamespace(f.ns)); err != nil {
		t.Fatal(err)
	}
	var got []string
	var scheduled *dolphinv1.MySQLBackup
	for i, b := range list.Items {
		got = append(got, b.Name)
		if !strings.HasPrefix(b.Name, "old-") {
			scheduled = &list.Items[i]
		}
	}
	// Retention keeps the two newest (old-b, old-c) and deletes old-a; the schedule creates
	// one backup for the newest missed slot (this hour), not one per missed hour.
	if len(list.Items) != 3 || scheduled == nil || contains(got, "old-a") {
		t.Fatalf("backups after one reconcile: %v", got)
	}
	wantSlot := time.Now().UTC().Truncate(time.Hour)
	if scheduled.Annotations[BackupSlotAnnotation] != wantSlot.Format(time.RFC3339) || scheduled.Labels[BackupScheduledLabel] != "true" ||
		len(scheduled.OwnerReferences) != 0 || scheduled.Spec.DeletionPolicy != dolphinv1.BackupRetain {
		t.Fatalf("scheduled backup %s: annotations %v labels %v owners %v", scheduled.Name, scheduled.Annotations, scheduled.Labels, scheduled.OwnerReferences)
	}
	// Reconciling again creates nothing more (the slot is taken; Forbid while it is pending).
	if err := reconcileOnce(t, f.c, f.cluster); err != nil {
		t.Fatal(err)
	}
	if err := f.c.List(ctx, &list, client.InNamespace(f.ns)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 3 {
		t.Fatalf("%d backups after a second reconcile, want 3", len(list.Items))
	}
	if cl := getCluster(t, f.c, f.cluster); cl.Status.Backup == nil || cl.Status.Backup.LastScheduleTime == nil ||
		!cl.Status.Backup.LastScheduleTime.Equal(&metav1.Time{Time: wantSlot}) {
		t.Fatalf("status.backup %+v", cl.Status.Backup)
	}
}

func controllerContainsFinalizer(b *dolphinv1.MySQLBackup) bool {
	for _, f := range b.Finalizers {
		if f == BackupObjectsFinalizer {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func TestEnvtestBackupVerification(t *testing.T) {
	needEnvtest(t)
	ctx := context.Background()
	f := newBackupFixture(t, true)
	f.observeTopology()
	key := f.newBackup("checked")
	f.agent.set(agent.BackupStatus{Phase: agent.BackupRunning}, nil)
	f.reconcile(key)
	m := &backup.Manifest{GTIDPosition: "0-1-42", EndTime: time.Now(), Objects: []backup.Object{{Key: "data.mbstream.zst", Size: 10, SHA256: "ab"}}}
	f.agent.set(agent.BackupStatus{Phase: agent.BackupSucceeded, Manifest: m}, nil)
	f.reconcile(key)
	f.reconcile(key)
	b := f.get(key)
	if b.Status.Verification == nil || b.Status.Verification.Phase != dolphinv1.VerificationUnverified {
		t.Fatalf("a backup never restored is %+v, want Unverified", b.Status.Verification)
	}

	// On demand: the annotation starts a check in a throwaway pod.
	verifyOnce := func(request string, outcome corev1.PodPhase, message string) *dolphinv1.MySQLBackup {
		t.Helper()
		b := f.get(key)
		if b.Annotations == nil {
			b.Annotations = map[string]string{}
		}
		b.Annotations[dolphinv1.VerifyAnnotation] = request
		if err := f.c.Update(ctx, b); err != nil {
			t.Fatal(err)
		}
		f.reconcile(key)
		b = f.get(key)
		if b.Status.Verification.Phase != dolphinv1.VerificationRunning || b.Status.Verification.Request != request {
			t.Fatalf("verification %+v, want Running for %q", b.Status.Verification, request)
		}
		var pod corev1.Pod
		if err := f.c.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: resources.VerifyPodName(b)}, &pod); err != nil {
			t.Fatal(err)
		}
		cmd := strings.Join(pod.Spec.Containers[0].Command, " ")
		if !strings.Contains(cmd, "verify") || !strings.Contains(cmd, "--path "+b.Status.Path) || pod.Spec.RestartPolicy != corev1.RestartPolicyNever ||
			pod.Labels[resources.LabelInstance] != "" || len(pod.OwnerReferences) != 1 || pod.OwnerReferences[0].UID != b.UID {
			t.Fatalf("verification pod: command %q, restart %s, labels %v, owners %v", cmd, pod.Spec.RestartPolicy, pod.Labels, pod.OwnerReferences)
		}
		pod.Status.Phase = outcome
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: resources.ContainerVerify,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: map[bool]int32{true: 0, false: 1}[outcome == corev1.PodSucceeded], Message: message}}}}
		if err := f.c.Status().Update(ctx, &pod); err != nil {
			t.Fatal(err)
		}
		f.reconcile(key)
		if err := f.c.Get(ctx, client.ObjectKeyFromObject(&pod), &corev1.Pod{}); !apierrors.IsNotFound(err) {
			// Deleted (envtest has no kubelet, so without finalizers it is gone at once).
			t.Fatalf("the verification pod is still there: %v", err)
		}
		return f.get(key)
	}
	b = verifyOnce("1", corev1.PodFailed, "restoring\ndolphin-verify: table app.rows: Corrupt")
	if v := b.Status.Verification; v.Phase != dolphinv1.VerificationFailed || v.Message != "dolphin-verify: table app.rows: Corrupt" {
		t.Fatalf("failed check recorded as %+v", v)
	}
	b = verifyOnce("2", corev1.PodSucceeded, "dolphin-verify: ok gtid=0-1-42 tables=2 rows=10 seconds=1")
	if v := b.Status.Verification; v.Phase != dolphinv1.VerificationVerified || v.Message != "ok gtid=0-1-42 tables=2 rows=10 seconds=1" || v.CompletionTime == nil {
		t.Fatalf("passed check recorded as %+v", v)
	}
	// The same request is not run twice.
	f.reconcile(key)
	if v := f.get(key).Status.Verification; v.Phase != dolphinv1.VerificationVerified {
		t.Fatalf("answered request ran again: %+v", v)
	}
	if err := reconcileOnce(t, f.c, f.cluster); err != nil {
		t.Fatal(err)
	}
	if cl := getCluster(t, f.c, f.cluster); cl.Status.Backup == nil || cl.Status.Backup.LastVerifiedBackup != "checked" || cl.Status.Backup.LastVerifiedTime == nil {
		t.Fatalf("cluster status.backup %+v", cl.Status.Backup)
	}
}

// A backup that ended before the Succeeded condition existed gets it from its Complete one.
func TestEnvtestBackupOfAnOlderReleaseGetsSucceeded(t *testing.T) {
	needEnvtest(t)
	ctx := context.Background()
	f := newBackupFixture(t, true)
	key := f.newBackup("old")
	b := f.get(key)
	b.Status.Phase = dolphinv1.BackupFailed
	b.Status.Conditions = []metav1.Condition{{Type: dolphinv1.ConditionBackupComplete, Status: metav1.ConditionTrue, Reason: "Failed",
		Message: "mariadb-backup: Access denied", LastTransitionTime: metav1.Now()}}
	if err := f.c.Status().Update(ctx, b); err != nil {
		t.Fatal(err)
	}
	f.reconcile(key)
	if s := meta.FindStatusCondition(f.get(key).Status.Conditions, dolphinv1.ConditionBackupSucceeded); s == nil || s.Status != metav1.ConditionFalse || s.Reason != "Failed" {
		t.Fatalf("Succeeded condition %+v, want False/Failed", s)
	}
}
