package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// EngineUpgradedAnnotation on an instance pod records the version its server's system tables
// were brought up to (mariadb-upgrade, run by the pod's agent) since the pod started, e.g.
// "11.8.9-MariaDB". A re-created pod — the way a new engine version arrives — has none until
// the engine-upgrade step ran, and a rollout waits for it before it restarts another instance
// or switches over (docs/design/0048). "unavailable" records an agent that predates the
// upgrade endpoint (a pod not re-created since the operator was upgraded).
const EngineUpgradedAnnotation = "mysql.dolphin.dev/engine-upgraded"

// engineUpgradeUnavailable is EngineUpgradedAnnotation's value for an agent without the tool.
const engineUpgradeUnavailable = "unavailable"

// engineUpgradeTimeout bounds one run of the tool (it checks every table of the instance).
const engineUpgradeTimeout = 10 * time.Minute

// engineUpgradeRetry is how soon a failed upgrade is tried again.
const engineUpgradeRetry = 15 * time.Second

// engineUpgrades reports whether c's servers get their system tables upgraded after a
// version change: MariaDB does (mariadb-upgrade, through the agents: none without them);
// MySQL 8.4 upgrades them itself as it starts.
func (r *MySQLClusterReconciler) engineUpgrades(c *dolphinv1.MySQLCluster) bool {
	return c.Spec.Engine.Flavor != dolphinv1.FlavorMySQL && r.Agents != nil
}

// engineUpgradePoll is how often a cluster is looked at again while an engine upgrade runs
// beside its reconciles. A run that ends well wakes it sooner: its annotation is a pod update,
// which the controller watches; the poll finds a failed one.
const engineUpgradePoll = 5 * time.Second

// engineUpgradeRecordWait is how long a successful run's pod may go without its annotation
// in the cache (the patch on its way, or removed by someone) before the pod is run again.
const engineUpgradeRecordWait = 30 * time.Second

// engineUpgradeRuns follows the engine upgrades running beside the reconciles, by pod UID: a
// real upgrade takes ~9 s per instance on a loaded node, and run inside the reconcile it held
// status, deletion and every other step of its cluster that long (docs/design/0048).
type engineUpgradeRuns struct {
	mu   sync.Mutex
	runs map[types.UID]*engineUpgradeRun
}

// engineUpgradeRun is one run of the engine upgrade on one pod.
type engineUpgradeRun struct {
	cluster  types.NamespacedName
	pod      string
	done     bool
	err      error
	ended    time.Time
	reported bool // its failure's event was emitted
}

// reconcileEngineUpgrade has the agent of every ready instance pod that has not been checked
// since it started bring the server's system tables up to its version, beside the reconcile,
// and the answer recorded on the pod (EngineUpgradedAnnotation) when it ends. The tool does
// nothing when the data directory is already at the server's version, so a pod restarted on
// the same version costs one quick call. While a run is under way the cluster is looked at
// again every engineUpgradePoll; a failure is a Warning event and a new run after
// engineUpgradeRetry. The rollout waits for the annotation meanwhile; the other steps go on.
func (r *MySQLClusterReconciler) reconcileEngineUpgrade(ctx context.Context, c *dolphinv1.MySQLCluster, out *stepOutcome) error {
	if !r.engineUpgrades(c) {
		return nil
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(c.Namespace), client.MatchingLabels(resources.SelectorLabels(c))); err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	key := client.ObjectKeyFromObject(c)
	waiting, existing := map[types.UID]bool{}, map[types.UID]bool{}
	for i := range pods.Items {
		p := &pods.Items[i]
		existing[p.UID] = true
		if p.DeletionTimestamp != nil || p.Annotations[EngineUpgradedAnnotation] != "" || !podReady(p) {
			continue
		}
		waiting[p.UID] = true
		run := r.upgrades.get(p.UID)
		switch {
		case run == nil:
			r.startEngineUpgrade(ctx, c, p)
			out.after(engineUpgradePoll, "an engine upgrade runs")
		case !run.done:
			out.after(engineUpgradePoll, "an engine upgrade runs")
		case run.err == nil && time.Since(run.ended) < engineUpgradeRecordWait:
			// Recorded on the pod; the cache shows it shortly.
			out.after(engineUpgradePoll, "an engine upgrade's record is on its way")
		case run.err == nil:
			// The record never showed (removed since?): the tool runs again, a no-op when
			// the tables are current.
			r.startEngineUpgrade(ctx, c, p)
			out.after(engineUpgradePoll, "an engine upgrade runs")
		default:
			if r.upgrades.reportOnce(p.UID) {
				r.eventAbout(c, p, corev1.EventTypeWarning, "EngineUpgradeFailed", "Upgrade",
					"bringing %s's system tables up to its server's version failed; Dolphin tries again, and a rollout waits: %v", p.Name, run.err)
			}
			if wait := engineUpgradeRetry - time.Since(run.ended); wait > 0 {
				out.after(wait, "an engine upgrade failed and is tried again")
			} else {
				r.startEngineUpgrade(ctx, c, p)
				out.after(engineUpgradePoll, "an engine upgrade runs")
			}
		}
	}
	r.upgrades.forget(key, waiting, existing)
	return nil
}

// startEngineUpgrade runs upgradeEngine on pod p beside the reconcile. The run outlives the
// reconcile's context (its own bound is engineUpgradeTimeout) and keeps its logger.
func (r *MySQLClusterReconciler) startEngineUpgrade(ctx context.Context, c *dolphinv1.MySQLCluster, p *corev1.Pod) {
	run := &engineUpgradeRun{cluster: client.ObjectKeyFromObject(c), pod: p.Name}
	r.upgrades.put(p.UID, run)
	c, p = c.DeepCopy(), p.DeepCopy()
	runCtx := context.WithoutCancel(ctx)
	go func() {
		err := r.upgradeEngine(runCtx, c, p)
		r.upgrades.finish(p.UID, run, err)
	}()
}

func (u *engineUpgradeRuns) get(uid types.UID) *engineUpgradeRun {
	u.mu.Lock()
	defer u.mu.Unlock()
	if r := u.runs[uid]; r != nil {
		cp := *r
		return &cp
	}
	return nil
}

func (u *engineUpgradeRuns) put(uid types.UID, run *engineUpgradeRun) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.runs == nil {
		u.runs = map[types.UID]*engineUpgradeRun{}
	}
	u.runs[uid] = run
}

// finish records the end of run, unless a newer run of the same pod replaced it.
func (u *engineUpgradeRuns) finish(uid types.UID, run *engineUpgradeRun, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.runs[uid] == run {
		run.done, run.err, run.ended = true, err, time.Now()
	}
}

// reportOnce reports whether the failed run of uid has not had its event yet, and marks it.
func (u *engineUpgradeRuns) reportOnce(uid types.UID) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	r := u.runs[uid]
	if r == nil || r.reported {
		return false
	}
	r.reported = true
	return true
}

// forget drops the finished runs of cluster whose pods no longer wait for one: a successful
// run once its pod is recorded (or gone, or not ready), a failed one only once its pod is
// gone, so that a pod ready again soon after still waits out engineUpgradeRetry. Runs under
// way end on their own.
func (u *engineUpgradeRuns) forget(cluster types.NamespacedName, waiting, existing map[types.UID]bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for uid, r := range u.runs {
		if r.cluster != cluster || !r.done || waiting[uid] || (r.err != nil && existing[uid]) {
			continue
		}
		delete(u.runs, uid)
	}
}

// forgetCluster drops every run record of a cluster that is deleted (runs under way end on
// their own, their record with them).
func (u *engineUpgradeRuns) forgetCluster(cluster types.NamespacedName) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for uid, r := range u.runs {
		if r.cluster == cluster {
			delete(u.runs, uid)
		}
	}
}

// upgradeEngine runs the upgrade on one pod and records it there.
func (r *MySQLClusterReconciler) upgradeEngine(ctx context.Context, c *dolphinv1.MySQLCluster, p *corev1.Pod) error {
	password, err := r.operatorPasswordFor(ctx, c)
	if err != nil {
		return err
	}
	ag, err := r.Agents.Agent(ctx, c, p)
	if err != nil {
		return fmt.Errorf("reaching the agent: %w", err)
	}
	runCtx, cancel := context.WithTimeout(ctx, engineUpgradeTimeout)
	defer cancel()
	res, err := ag.EngineUpgrade(runCtx, agent.DBConn{User: resources.OperatorUser, Password: password})
	recorded := res.To
	switch {
	case agentTooOld(err):
		recorded = engineUpgradeUnavailable
		r.eventAbout(c, p, corev1.EventTypeWarning, "EngineUpgradeUnavailable", "Upgrade",
			"the agent of %s predates engine upgrades (it gets a newer one when the pod is re-created): its system tables were not checked", p.Name)
	case err != nil:
		return err
	case recorded == "":
		return errors.New("the agent reported no version")
	}
	patch := client.MergeFrom(p.DeepCopy())
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[EngineUpgradedAnnotation] = recorded
	if err := r.Client.Patch(ctx, p, patch); err != nil {
		return fmt.Errorf("recording the upgrade on pod %s: %w", p.Name, err)
	}
	if res.Ran {
		log.FromContext(ctx).Info("engine upgrade: system tables upgraded", "pod", p.Name, "from", res.From, "to", res.To, "seconds", res.Seconds)
		from := res.From
		if from == "" {
			from = "an unrecorded version"
		}
		r.eventAbout(c, p, corev1.EventTypeNormal, "EngineUpgraded", "Upgrade",
			"%s: system tables upgraded from %s to %s (mariadb-upgrade, %.1fs)", p.Name, from, res.To, res.Seconds)
	}
	return nil
}
