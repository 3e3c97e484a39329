package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/metrics"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// BackupObjectsFinalizer keeps a MySQLBackup until its objects are deleted from the store.
const BackupObjectsFinalizer = "mysql.dolphin.dev/backup-objects"

// Timing of the backup reconciler.
const (
	// backupPollInterval is how often a running backup's agent is asked for progress.
	backupPollInterval = 2 * time.Second
	// backupWaitInterval is how often a Pending backup looks again at its cluster.
	backupWaitInterval = 10 * time.Second
	// agentUnreachableLimit is how long a running backup's agent may stay unreachable before
	// the backup is failed (its pod was deleted or its node lost).
	agentUnreachableLimit = 2 * time.Minute
)

// BackupAgent is what the backup reconciler needs of an instance agent (agent.Client).
type BackupAgent interface {
	StartBackup(ctx context.Context, req agent.BackupRequest) (agent.BackupStatus, error)
	BackupStatus(ctx context.Context, id string) (agent.BackupStatus, error)
	CancelBackup(ctx context.Context, id string) error
}

// SeedAgent is what the operator needs of an instance's seed container (agent.Client).
type SeedAgent interface {
	Seed(ctx context.Context, req agent.SeedRequest) (agent.SeedStatus, error)
	SeedStatus(ctx context.Context) (agent.SeedStatus, error)
}

// InstanceAgent is an instance pod's agent: backups from the sidecar, seeding from the init
// container (both serve the same port with the same certificate and token).
type InstanceAgent interface {
	BackupAgent
	SeedAgent
	// Reseed marks the instance's data to be discarded and seeded again at its next start.
	Reseed(ctx context.Context, req agent.ReseedRequest) error
	// Keep keeps a copy of what the instance holds beyond the primary (agent.Client.Keep).
	Keep(ctx context.Context, req agent.KeepRequest) (*agent.KeepResponse, error)
	// GTIDState reads the instance's @@gtid_binlog_state.
	GTIDState(ctx context.Context, db agent.DBConn) (string, error)
	// EngineUpgrade brings the instance's system tables up to its server's version.
	EngineUpgrade(ctx context.Context, db agent.DBConn) (agent.EngineUpgradeResponse, error)
	// ReleaseStop ends the preStop hold of the instance's server (docs/design/0051).
	ReleaseStop(ctx context.Context) error
}

// AgentConnector reaches the agent of one instance pod of a cluster.
type AgentConnector interface {
	Agent(ctx context.Context, c *dolphinv1.MySQLCluster, pod *corev1.Pod) (InstanceAgent, error)
}

// MySQLBackupReconciler takes the backups that MySQLBackup resources ask for: it picks the
// source instance, asks that pod's agent to stream a backup into the cluster's store, follows
// it to the end and records the result. It never retries a failed backup (a new MySQLBackup
// does), and deleting a MySQLBackup deletes its objects, manifest first.
type MySQLBackupReconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// APIReader reads objects outside the cache live (the user's store Secrets, pods).
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	// Agents reaches instance agents.
	Agents AgentConnector
	// OpenStore opens a backup store (objectstore.New); used to delete a backup's objects.
	OpenStore func(ctx context.Context, cfg objectstore.Config) (objectstore.Store, error)
	// AllowS3DefaultCredentials lets openStore use the operator's own AWS identity for an S3
	// store without credentialsSecret (operator flag --s3-default-credentials).
	AllowS3DefaultCredentials bool
	// Build holds the operator-wide builder inputs (the agent image of verification pods).
	Build resources.BuildOptions

	// unreachableSince remembers, per running backup, since when its agent did not answer.
	unreachableSince map[types.UID]time.Time
}

// +kubebuilder:rbac:groups=mysql.dolphin.dev,resources=mysqlbackups,verbs=get;list;watch;update;patch;delete;create
// +kubebuilder:rbac:groups=mysql.dolphin.dev,resources=mysqlbackups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=mysql.dolphin.dev,resources=mysqlbackups/finalizers,verbs=update
// A restore check runs in a pod of its own (backup_verify.go): found missing when the operator
// first ran in a cluster under its own ServiceAccount (the real node), not as an admin.
// +kubebuilder:rbac:groups="",resources=pods,verbs=create

// SetupWithManager registers the reconciler.
func (r *MySQLBackupReconciler) SetupWithManager(mgr manager.Manager, opts controller.Options) error {
	r.unreachableSince = map[types.UID]time.Time{}
	return builder.ControllerManagedBy(mgr).
		For(&dolphinv1.MySQLBackup{}).
		Owns(&corev1.Pod{}). // verification pods
		Named("mysqlbackup").
		WithOptions(opts).
		Complete(r)
}

// Reconcile moves one MySQLBackup through Pending → Running → Succeeded or Failed.
func (r *MySQLBackupReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var b dolphinv1.MySQLBackup
	if err := r.Client.Get(ctx, req.NamespacedName, &b); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if b.DeletionTimestamp != nil {
		return reconcile.Result{}, r.deleteObjects(ctx, &b)
	}
	if err := r.addSucceededCondition(ctx, &b); err != nil {
		return reconcile.Result{}, err
	}
	switch b.Status.Phase {
	case dolphinv1.BackupSucceeded:
		return r.verify(ctx, &b)
	case dolphinv1.BackupFailed:
		return reconcile.Result{}, nil
	}
	if controllerutil.AddFinalizer(&b, BackupObjectsFinalizer) {
		if err := r.Client.Update(ctx, &b); err != nil {
			return reconcile.Result{}, fmt.Errorf("adding finalizer: %w", err)
		}
	}
	var c dolphinv1.MySQLCluster
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: b.Spec.Cluster}, &c); err != nil {
		if apierrors.IsNotFound(err) {
			return r.wait(ctx, &b, "ClusterNotFound", fmt.Sprintf("MySQLCluster %s does not exist in namespace %s: create it or fix spec.cluster", b.Spec.Cluster, b.Namespace))
		}
		return reconcile.Result{}, err
	}
	if b.Status.Phase == dolphinv1.BackupRunning {
		return r.follow(ctx, &b, &c)
	}
	return r.start(ctx, &b, &c)
}

// start picks the source, records the run in status (so that a restarted operator resumes
// it), then asks the source's agent to begin.
func (r *MySQLBackupReconciler) start(ctx context.Context, b *dolphinv1.MySQLBackup, c *dolphinv1.MySQLCluster) (reconcile.Result, error) {
	spec, err := clusterStore(ctx, r.Client, c)
	if err == nil && (spec == nil || spec.S3 == nil && spec.PVC == nil) {
		return r.wait(ctx, b, "NoBackupStore", fmt.Sprintf("MySQLCluster %s has no spec.backup.store or spec.backup.storeRef: set where backups go", c.Name))
	}
	var store objectstore.Config
	if err == nil {
		store, err = resolveStore(ctx, r.storeClients(b), b.Namespace, spec)
	}
	if err != nil {
		var ue *userError
		if errors.As(err, &ue) {
			return r.wait(ctx, b, ue.Reason, ue.Message)
		}
		return reconcile.Result{}, err
	}
	target := b.Spec.Target
	if target == "" {
		target = c.Spec.Backup.Target
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(c.Namespace), client.MatchingLabels(resources.SelectorLabels(c))); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing pods: %w", err)
	}
	src, err := chooseBackupSource(c, pods.Items, target)
	if err != nil {
		return r.wait(ctx, b, "NoBackupSource", "waiting for an instance to take the backup on: "+err.Error())
	}
	now := metav1.Now()
	b.Status.Phase = dolphinv1.BackupRunning
	b.Status.SourceInstance, b.Status.SourceRole = src.Pod.Name, src.Role
	b.Status.JobID = string(b.UID)
	b.Status.Store = spec.DeepCopy()
	b.Status.Path = backupPath(b, now.Time)
	b.Status.StartTime = &now
	b.Status.Error = ""
	setBackupCondition(b, metav1.ConditionFalse, "Running", fmt.Sprintf("streaming a backup of %s (%s) to the store", src.Pod.Name, src.Role))
	if err := r.Client.Status().Update(ctx, b); err != nil {
		return reconcile.Result{}, fmt.Errorf("recording the backup start: %w", err)
	}
	r.event(b, corev1.EventTypeNormal, "BackupStarted", "Backup", "taking the backup on %s (%s) into %s", src.Pod.Name, src.Role, b.Status.Path)
	return r.request(ctx, b, c, src.Pod, store)
}

// request sends the backup request to the source's agent. The agent treats a request with an
// ID it knows as a status query, so sending it again after an operator restart is safe.
func (r *MySQLBackupReconciler) request(ctx context.Context, b *dolphinv1.MySQLBackup, c *dolphinv1.MySQLCluster, pod *corev1.Pod, store objectstore.Config) (reconcile.Result, error) {
	password, err := r.operatorPassword(ctx, c)
	if err != nil {
		return reconcile.Result{}, err
	}
	raw, err := json.Marshal(store)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("encoding the store configuration: %w", err)
	}
	a, err := r.Agents.Agent(ctx, c, pod)
	if err != nil {
		return r.unreachable(ctx, b, err)
	}
	st, err := a.StartBackup(ctx, agent.BackupRequest{
		ID: b.Status.JobID, Store: raw, Prefix: b.Status.Path,
		DB: agent.DBConn{User: resources.OperatorUser, Password: password},
		Meta: agent.BackupMeta{Name: b.Name, Namespace: b.Namespace, Cluster: c.Name,
			SourceInstance: pod.Name, SourceRole: string(b.Status.SourceRole), Flavor: string(c.Spec.Engine.Flavor)},
	})
	if err != nil {
		return r.unreachable(ctx, b, err)
	}
	return r.record(ctx, b, c, st)
}

// follow asks the agent how the backup goes and records the end.
func (r *MySQLBackupReconciler) follow(ctx context.Context, b *dolphinv1.MySQLBackup, c *dolphinv1.MySQLCluster) (reconcile.Result, error) {
	var pod corev1.Pod
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: b.Status.SourceInstance}, &pod)
	if apierrors.IsNotFound(err) {
		return r.fail(ctx, b, fmt.Sprintf("the source pod %s was deleted during the backup", b.Status.SourceInstance))
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	a, err := r.Agents.Agent(ctx, c, &pod)
	if err != nil {
		return r.unreachable(ctx, b, err)
	}
	st, err := a.BackupStatus(ctx, b.Status.JobID)
	if errors.Is(err, agent.ErrUnknownBackup) {
		if b.Status.StartTime != nil && time.Since(b.Status.StartTime.Time) < backupPollInterval*5 {
			// Recorded as Running, but the request may not have reached the agent before an
			// operator restart: send it again (idempotent by ID).
			store, err := resolveStore(ctx, r.storeClients(b), b.Namespace, b.Status.Store)
			if err != nil {
				return r.fail(ctx, b, err.Error())
			}
			return r.request(ctx, b, c, &pod, store)
		}
		return r.fail(ctx, b, fmt.Sprintf("the agent on %s no longer knows the backup (it restarted during the run); "+
			"no manifest was written and older backups are untouched: create a new MySQLBackup", pod.Name))
	}
	if err != nil {
		return r.unreachable(ctx, b, err)
	}
	return r.record(ctx, b, c, st)
}

// record writes what the agent reported.
func (r *MySQLBackupReconciler) record(ctx context.Context, b *dolphinv1.MySQLBackup, c *dolphinv1.MySQLCluster, st agent.BackupStatus) (reconcile.Result, error) {
	delete(r.unreachableSince, b.UID)
	switch st.Phase {
	case agent.BackupFailed:
		return r.fail(ctx, b, "the backup failed: "+st.Error)
	case agent.BackupSucceeded:
		if st.Manifest == nil {
			return r.fail(ctx, b, "the agent reported success without a manifest")
		}
		m := st.Manifest
		done := metav1.NewTime(m.EndTime)
		if done.IsZero() {
			done = metav1.Now()
		}
		b.Status.Phase = dolphinv1.BackupSucceeded
		b.Status.GTIDPosition = m.GTIDPosition
		b.Status.StoredBytes = m.StoredBytes()
		b.Status.StoredSize = humanBytes(b.Status.StoredBytes)
		b.Status.Objects = int32(len(m.Objects))
		b.Status.CompletionTime = &done
		if b.Status.StartTime != nil {
			b.Status.Duration = done.Sub(b.Status.StartTime.Time).Round(time.Second).String()
		}
		b.Status.Manifest = manifestURL(b.Status.Store, b.Status.Path)
		setBackupCondition(b, metav1.ConditionTrue, "Succeeded", fmt.Sprintf("backup of %s at GTID %s stored (%s)", b.Status.SourceInstance, m.GTIDPosition, b.Status.StoredSize))
		if err := r.Client.Status().Update(ctx, b); err != nil {
			return reconcile.Result{}, fmt.Errorf("recording the backup's success: %w", err)
		}
		metrics.BackupLastSuccess.WithLabelValues(b.Namespace, c.Name).Set(float64(done.Unix()))
		if b.Status.StartTime != nil {
			metrics.BackupLastDuration.WithLabelValues(b.Namespace, c.Name).Set(done.Sub(b.Status.StartTime.Time).Seconds())
		}
		metrics.BackupLastSize.WithLabelValues(b.Namespace, c.Name).Set(float64(b.Status.StoredBytes))
		r.event(b, corev1.EventTypeNormal, "BackupSucceeded", "Backup", "backup stored: %s, GTID %s", b.Status.StoredSize, m.GTIDPosition)
		return reconcile.Result{}, nil
	}
	if st.StoredBytes != b.Status.StoredBytes {
		b.Status.StoredBytes = st.StoredBytes
		b.Status.StoredSize = humanBytes(st.StoredBytes)
		if err := r.Client.Status().Update(ctx, b); err != nil {
			return reconcile.Result{}, fmt.Errorf("recording backup progress: %w", err)
		}
	}
	return reconcile.Result{RequeueAfter: backupPollInterval}, nil
}

// unreachable tolerates an agent that does not answer for agentUnreachableLimit.
func (r *MySQLBackupReconciler) unreachable(ctx context.Context, b *dolphinv1.MySQLBackup, cause error) (reconcile.Result, error) {
	if r.unreachableSince == nil {
		r.unreachableSince = map[types.UID]time.Time{}
	}
	first, ok := r.unreachableSince[b.UID]
	if !ok {
		first = time.Now()
		r.unreachableSince[b.UID] = first
	}
	if time.Since(first) < agentUnreachableLimit {
		log.FromContext(ctx).Info("backup agent not reachable; retrying", "pod", b.Status.SourceInstance, "error", cause.Error())
		return reconcile.Result{RequeueAfter: backupPollInterval}, nil
	}
	return r.fail(ctx, b, fmt.Sprintf("the agent on %s did not answer for %s: %v", b.Status.SourceInstance, agentUnreachableLimit, cause))
}

// fail ends the backup as Failed. No manifest was written (the agent writes it last, only on
// success), so the backup does not exist for restores; older backups are untouched.
func (r *MySQLBackupReconciler) fail(ctx context.Context, b *dolphinv1.MySQLBackup, why string) (reconcile.Result, error) {
	delete(r.unreachableSince, b.UID)
	now := metav1.Now()
	b.Status.Phase = dolphinv1.BackupFailed
	b.Status.Error = why
	b.Status.CompletionTime = &now
	setBackupCondition(b, metav1.ConditionTrue, "Failed", why)
	if err := r.Client.Status().Update(ctx, b); err != nil {
		return reconcile.Result{}, fmt.Errorf("recording the backup's failure: %w", err)
	}
	metrics.BackupFailures.WithLabelValues(b.Namespace, b.Spec.Cluster).Inc()
	r.event(b, corev1.EventTypeWarning, "BackupFailed", "Backup", "%s", why)
	return reconcile.Result{}, nil
}

// wait keeps the backup Pending with a condition saying what it waits for.
func (r *MySQLBackupReconciler) wait(ctx context.Context, b *dolphinv1.MySQLBackup, reason, message string) (reconcile.Result, error) {
	prev := meta.FindStatusCondition(b.Status.Conditions, dolphinv1.ConditionBackupComplete)
	if b.Status.Phase != dolphinv1.BackupPending || prev == nil || prev.Reason != reason || prev.Message != message {
		b.Status.Phase = dolphinv1.BackupPending
		setBackupCondition(b, metav1.ConditionFalse, reason, message)
		if err := r.Client.Status().Update(ctx, b); err != nil {
			return reconcile.Result{}, fmt.Errorf("recording why the backup waits: %w", err)
		}
	}
	return reconcile.Result{RequeueAfter: backupWaitInterval}, nil
}

// operatorPassword is the current password of Dolphin's operator account of c.
func (r *MySQLBackupReconciler) operatorPassword(ctx context.Context, c *dolphinv1.MySQLCluster) (string, error) {
	live := liveReader(r.APIReader, r.Client)
	pw, err := clusterCredential(ctx, live, live, c, resources.OperatorPasswordKey)
	return string(pw), err
}

// openStore opens a backup store (openBackupStore).
func (r *MySQLBackupReconciler) openStore(ctx context.Context, cfg objectstore.Config) (objectstore.Store, error) {
	return openBackupStore(ctx, cfg, r.AllowS3DefaultCredentials, r.OpenStore)
}

// BackupDeleteDataAnnotation on a MySQLBackup being deleted says its data goes with it
// whatever its deletionPolicy: set by the retention rules (spec.backup.retention) before they
// delete a backup they expire, the value naming the rule.
const BackupDeleteDataAnnotation = "mysql.dolphin.dev/delete-data"

// keepsData reports whether deleting b keeps its data in the store: a backup that succeeded,
// with deletionPolicy Retain (the default), not expired by retention. A backup that never
// succeeded has no restorable data to keep.
func keepsData(b *dolphinv1.MySQLBackup) bool {
	return b.Status.Phase == dolphinv1.BackupSucceeded && b.Spec.DeletionPolicy != dolphinv1.BackupDelete &&
		b.Annotations[BackupDeleteDataAnnotation] == ""
}

// deleteObjects removes a deleted MySQLBackup's objects, the manifest first so that a
// half-deleted backup is never taken for a complete one, then releases the finalizer — unless
// the backup keeps its data (keepsData): then an event says where it stays. When the store's
// Secret is gone the objects cannot be reached: they are left, with a warning event.
func (r *MySQLBackupReconciler) deleteObjects(ctx context.Context, b *dolphinv1.MySQLBackup) error {
	if !controllerutil.ContainsFinalizer(b, BackupObjectsFinalizer) {
		return nil
	}
	if b.Status.Phase == dolphinv1.BackupRunning {
		// Stop the upload first: a run that went on would write its manifest after the
		// objects were deleted.
		if done, err := r.cancelRun(ctx, b); err != nil || !done {
			return err
		}
	}
	if keepsData(b) {
		r.event(b, corev1.EventTypeNormal, "BackupRetained", "Delete",
			"kept the backup's data under %s (deletionPolicy Retain): restore it with spec.bootstrap.from, or delete it from the store by hand", b.Status.Path)
	} else if b.Status.Path != "" && b.Status.Store != nil {
		cfg, err := resolveStore(ctx, r.storeClients(nil), b.Namespace, b.Status.Store)
		var ue *userError
		switch {
		case errors.As(err, &ue):
			r.event(b, corev1.EventTypeWarning, "BackupObjectsLeft", "Delete", "objects under %s were not deleted: %s", b.Status.Path, ue.Message)
		case err != nil:
			return err
		default:
			s, err := r.openStore(ctx, cfg)
			if err != nil {
				return fmt.Errorf("opening the backup store: %w", err)
			}
			if err := deleteBackupObjects(ctx, s, b.Status.Path); err != nil {
				r.event(b, corev1.EventTypeWarning, "BackupDeleteFailed", "Delete", "deleting %s%s: %v", s.Describe(), b.Status.Path, err)
				return err
			}
			r.event(b, corev1.EventTypeNormal, "BackupDeleted", "Delete", "deleted the objects under %s%s", s.Describe(), b.Status.Path)
		}
	}
	controllerutil.RemoveFinalizer(b, BackupObjectsFinalizer)
	return r.Client.Update(ctx, b)
}

// cancelRun cancels a running backup on its agent; done is true once the agent reports it
// finished (or no longer knows it, or its pod is gone). Until then deletion waits.
func (r *MySQLBackupReconciler) cancelRun(ctx context.Context, b *dolphinv1.MySQLBackup) (done bool, err error) {
	var c dolphinv1.MySQLCluster
	var pod corev1.Pod
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: b.Spec.Cluster}, &c); err != nil {
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: b.Status.SourceInstance}, &pod); err != nil {
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	}
	a, err := r.Agents.Agent(ctx, &c, &pod)
	if err != nil {
		return false, err
	}
	st, err := a.BackupStatus(ctx, b.Status.JobID)
	switch {
	case errors.Is(err, agent.ErrUnknownBackup):
		return true, nil
	case err != nil:
		return false, err
	case st.Finished():
		return true, nil
	}
	if err := a.CancelBackup(ctx, b.Status.JobID); err != nil && !errors.Is(err, agent.ErrUnknownBackup) {
		return false, err
	}
	return false, fmt.Errorf("waiting for the cancelled backup on %s to stop before deleting its objects", pod.Name)
}

// deleteBackupObjects deletes every object under prefix, the manifest first.
func deleteBackupObjects(ctx context.Context, s objectstore.Store, prefix string) error {
	if err := s.Delete(ctx, prefix+"manifest.json"); err != nil {
		return fmt.Errorf("deleting the manifest: %w", err)
	}
	objs, err := s.List(ctx, prefix)
	if err != nil {
		return fmt.Errorf("listing %s: %w", prefix, err)
	}
	keys := make([]string, 0, len(objs))
	for _, o := range objs {
		keys = append(keys, o.Key)
	}
	if err := s.Delete(ctx, keys...); err != nil {
		return fmt.Errorf("deleting %d objects: %w", len(keys), err)
	}
	return nil
}

// humanBytes writes n in binary units with one decimal, e.g. "655.1Ki", "1.5Gi".
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ci", float64(n)/float64(div), "KMGTPE"[exp])
}

// manifestURL is where a backup's manifest is, as s3://bucket/prefix/path/manifest.json or
// pvc://claim/path/manifest.json.
func manifestURL(s *dolphinv1.BackupStore, path string) string {
	if u := storeURL(s, path); u != "" {
		return u + "manifest.json"
	}
	return ""
}

// storeURL names key (a path in the store) as s3://bucket/prefix/key or pvc://claim/key.
func storeURL(s *dolphinv1.BackupStore, key string) string {
	if s != nil && s.PVC != nil {
		return "pvc://" + s.PVC.ClaimName + "/" + key
	}
	if s == nil || s.S3 == nil {
		return ""
	}
	prefix := s.S3.Prefix
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return "s3://" + s.S3.Bucket + "/" + prefix + key
}

// addSucceededCondition gives a backup that ended before the Succeeded condition existed
// that condition, from its Complete one, so that `kubectl wait --for=condition=Succeeded`
// answers for it too.
func (r *MySQLBackupReconciler) addSucceededCondition(ctx context.Context, b *dolphinv1.MySQLBackup) error {
	done := meta.FindStatusCondition(b.Status.Conditions, dolphinv1.ConditionBackupComplete)
	if done == nil || done.Status != metav1.ConditionTrue || meta.FindStatusCondition(b.Status.Conditions, dolphinv1.ConditionBackupSucceeded) != nil {
		return nil
	}
	patch := client.MergeFrom(b.DeepCopy())
	setBackupCondition(b, done.Status, done.Reason, done.Message)
	if err := r.Client.Status().Patch(ctx, b, patch); err != nil {
		return fmt.Errorf("adding the Succeeded condition: %w", err)
	}
	return nil
}

// setBackupCondition sets Complete (the backup ended, however) and Succeeded (True when it
// succeeded, False when it failed, Unknown until it ends): `kubectl wait
// --for=condition=Succeeded` never takes a failure for a success.
func setBackupCondition(b *dolphinv1.MySQLBackup, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{
		Type: dolphinv1.ConditionBackupComplete, Status: status, Reason: reason, Message: message,
		ObservedGeneration: b.Generation,
	})
	succeeded := metav1.ConditionUnknown
	switch {
	case status == metav1.ConditionTrue && reason == "Succeeded":
		succeeded = metav1.ConditionTrue
	case status == metav1.ConditionTrue:
		succeeded = metav1.ConditionFalse
	}
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{
		Type: dolphinv1.ConditionBackupSucceeded, Status: succeeded, Reason: reason, Message: message,
		ObservedGeneration: b.Generation,
	})
}

func (r *MySQLBackupReconciler) event(b *dolphinv1.MySQLBackup, typ, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(b, nil, typ, reason, action, note, args...)
	}
}

// storeClients are resolveStore's clients, with owner (nil when only reading) as a user of
// a PVC store's server.
func (r *MySQLBackupReconciler) storeClients(owner client.Object) storeClients {
	return storeClients{Reader: liveReader(r.APIReader, r.Client), Writer: r.Client, Build: r.Build, Owner: owner}
}
