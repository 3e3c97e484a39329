package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
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

// reconcileEngineUpgrade asks the agent of every ready instance pod that has not been checked
// since it started to bring the server's system tables up to its version, and records the
// answer on the pod (EngineUpgradedAnnotation). The tool does nothing when the data directory
// is already at the server's version, so a pod restarted on the same version costs one quick
// call. A failure is a Warning event and a retry; the rollout waits meanwhile, and the other
// steps go on.
func (r *MySQLClusterReconciler) reconcileEngineUpgrade(ctx context.Context, c *dolphinv1.MySQLCluster, out *stepOutcome) error {
	if !r.engineUpgrades(c) {
		return nil
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(c.Namespace), client.MatchingLabels(resources.SelectorLabels(c))); err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil || p.Annotations[EngineUpgradedAnnotation] != "" || !podReady(p) {
			continue
		}
		if err := r.upgradeEngine(ctx, c, p); err != nil {
			r.eventAbout(c, p, corev1.EventTypeWarning, "EngineUpgradeFailed", "Upgrade",
				"bringing %s's system tables up to its server's version failed; Dolphin tries again, and a rollout waits: %v", p.Name, err)
			out.after(engineUpgradeRetry, "an engine upgrade failed and is tried again")
		}
	}
	return nil
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
