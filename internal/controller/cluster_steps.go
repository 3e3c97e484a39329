package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// step is one named part of a reconcile. Steps run in order; the first error of a step that
// is not independent stops the run.
type step struct {
	name string
	run  stepFunc
	// independent: no later step needs this one; its failure is reported and the run goes
	// on (a user error there does not make the cluster Failed, docs/design/0053).
	independent bool
	// last: runs after the status is written and the topology engine updated, whatever the
	// other steps did (scheduled backups never stop for a user error elsewhere, and a
	// failover's forwarding waits for no backup store); its error is returned, not written
	// to the status.
	last bool
}

// stepFunc is a step's work: it ends with an error, or with an outcome — done, or done for now
// with when to look again and why.
type stepFunc func(ctx context.Context, c *dolphinv1.MySQLCluster) (stepOutcome, error)

// stepOutcome is how a step that did not fail ended. The zero value is done; requeueAfter > 0
// asks for the cluster to be reconciled again within that time, for reason.
type stepOutcome struct {
	requeueAfter time.Duration
	reason       string
}

// after records that the cluster is to be looked at again within d, for reason; the soonest
// of several asks wins.
func (o *stepOutcome) after(d time.Duration, reason string) {
	if d > 0 && (o.requeueAfter == 0 || d < o.requeueAfter) {
		o.requeueAfter, o.reason = d, reason
	}
}

// merge records p's ask in o.
func (o *stepOutcome) merge(p stepOutcome) { o.after(p.requeueAfter, p.reason) }

// done adapts a step that never asks to look again.
func done(run func(context.Context, *dolphinv1.MySQLCluster) error) stepFunc {
	return func(ctx context.Context, c *dolphinv1.MySQLCluster) (stepOutcome, error) {
		return stepOutcome{}, run(ctx, c)
	}
}

// collecting adapts a step that records its asks to look again as it goes (several pods may
// each ask).
func collecting(run func(context.Context, *dolphinv1.MySQLCluster, *stepOutcome) error) stepFunc {
	return func(ctx context.Context, c *dolphinv1.MySQLCluster) (stepOutcome, error) {
		var out stepOutcome
		err := run(ctx, c, &out)
		return out, err
	}
}

// steps is the reconcile order: a deleted primary pod switched over first (nothing else may
// hold that up while its server waits, cluster_pod_stop.go), a new pod's start the kubelet
// put aside for a race retried (cluster_pod_start.go; nothing else may hold that up either),
// credentials and configuration before the pods that mount them, Services before the StatefulSet that names its headless
// Service, the rollout of its pod template (cluster_rollout.go), then the steps nothing
// depends on — the budget, storage growth, the backup store, the restore's outcome, the
// archive — each run whatever the others do (a StorageClass that cannot expand must not stop
// the backup store or the archive), and last, once the status is written, the backup schedule
// and retention, which run whatever the other steps did.
func (r *MySQLClusterReconciler) steps() []step {
	return []step{
		{name: "pod-stop", run: collecting(r.reconcilePodStop)},
		{name: "pod-start", run: collecting(r.reconcilePodStart), independent: true},
		{name: "credentials", run: done(r.reconcileCredentials)},
		{name: "config", run: done(r.reconcileConfig)},
		{name: "agent-secret", run: done(r.reconcileAgentSecret)},
		{name: "tls", run: done(r.reconcileTLS)},
		{name: "service-account", run: done(r.reconcileServiceAccount)},
		{name: "services", run: done(r.reconcileServices)},
		{name: "bootstrap", run: done(r.reconcileBootstrap)},
		{name: "statefulset", run: done(r.reconcileStatefulSet)},
		{name: "seed", run: collecting(r.reconcileSeeds)},
		{name: "reclone", run: collecting(r.reconcileReclone)},
		{name: "engine-upgrade", run: collecting(r.reconcileEngineUpgrade)},
		{name: "rollout", run: done(r.reconcileRollout)},
		{name: "pod-disruption-budget", run: done(r.reconcilePodDisruptionBudget), independent: true},
		{name: "storage", run: done(r.reconcileStorage), independent: true},
		{name: "backup-store", run: collecting(r.reconcileBackupStore), independent: true},
		{name: "restore-outcome", run: done(r.reconcileRestoreOutcome), independent: true},
		{name: "binlog-archive", run: collecting(r.reconcileBinlogArchive), independent: true},
		{name: "metrics-secret", run: done(r.reconcileMetricsSecret), independent: true},
		{name: "backup-schedule", run: r.reconcileBackupSchedule, last: true},
	}
}

// reconcileCredentials makes sure the Secret with the account passwords exists and is
// complete. A generated Secret is created once; later only missing keys are added, never
// changed. A user-supplied Secret is only read, and labelled (cluster_credentials_user_secret.go).
func (r *MySQLClusterReconciler) reconcileCredentials(ctx context.Context, c *dolphinv1.MySQLCluster) error {
	if c.Spec.Credentials.SecretName != "" {
		return r.reconcileUserCredentials(ctx, c)
	}
	name := resources.CredentialsSecretName(c)
	key := types.NamespacedName{Namespace: c.Namespace, Name: name}
	// Cache first, then live: a `<name>-credentials` made by hand (or by an older Dolphin)
	// lacks the label that brings it into the cache; it is labelled and used, never replaced.
	sp, err := r.readUserSecret(ctx, key)
	s := *sp
	if err == nil {
		err = r.labelUserSecret(ctx, c, &s)
	}
	switch {
	case apierrors.IsNotFound(err):
		s := resources.GeneratedCredentialsSecret(c, resources.NewPassword)
		if err := r.Client.Create(ctx, s); err != nil {
			return fmt.Errorf("creating Secret %s: %w", key, err)
		}
		r.event(c, corev1.EventTypeNormal, "CredentialsCreated", "Create", "generated Secret %s with random passwords", name)
		return r.reconcileCredentialHistory(ctx, c, s.Data)
	case err != nil:
		return fmt.Errorf("reading Secret %s: %w", key, err)
	}
	missing := resources.MissingCredentialKeys(&s)
	if len(missing) == 0 {
		return r.reconcileCredentialHistory(ctx, c, s.Data)
	}
	patch := client.MergeFromWithOptions(s.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	for _, k := range missing {
		s.Data[k] = []byte(resources.NewPassword())
	}
	if err := r.Client.Patch(ctx, &s, patch); err != nil {
		return fmt.Errorf("adding keys %v to Secret %s: %w", missing, key, err)
	}
	r.event(c, corev1.EventTypeNormal, "CredentialsCompleted", "Update", "added missing keys %s to Secret %s", strings.Join(missing, ", "), name)
	return r.reconcileCredentialHistory(ctx, c, s.Data)
}

func (r *MySQLClusterReconciler) reconcileConfig(ctx context.Context, c *dolphinv1.MySQLCluster) error {
	// Before anything is applied or restarted: a server started with an option it does not
	// know refuses to start.
	if unknown := resources.UnknownConfigKeys(c); len(unknown) > 0 {
		return &userError{Reason: "UnknownMySQLConfigKey", Message: fmt.Sprintf(
			"spec.mysqlConfig sets %s, which Dolphin does not know for %s %s: check the spelling; to pass an option "+
				"Dolphin does not know, write it with my.cnf's loose_ prefix (loose_%s), which the server ignores "+
				"when it does not know it either. my.cnf was not changed and nothing restarted (the run-time settings "+
				"of the other keys are applied)",
			strings.Join(unknown, ", "), c.Spec.Engine.Flavor, c.Spec.Engine.Version, unknown[0])}
	}
	refused, misread := resources.InvalidConfigValues(c)
	if len(refused) > 0 {
		return &userError{Reason: "InvalidMySQLConfig", Message: "spec.mysqlConfig: " + strings.Join(refused, "; ") +
			": a server would not start with it. my.cnf was not changed and nothing restarted (the run-time settings of the other keys are applied)"}
	}
	if len(misread) > 0 {
		// mysqld starts with such a value, reading it as OFF (as it did before this check
		// existed): said, not refused, so that a running cluster is never held up by it.
		r.event(c, corev1.EventTypeWarning, "MySQLConfigMisread", "Reconcile", "spec.mysqlConfig: %s: mysqld reads it as OFF", strings.Join(misread, "; "))
	}
	cm, err := resources.ConfigMap(c)
	if err != nil {
		return &userError{Reason: "InvalidMySQLConfig", Message: err.Error() + ": fix spec.mysqlConfig"}
	}
	return applyAndRecord(ctx, r, c, &corev1.ConfigMap{}, cm, corev1ac.ExtractConfigMap)
}

func (r *MySQLClusterReconciler) reconcileServiceAccount(ctx context.Context, c *dolphinv1.MySQLCluster) error {
	return applyAndRecord(ctx, r, c, &corev1.ServiceAccount{}, resources.ServiceAccount(c), corev1ac.ExtractServiceAccount)
}

func (r *MySQLClusterReconciler) reconcileServices(ctx context.Context, c *dolphinv1.MySQLCluster) error {
	// The topology reporter owns the primary Service's selector once it has pointed it at the
	// primary's pod: applying it here would take it back (docs/design/0050).
	var primary corev1.Service
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: resources.NamesFor(c).PrimaryService}, &primary)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading the primary Service: %w", err)
	}
	_, topologyOwnsSelector := resources.SelectsOnePod(primary.Spec.Selector)
	for _, svc := range []*corev1ac.ServiceApplyConfiguration{
		resources.HeadlessService(c), resources.PrimaryService(c, topologyOwnsSelector), resources.ReplicaService(c),
	} {
		if err := applyAndRecord(ctx, r, c, &corev1.Service{}, svc, corev1ac.ExtractService); err != nil {
			return err
		}
	}
	return nil
}

func (r *MySQLClusterReconciler) reconcileStatefulSet(ctx context.Context, c *dolphinv1.MySQLCluster) error {
	if run := resources.InstancesToRun(c); run != c.Spec.Instances {
		// Scaling down would remove the primary: keep it, and move the primary role to the
		// first instance first.
		target := resources.PodName(c, 0)
		fresh := true
		if r.Topology != nil {
			var err error
			if fresh, err = r.Topology.RequestSwitchover(ctx, client.ObjectKeyFromObject(c), target, ""); err != nil {
				return fmt.Errorf("requesting a switchover before scaling down: %w", err)
			}
		}
		if fresh {
			r.event(c, corev1.EventTypeNormal, "ScaleDownWaitsForSwitchover", "Scale",
				"keeping %d instances until the primary %s hands over to %s", run, c.Status.Topology.Primary, target)
		}
		c = c.DeepCopy()
		c.Spec.Instances = run
	}
	// The claim template keeps its live size: the storage step grows it (cluster_storage.go).
	c, wait, err := r.withLiveClaimTemplate(ctx, c)
	if err != nil || wait {
		return err
	}
	// The agent image and the template generation follow the pods, not the operator's version
	// (resources.ChooseBuild): an operator upgrade alone restarts no database.
	var live *appsv1.StatefulSet
	var existing appsv1.StatefulSet
	switch err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: resources.NamesFor(c).StatefulSet}, &existing); {
	case err == nil:
		live = &existing
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading the StatefulSet: %w", err)
	}
	build, annotations, err := resources.ChooseBuild(c, live, r.Build)
	if err != nil {
		return &userError{Reason: "InvalidPodTemplate", Message: err.Error() + ": fix spec.podTemplate"}
	}
	sts, err := resources.StatefulSet(c, build)
	if err != nil {
		return &userError{Reason: "InvalidPodTemplate", Message: err.Error() + ": fix spec.podTemplate"}
	}
	sts.WithAnnotations(annotations)
	return applyAndRecord(ctx, r, c, &appsv1.StatefulSet{}, sts, extractStatefulSet)
}

// extractStatefulSet is appsv1ac.ExtractStatefulSet without the status of the claim
// templates: the API server defaults it (phase Pending) and the extraction reports it as
// ours, so without this every comparison would see a change that is not there.
func extractStatefulSet(sts *appsv1.StatefulSet, manager string) (*appsv1ac.StatefulSetApplyConfiguration, error) {
	ac, err := appsv1ac.ExtractStatefulSet(sts, manager)
	if err != nil || ac.Spec == nil {
		return ac, err
	}
	for i := range ac.Spec.VolumeClaimTemplates {
		ac.Spec.VolumeClaimTemplates[i].Status = nil
	}
	return ac, nil
}

func (r *MySQLClusterReconciler) reconcilePodDisruptionBudget(ctx context.Context, c *dolphinv1.MySQLCluster) error {
	return applyAndRecord(ctx, r, c, &policyv1.PodDisruptionBudget{}, resources.PodDisruptionBudget(c), policyv1ac.ExtractPodDisruptionBudget)
}

// namedApplyConfiguration is an apply configuration that knows its object's kind and name.
type namedApplyConfiguration interface {
	runtime.ApplyConfiguration
	GetName() *string
	GetKind() *string
}

// applyAndRecord applies one child and records an event when it was created or changed.
func applyAndRecord[O client.Object, A namedApplyConfiguration](
	ctx context.Context, r *MySQLClusterReconciler, c *dolphinv1.MySQLCluster, live O, desired A,
	extract func(O, string) (A, error),
) error {
	key := types.NamespacedName{Namespace: c.Namespace, Name: *desired.GetName()}
	outcome, err := applyChild(ctx, r.Client, key, live, desired, extract)
	if err != nil {
		return err
	}
	if outcome != outcomeUnchanged {
		kind := *desired.GetKind()
		log.FromContext(ctx).Info("applied", "kind", kind, "name", key.Name, "outcome", outcome)
		r.event(c, corev1.EventTypeNormal, string(outcome)+kind, string(outcome), "%s %s %s", outcome, kind, key.Name)
	}
	return nil
}
