package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/binlog"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// maxKeptRecords is how many kept copies status.keptTransactions lists (the newest).
const maxKeptRecords = 10

// keptCopy is a kept copy's manifest and where it is.
type keptCopy struct {
	binlog.KeptCopy
	Location, StoreLocation string
}

// keepBeforeReclone asks the instance's agent to keep a copy of what it holds beyond the
// primary (binlog.Keep, measured against the primary's @@gtid_binlog_state read through the
// primary's agent) before its data is discarded. It returns the copy's manifest
// (Transactions 0: nothing to keep), or nil with no error when no copy can be made (the
// binary logs are purged, or an agent predates kept copies) but a person consented to the
// re-clone (plan.Consented). Any other failure — one that may pass — is an error that says
// why the re-clone waits; consent does not skip it.
func (r *MySQLClusterReconciler) keepBeforeReclone(ctx context.Context, c *dolphinv1.MySQLCluster, pods []corev1.Pod, a InstanceAgent, plan reclonePlan) (*keptCopy, error) {
	primary := c.Status.Topology.Primary
	var primaryPod *corev1.Pod
	for i := range pods {
		if pods[i].Name == primary {
			primaryPod = &pods[i]
		}
	}
	if primaryPod == nil || !containerReady(primaryPod, resources.ContainerAgent) {
		return nil, fmt.Errorf("the agent of the primary %s is not ready: Dolphin reads the primary's GTID state from it to keep a copy of what %s holds beyond it first", primary, plan.Instance)
	}
	pa, err := r.Agents.Agent(ctx, c, primaryPod)
	if err != nil {
		return nil, fmt.Errorf("reaching the agent of the primary %s: %w", primary, err)
	}
	password, err := r.operatorPasswordFor(ctx, c)
	if err != nil {
		return nil, err
	}
	state, err := pa.GTIDState(ctx, agent.DBConn{User: resources.OperatorUser, Password: password})
	switch {
	case agentTooOld(err) && plan.Consented:
		return nil, nil
	case agentTooOld(err):
		return nil, fmt.Errorf("the agent of the primary %s predates kept copies (agent protocol %d): it gets a newer one when its pods restart for a template change "+
			"(e.g. a new entry under spec.podTemplate.annotations); or annotate the cluster %s=%s to re-clone it without a copy",
			primary, resources.AgentProtocol-1, RecloneApprovedAnnotation, plan.Instance)
	case err != nil:
		return nil, fmt.Errorf("reading the primary's GTID state failed, so the re-clone waits and tries again: %w", err)
	}
	req := agent.KeepRequest{
		Name: plan.Instance + "-" + time.Now().UTC().Format("20060102T150405Z"), Instance: plan.Instance,
		Primary: primary, PrimaryState: state, Reason: plan.Reason,
	}
	if c.Spec.Backup != nil {
		// The copy goes to the backup store too: it then survives the volume.
		spec, err := clusterStore(ctx, r.Client, c)
		var cfg objectstore.Config
		if err == nil {
			cfg, err = resolveStore(ctx, storeClients{Reader: r.apiReader(), Writer: r.Client, Build: r.Build, Owner: c}, c.Namespace, spec)
		}
		if err != nil {
			return nil, fmt.Errorf("the backup store, where the copy of what it holds beyond the primary goes, cannot be used, so the re-clone waits: %w", err)
		}
		if req.Store, err = json.Marshal(cfg); err != nil {
			return nil, fmt.Errorf("encoding the store configuration: %w", err)
		}
		req.StorePrefix = resources.KeptStorePrefix(c)
	}
	resp, err := a.Keep(ctx, req)
	switch {
	case err == nil:
		return &keptCopy{KeptCopy: resp.Copy, Location: resp.Location, StoreLocation: resp.StoreLocation}, nil
	case plan.Consented && (errors.Is(err, binlog.ErrBinlogsPurged) || agentTooOld(err)):
		return nil, nil
	case agentTooOld(err):
		return nil, fmt.Errorf("its agent predates kept copies (agent protocol %d): it gets a newer one when its pods restart for a template change "+
			"(e.g. a new entry under spec.podTemplate.annotations); or annotate the cluster %s=%s to re-clone it without a copy",
			resources.AgentProtocol-1, RecloneApprovedAnnotation, plan.Instance)
	case errors.Is(err, binlog.ErrBinlogsPurged):
		return nil, fmt.Errorf("no copy of what it holds beyond the primary can be made (%w); Dolphin never discards it without one: "+
			"save what you need from it, then annotate the cluster %s=%s to re-clone it without a copy", err, RecloneApprovedAnnotation, plan.Instance)
	default:
		return nil, fmt.Errorf("keeping a copy of what it holds beyond the primary failed, so the re-clone waits and tries again: %w", err)
	}
}

// agentTooOld reports whether err is an agent's 404 for the keep request: an agent of
// protocol 1 (before kept copies), kept by pods that have not restarted since the upgrade.
func agentTooOld(err error) bool {
	var se *agent.StatusError
	return errors.As(err, &se) && se.StatusCode == http.StatusNotFound
}

// recordKept adds the copy to status.keptTransactions and says so in a Warning event.
func (r *MySQLClusterReconciler) recordKept(ctx context.Context, c *dolphinv1.MySQLCluster, pod *corev1.Pod, cp keptCopy) error {
	list := appendKept(c.Status.KeptTransactions, cp)
	if err := r.recordOwnedStatus(ctx, c, dolphinv1.MySQLClusterStatus{KeptTransactions: list}, "status.keptTransactions"); err != nil {
		return err
	}
	c.Status.KeptTransactions = list
	r.eventAbout(c, pod, corev1.EventTypeWarning, "KeptTransactions", "Reclone",
		"kept a copy of the %d transactions %s holds and the primary %s lacks (%s, committed %s to %s) as %s at %s%s before re-cloning it: review it and put it back with `dolphin kept`",
		cp.Transactions, cp.Instance, cp.Primary, cp.GTIDs, cp.FirstCommit.Format(time.RFC3339), cp.LastCommit.Format(time.RFC3339), cp.Name, cp.Location, alsoAt(cp.StoreLocation))
	return nil
}

// appendKept is list with cp's record added, the newest maxKeptRecords kept.
func appendKept(list []dolphinv1.KeptTransactions, cp keptCopy) []dolphinv1.KeptTransactions {
	rec := dolphinv1.KeptTransactions{
		Name: cp.Name, Instance: cp.Instance, Primary: cp.Primary, GTIDs: cp.GTIDs, Transactions: cp.Transactions,
		Location: cp.Location, StoreLocation: cp.StoreLocation, Time: metav1.NewTime(cp.Created),
	}
	if cp.Created.IsZero() {
		rec.Time = metav1.Now()
	}
	if !cp.FirstCommit.IsZero() {
		t := metav1.NewTime(cp.FirstCommit)
		rec.FirstCommit = &t
	}
	if !cp.LastCommit.IsZero() {
		t := metav1.NewTime(cp.LastCommit)
		rec.LastCommit = &t
	}
	out := append(append([]dolphinv1.KeptTransactions(nil), list...), rec)
	if len(out) > maxKeptRecords {
		out = out[len(out)-maxKeptRecords:]
	}
	return out
}

// alsoAt is " and <where>" for a copy also uploaded, "" otherwise.
func alsoAt(where string) string {
	if where == "" {
		return ""
	}
	return " and " + where
}
