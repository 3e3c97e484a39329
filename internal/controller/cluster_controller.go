package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/metrics"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// Finalizer holds a MySQLCluster back while it is deleted so that Dolphin can report the
// Deleting phase and release what lives outside Kubernetes' garbage collector: per-cluster
// metric series now, and the cluster's topology engine loop (which must stop before the
// garbage collector removes pods, or it would read the vanishing pods as a failed primary).
// Child objects themselves are removed by the garbage collector through owner references.
const Finalizer = "mysql.dolphin.dev/finalizer"

// secretNameIndex indexes clusters by the user-supplied Secrets they read (credentials, TLS).
const secretNameIndex = "spec.credentials.secretName"

// storeRefIndex indexes clusters by the MySQLBackupStores they name (spec.backup.storeRef,
// spec.bootstrap.from.storeRef).
const storeRefIndex = "spec.backup.storeRef.name"

// MySQLClusterReconciler keeps the Kubernetes objects of every MySQLCluster in line with
// its spec and reports their state in the status.
type MySQLClusterReconciler struct {
	// Client reads from the manager's cache, which holds only Dolphin's own objects
	// (CacheByObject), and writes to the API server.
	Client client.Client
	// APIReader reads live from the API server (the manager's APIReader): objects outside
	// the cache, such as a user-supplied credentials Secret Dolphin has not labelled yet.
	// Nil uses Client.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	// Topology runs the database side of each cluster; nil leaves databases alone.
	Topology TopologyRunner
	// Build holds the operator-wide builder inputs (the agent image).
	Build resources.BuildOptions
	// OpenStore opens a backup store (objectstore.New when nil); tests pass their own.
	OpenStore func(ctx context.Context, cfg objectstore.Config) (objectstore.Store, error)
	// AllowS3DefaultCredentials lets openStore use the operator's own AWS identity for an S3
	// store without credentialsSecret (operator flag --s3-default-credentials).
	AllowS3DefaultCredentials bool
	// Agents reaches instance pods' agents and seed containers; nil seeds nothing (a pod's
	// seed container then waits).
	Agents AgentConnector

	// ArchiveStatus asks a binlog archiver for its status (over HTTPS with the agent Secret's
	// CA and token when nil); tests pass their own.
	ArchiveStatus ArchiveStatusFunc

	// RecloneConfirmation is how long an instance must stay a re-clone candidate before it is
	// re-cloned (15 s when zero; tests shorten it).
	RecloneConfirmation time.Duration

	// reclones confirms re-clone candidates over time (cluster_reclone.go).
	reclones recloneWatch
	// archives follows the binlog archivers (cluster_binlog_archive.go).
	archives archiveWatch
	// stop remembers the switchovers asked for and the holds released for pods being
	// deleted (cluster_pod_stop.go).
	stopMu sync.Mutex
	stops  map[types.NamespacedName]*stopState
	// upgrades follows the engine upgrades running beside the reconciles
	// (cluster_engine_upgrade.go).
	upgrades engineUpgradeRuns
	// externalChecks hands the checks of spec.bootstrap.external to the status
	// (cluster_external_source.go).
	externalChecks externalChecks
}

// TopologyRunner is the per-cluster topology engine as the reconciler sees it.
type TopologyRunner interface {
	// Update makes sure the cluster's engine runs with its current spec (or is stopped when
	// the cluster is paused) and asks it to observe now.
	Update(ctx context.Context, c *dolphinv1.MySQLCluster) error
	// Stop stops the cluster's engine and waits until it has.
	Stop(key types.NamespacedName)
	// RequestSwitchover asks the cluster's engine to move the primary role to `to` ("" =
	// the most advanced replica). A non-empty id identifies the request: one the engine
	// accepted already (recorded in status.topology.lastSwitchoverRequest) changes nothing.
	RequestSwitchover(ctx context.Context, key types.NamespacedName, to, id string) (bool, error)
	// AcceptFailoverLoss lets a failover from the lost primary `from` that waits for writes no
	// candidate holds promote the best candidate anyway. It reports whether one is waiting.
	AcceptFailoverLoss(key types.NamespacedName, from string) (bool, error)
}

// +kubebuilder:rbac:groups=mysql.dolphin.dev,resources=mysqlclusters,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=mysql.dolphin.dev,resources=mysqlclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=mysql.dolphin.dev,resources=mysqlclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=services;configmaps;serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// Leader election records its events through the core API (found by the first run under the
// operator's own ServiceAccount, on the real node).
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// Reconcile runs the named steps in order, then writes the status once from the outcome.
func (r *MySQLClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	// waitingForUser marks a reconcile that failed on something only the user can fix: it
	// returns no error (retrying would not help) but counts as one.
	waitingForUser := false
	defer func() {
		switch {
		case err != nil || waitingForUser:
			metrics.ReconcileTotal.WithLabelValues(metrics.ResultError).Inc()
		case res.RequeueAfter > 0:
			metrics.ReconcileTotal.WithLabelValues(metrics.ResultRequeue).Inc()
		default:
			metrics.ReconcileTotal.WithLabelValues(metrics.ResultSuccess).Inc()
		}
	}()
	logger := log.FromContext(ctx)

	var c dolphinv1.MySQLCluster
	if err := r.Client.Get(ctx, req.NamespacedName, &c); err != nil {
		if apierrors.IsNotFound(err) {
			if r.Topology != nil {
				r.Topology.Stop(req.NamespacedName)
			}
			metrics.ForgetCluster(req.Namespace, req.Name)
			r.upgrades.forgetCluster(req.NamespacedName)
			r.externalChecks.take(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("reading MySQLCluster: %w", err)
	}
	if !c.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.finalize(ctx, &c)
	}
	if !controllerutil.ContainsFinalizer(&c, Finalizer) {
		patch := client.MergeFromWithOptions(c.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(&c, Finalizer)
		if err := r.Client.Patch(ctx, &c, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding finalizer: %w", err)
		}
	}

	desired := resources.Defaulted(&c)
	stepErr, sideOnly, outcome := r.runSteps(ctx, desired)
	// The bootstrap and re-clone steps may have set their parts of the status.
	c.Status.RestoredFrom, c.Status.LastReclone = desired.Status.RestoredFrom, desired.Status.LastReclone
	obs, err := r.observe(ctx, &c, stepErr)
	if err != nil {
		return ctrl.Result{}, errors.Join(stepErr, err)
	}
	obs.StepErrSideOnly = sideOnly
	obs.TLS = desired.Status.TLS
	st := computeStatus(obs, metav1.Now())
	if err := r.writeStatus(ctx, &c, st); err != nil {
		return ctrl.Result{}, errors.Join(stepErr, err)
	}

	if r.Topology != nil {
		// The engine keeps the databases running even when a Kubernetes step failed (it
		// refuses credentials it cannot use by itself); a switchover waits for a clean run.
		if err := r.Topology.Update(ctx, &c); err != nil {
			var ue *userError
			if !errors.As(stepErr, &ue) {
				return ctrl.Result{}, errors.Join(stepErr, fmt.Errorf("updating the topology engine: %w", err))
			}
			logger.V(1).Info("topology engine not updated until the user's fix", "error", err.Error())
		}
		// A failover waits for nothing else: forwarded whatever the other steps did.
		if err := r.forwardAcceptLoss(ctx, &c); err != nil {
			return ctrl.Result{}, errors.Join(stepErr, err)
		}
		if stepErr == nil {
			if err := r.forwardSwitchover(ctx, &c); err != nil {
				return ctrl.Result{}, err
			}
		}
	}

	// The last steps (the backup schedule) run whatever the others did; their errors are
	// returned, not written to the status.
	for _, s := range r.steps() {
		if !s.last {
			continue
		}
		logger.V(1).Info("step", "name", s.name)
		out, err := s.run(ctx, desired)
		if err != nil {
			return ctrl.Result{}, errors.Join(stepErr, fmt.Errorf("step %s: %w", s.name, err))
		}
		outcome.merge(out)
	}

	var ue *userError
	if errors.As(stepErr, &ue) {
		// Only the user can fix this; a change to the spec or to the referenced Secret
		// triggers the next reconcile. Retrying in a loop would only add noise.
		r.event(&c, corev1.EventTypeWarning, ue.Reason, "Reconcile", "%s", ue.Message)
		logger.Info("waiting for the user to fix the cluster", "reason", ue.Reason, "message", ue.Message)
		waitingForUser = true
		// What the steps that ran asked for (the next scheduled backup among them) is kept.
		outcome.after(userErrorRequeueAfter(stepErr), "waiting for the user's fix")
		// An error of another step beside the user's is retried as any error is.
		return ctrl.Result{RequeueAfter: outcome.requeueAfter}, notUserErrors(stepErr)
	}
	// Planned work turns into trouble when it outlasts its bounds (cluster_status_planned.go), with
	// or without an event from the pods.
	if st.Phase == dolphinv1.PhaseProgressing {
		outcome.after(plannedRecheck, "planned work is checked against its bounds")
	}
	if outcome.requeueAfter > 0 {
		logger.V(1).Info("looking again", "after", outcome.requeueAfter, "reason", outcome.reason)
	}
	return ctrl.Result{RequeueAfter: outcome.requeueAfter}, stepErr
}

// runSteps runs the named steps but the last ones in order on desired (only pod-stop while
// the cluster is paused: a deleted pod's server is released at once, as a paused engine
// switches nothing over). It returns the steps' error, whether every failing step was
// independent, and the soonest time a step asked to look again.
func (r *MySQLClusterReconciler) runSteps(ctx context.Context, desired *dolphinv1.MySQLCluster) (stepErr error, sideOnly bool, outcome stepOutcome) {
	logger := log.FromContext(ctx)
	if desired.Spec.Paused {
		logger.V(1).Info("paused: skipping every step but pod-stop")
		if err := r.reconcilePodStop(ctx, desired, &outcome); err != nil {
			logger.Info("paused: pod-stop failed", "error", err.Error())
		}
		return nil, false, outcome
	}
	var sideErrs []error
	for _, s := range r.steps() {
		if s.last {
			continue
		}
		logger.V(1).Info("step", "name", s.name)
		out, err := s.run(ctx, desired)
		outcome.merge(out)
		switch {
		case err == nil:
		case s.independent:
			// Reported, and the steps after it still run (a StorageClass that cannot
			// expand must not stop the backup store or the archive).
			sideErrs = append(sideErrs, fmt.Errorf("step %s: %w", s.name, err))
		default:
			stepErr = fmt.Errorf("step %s: %w", s.name, err)
		}
		if stepErr != nil {
			break
		}
	}
	if stepErr == nil && len(sideErrs) > 0 {
		stepErr, sideOnly = errors.Join(sideErrs...), true
	}
	return stepErr, sideOnly, outcome
}

// observe gathers what the status is computed from.
func (r *MySQLClusterReconciler) observe(ctx context.Context, c *dolphinv1.MySQLCluster, stepErr error) (observation, error) {
	d := resources.Defaulted(c)
	o := observation{
		Generation: c.Generation, Replicas: d.Spec.Instances, Paused: c.Spec.Paused, Durability: d.Spec.Durability,
		FailoverEnabled: d.Spec.Failover.Enabled == nil || *d.Spec.Failover.Enabled,
		StepErr:         stepErr, Previous: c.Status, StatefulSetName: resources.NamesFor(c).StatefulSet,
	}
	var sts appsv1.StatefulSet
	switch err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: resources.NamesFor(c).StatefulSet}, &sts); {
	case err == nil:
		o.StatefulSet = &sts
	case !apierrors.IsNotFound(err):
		return o, fmt.Errorf("reading StatefulSet: %w", err)
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(c.Namespace), client.MatchingLabels(resources.CommonLabels(c))); err != nil {
		return o, fmt.Errorf("listing pods: %w", err)
	}
	o.Pods = pods.Items
	claims, err := r.instanceClaims(ctx, c, d.Spec.Instances, pods.Items)
	if err != nil {
		return o, err
	}
	o.Claims = claims
	o.ForceRollout = c.Annotations[ForceRolloutAnnotation] == "true"
	o.EngineUpgrades = r.engineUpgrades(c)
	backups, err := r.clusterBackups(ctx, c)
	if err != nil {
		return o, err
	}
	o.Backups, o.BackupConfigured = backups, c.Spec.Backup != nil
	o.BackupOverdue = backupOverdue(c, backups, time.Now())
	o.Bootstrap = c.Spec.Bootstrap != nil && (c.Spec.Bootstrap.External == nil || c.Spec.Bootstrap.External.PhysicalCopy != nil)
	o.FollowsExternal = resources.FollowsExternalSource(c) && !resources.CutOver(c)
	if check, ok := r.externalChecks.take(client.ObjectKeyFromObject(c)); ok {
		o.ExternalCheck = &check
	}
	o.Archiving = archiving(c) != nil
	o.ArchiveResult, o.ArchiveObserved = r.archives.result(client.ObjectKeyFromObject(c))
	o.RecloneWait = r.reclones.waiting(c.Namespace + "/" + c.Name)
	if d.Spec.Storage.Size != nil {
		o.VolumeSize = *d.Spec.Storage.Size
	}
	return o, nil
}

// finalize reports the Deleting phase, releases what the garbage collector cannot, and
// removes the finalizer.
func (r *MySQLClusterReconciler) finalize(ctx context.Context, c *dolphinv1.MySQLCluster) error {
	if !controllerutil.ContainsFinalizer(c, Finalizer) {
		return nil
	}
	if c.Status.Phase != dolphinv1.PhaseDeleting {
		obs, err := r.observe(ctx, c, nil)
		if err != nil {
			return err
		}
		obs.Deleting = true
		if err := r.writeStatus(ctx, c, computeStatus(obs, metav1.Now())); err != nil {
			return err
		}
	}
	if r.Topology != nil {
		// Before the garbage collector removes the pods, or the engine would see a lost
		// primary and fail over on a cluster that is going away.
		r.Topology.Stop(client.ObjectKeyFromObject(c))
	}
	// Nothing will be switched over any more: the pods' servers stop as soon as their pods
	// are deleted, not after their preStop hold (docs/design/0051).
	r.releaseAllStops(ctx, c)
	metrics.ForgetCluster(c.Namespace, c.Name)
	r.upgrades.forgetCluster(client.ObjectKeyFromObject(c))
	r.externalChecks.take(client.ObjectKeyFromObject(c))
	patch := client.MergeFromWithOptions(c.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(c, Finalizer)
	if err := r.Client.Patch(ctx, c, patch); err != nil {
		return fmt.Errorf("removing finalizer: %w", err)
	}
	log.FromContext(ctx).Info("finalized; the garbage collector removes the children")
	return nil
}

func (r *MySQLClusterReconciler) event(c *dolphinv1.MySQLCluster, typ, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(c, nil, typ, reason, action, note, args...)
	}
}

// eventAbout records an event on the cluster related to one of its objects (a pod): events of
// the same reason about different pods stay apart (the recorder merges events by regarding,
// related, reason and action, keeping the first note).
func (r *MySQLClusterReconciler) eventAbout(c *dolphinv1.MySQLCluster, related runtime.Object, typ, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(c, related, typ, reason, action, note, args...)
	}
}

func phaseOrNone(p dolphinv1.Phase) string {
	if p == "" {
		return "(none)"
	}
	return string(p)
}

// SetupWithManager registers the reconciler. opts carries MaxConcurrentReconciles.
func (r *MySQLClusterReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &dolphinv1.MySQLCluster{}, secretNameIndex,
		func(o client.Object) []string {
			c := o.(*dolphinv1.MySQLCluster)
			var names []string
			if n := c.Spec.Credentials.SecretName; n != "" {
				names = append(names, n)
			}
			if n := c.Spec.TLS.CertificateSecret; n != "" {
				names = append(names, n)
			}
			return names
		}); err != nil {
		return fmt.Errorf("indexing MySQLClusters by credentials Secret: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &dolphinv1.MySQLCluster{}, storeRefIndex,
		func(o client.Object) []string { return storeRefs(o.(*dolphinv1.MySQLCluster)) }); err != nil {
		return fmt.Errorf("indexing MySQLClusters by MySQLBackupStore: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("mysqlcluster").
		For(&dolphinv1.MySQLCluster{}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Secret{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podToCluster)).
		Watches(&dolphinv1.MySQLBackup{}, handler.EnqueueRequestsFromMapFunc(backupToCluster)).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.secretToClusters)).
		Watches(&dolphinv1.MySQLBackupStore{}, handler.EnqueueRequestsFromMapFunc(r.storeToClusters)).
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(claimToCluster)).
		Watches(&storagev1.StorageClass{}, handler.EnqueueRequestsFromMapFunc(r.storageClassToClusters)).
		WithOptions(opts).
		Complete(r)
}

// podToCluster maps an instance pod to its cluster (pod readiness and role feed the status).
func podToCluster(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if l[resources.LabelManagedBy] != "dolphin" || l[resources.LabelInstance] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: l[resources.LabelInstance]}}}
}

// secretToClusters maps a user-supplied credentials Secret to the clusters that name it, so
// that fixing the Secret or rotating its passwords reaches the cluster at once. The watch
// sees only Secrets with CredentialsLabel (CacheByObject), which Dolphin adds when it first
// reads one; a cluster waiting for its Secret to be created looks for it every
// userSecretPollInterval instead. Removing the label shows as a deletion: the cluster reads
// the Secret live and labels it again.
func (r *MySQLClusterReconciler) secretToClusters(ctx context.Context, o client.Object) []reconcile.Request {
	var list dolphinv1.MySQLClusterList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{secretNameIndex: o.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "listing clusters using Secret", "secret", o.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, c := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&c)})
	}
	return reqs
}

// notUserErrors is err without its userErrors (err may join several steps' errors): what a
// retry can fix. Nil when every error is the user's to fix.
func notUserErrors(err error) error {
	var ue *userError
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		var rest []error
		for _, e := range joined.Unwrap() {
			if !errors.As(e, &ue) {
				rest = append(rest, e)
			}
		}
		return errors.Join(rest...)
	}
	if errors.As(err, &ue) {
		return nil
	}
	return err
}
