package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// seedRetryInterval is how soon a reconcile looks again while an instance waits in its seed
// container (no peer can serve a clone yet, or its seed runs); seedContactRetry when its
// seed container does not answer yet: a new instance's start waits on that one (issue 35).
const (
	seedRetryInterval = 2 * time.Second
	seedContactRetry  = 500 * time.Millisecond
)

// reconcileSeeds tells every instance whose seed init container waits how to fill its empty
// data directory (decideSeed): empty, the bootstrap backup, or a clone of a peer's agent. The
// instruction goes to the seed container's HTTPS server (the agent's certificate and token),
// which carries it out and exits; an instance that already has data never waits.
func (r *MySQLClusterReconciler) reconcileSeeds(ctx context.Context, c *dolphinv1.MySQLCluster, out *stepOutcome) error {
	if r.Agents == nil {
		return nil
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(c.Namespace), client.MatchingLabels(resources.SelectorLabels(c))); err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	logger := log.FromContext(ctx)
	for i := range pods.Items {
		pod := &pods.Items[i]
		if !seedWaiting(pod) {
			continue
		}
		out.after(seedRetryInterval, "an instance waits to be seeded")
		plan, wait := decideSeed(c, pods.Items, pod)
		if wait != "" {
			logger.Info("instance waits to be seeded", "pod", pod.Name, "why", wait)
			continue
		}
		a, err := r.Agents.Agent(ctx, c, pod)
		if err != nil {
			logger.Info("seed container not reachable yet", "pod", pod.Name, "error", err.Error())
			out.after(seedContactRetry, "an instance's seed container does not answer yet")
			continue
		}
		st, err := a.SeedStatus(ctx)
		if err != nil {
			logger.Info("seed container not answering yet", "pod", pod.Name, "error", err.Error())
			out.after(seedContactRetry, "an instance's seed container does not answer yet")
			continue
		}
		if st.Phase == agent.SeedRunning || st.Phase == agent.SeedSucceeded {
			continue
		}
		req := agent.SeedRequest{Mode: plan.Mode}
		source := ""
		if plan.Mode == SeedExternal {
			if req, err = r.externalSeedRequest(ctx, c); err != nil {
				return err
			}
			source = " from " + req.External.Host
		}
		if plan.Mode == SeedClone {
			password, err := r.operatorPasswordFor(ctx, c)
			if err != nil {
				return err
			}
			req.Clone = &agent.SeedClone{
				URL:        "https://" + net.JoinHostPort(plan.Source.Status.PodIP, strconv.Itoa(resources.AgentPort)),
				ServerName: agent.AgentServerName(c.Name, c.Namespace),
			}
			req.SourceDB = agent.DBConn{User: resources.OperatorUser, Password: password}
			source = " from " + plan.Source.Name
		}
		if _, err := a.Seed(ctx, req); err != nil && !errors.Is(err, agent.ErrSeedRunning) {
			logger.Info("seed instruction not taken yet", "pod", pod.Name, "error", err.Error())
			out.after(seedContactRetry, "an instance's seed container did not take its instruction yet")
			continue
		}
		r.eventAbout(c, pod, corev1.EventTypeNormal, "Seeding", "Seed", "seeding %s: %s%s", pod.Name, plan.Mode, source)
	}
	return nil
}

// operatorPasswordFor is the current password of Dolphin's operator account of c.
func (r *MySQLClusterReconciler) operatorPasswordFor(ctx context.Context, c *dolphinv1.MySQLCluster) (string, error) {
	pw, err := r.credentialFor(ctx, c, resources.OperatorPasswordKey)
	return string(pw), err
}

// credentialFor is the value of key (resources.CredentialKeys) in c's credentials Secret
// (clusterCredential).
func (r *MySQLClusterReconciler) credentialFor(ctx context.Context, c *dolphinv1.MySQLCluster, key string) ([]byte, error) {
	return clusterCredential(ctx, r.Client, r.apiReader(), c, key)
}
