package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/binlog"
	"github.com/dolphin-operator/dolphin/internal/migrate"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// externalSourceRecheck is how soon the checks of an external source that failed run again:
// the fix happens on the server, which no watch reports.
const externalSourceRecheck = 30 * time.Second

// externalSourceTimeout bounds one check of an external source (connect and read).
const externalSourceTimeout = 20 * time.Second

// Keys of the Secrets spec.bootstrap.external names.
const (
	externalUsernameKey = resources.ExternalUsernameKey
	externalPasswordKey = resources.ExternalPasswordKey
	externalCAKey       = resources.ExternalCAKey
)

// externalCheck is the outcome of one check of a cluster's external source, for the
// ExternalSourceReady condition.
type externalCheck struct {
	ready           bool
	reason, message string
}

// externalChecks hands each check's outcome from the bootstrap step to the status the same
// reconcile writes.
type externalChecks struct {
	mu sync.Mutex
	m  map[types.NamespacedName]externalCheck
}

func (e *externalChecks) put(k types.NamespacedName, c externalCheck) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.m == nil {
		e.m = map[types.NamespacedName]externalCheck{}
	}
	e.m[k] = c
}

// take returns the outcome of the check this reconcile ran, if any, and forgets it.
func (e *externalChecks) take(k types.NamespacedName) (externalCheck, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c, ok := e.m[k]
	delete(e.m, k)
	return c, ok
}

// externalBootstrap is spec.bootstrap.external, or nil.
func externalBootstrap(c *dolphinv1.MySQLCluster) *dolphinv1.ExternalSource {
	if c.Spec.Bootstrap == nil {
		return nil
	}
	return c.Spec.Bootstrap.External
}

// physicalExternalCopy is spec.bootstrap.external.physicalCopy, or nil.
func physicalExternalCopy(c *dolphinv1.MySQLCluster) *dolphinv1.BackupLocation {
	if ext := externalBootstrap(c); ext != nil {
		return ext.PhysicalCopy
	}
	return nil
}

// physicalCopySource checks the backup spec.bootstrap.external.physicalCopy names, as a
// bootstrap backup is checked, and that the server (at sourcePos) reached the backup's
// position: a backup the server never was at is another server's, and replicating from the
// server after it would skip or repeat transactions.
func (r *MySQLClusterReconciler) physicalCopySource(ctx context.Context, c *dolphinv1.MySQLCluster, loc *dolphinv1.BackupLocation, sourcePos string) (*dolphinv1.RestoreStatus, error) {
	const field = "spec.bootstrap.external.physicalCopy"
	from, err := r.backupLocation(ctx, c, field, loc)
	if err != nil {
		return nil, err
	}
	if err := r.checkRestoreSource(ctx, c, from, nil); err != nil {
		return nil, err
	}
	if msg := physicalCopyMismatch(sourcePos, from.GTIDPosition); msg != "" {
		return nil, &userError{Reason: "ExternalBackupNotOfSource", Message: fmt.Sprintf("%s: the backup at %s %s; take a backup of this server on its host "+
			"with dolphin backup (docs/migrate.md), then create the cluster again naming it", field, from.Path, msg)}
	}
	return from, nil
}

// physicalCopyMismatch says why a backup at backupPos cannot be the copy of a server at
// sourcePos ("" when it can): the server must hold every transaction of the backup's position
// (it may be further: writes after the backup are what the cluster replicates in).
func physicalCopyMismatch(sourcePos, backupPos string) string {
	bp, err := binlog.Parse(backupPos)
	if err != nil {
		return fmt.Sprintf("has a GTID position Dolphin cannot read (%q: %v)", backupPos, err)
	}
	sp, err := binlog.Parse(sourcePos)
	if err != nil {
		return fmt.Sprintf("cannot be compared with the server's GTID position %q (%v)", sourcePos, err)
	}
	if !sp.Covers(bp) {
		return fmt.Sprintf("is at GTID position %q, which the server (at %q) never reached: it is a backup of another server", backupPos, sourcePos)
	}
	return ""
}

// externalSourceReady reports whether the checks of c's external source passed (the
// ExternalSourceReady condition, for this generation of the spec).
func externalSourceReady(c *dolphinv1.MySQLCluster) bool {
	cond := meta.FindStatusCondition(c.Status.Conditions, dolphinv1.ConditionExternalSourceReady)
	return cond != nil && cond.Status == metav1.ConditionTrue
}

// reconcileExternalSource checks the server spec.bootstrap.external names before anything of
// the cluster's data exists (migrate.Observe and migrate.Check, through the account given):
// until no blocking check fails the steps stop here — no StatefulSet, no pod — and the
// ExternalSourceReady condition lists what to change on the server, checked again every
// externalSourceRecheck. Once the checks passed, or once the cluster has a primary, they do
// not run again.
func (r *MySQLClusterReconciler) reconcileExternalSource(ctx context.Context, c *dolphinv1.MySQLCluster) error {
	ext := externalBootstrap(c)
	if ext == nil || externalSourceReady(c) || (c.Status.Topology != nil && c.Status.Topology.Primary != "") {
		return nil
	}
	key := client.ObjectKeyFromObject(c)
	fail := func(reason, message string) error {
		r.externalChecks.put(key, externalCheck{reason: reason, message: message})
		return &pollingUserError{err: &userError{Reason: reason, Message: message}, after: externalSourceRecheck}
	}
	ep, err := r.externalEndpoint(ctx, c, ext)
	if err != nil {
		var ue *userError
		if errors.As(err, &ue) {
			return fail(ue.Reason, ue.Message)
		}
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, externalSourceTimeout)
	defer cancel()
	db, err := ep.Open()
	if err != nil {
		return fail("ExternalSourceUnreachable", fmt.Sprintf("spec.bootstrap.external: %v", err))
	}
	defer db.Close()
	src, err := migrate.Observe(cctx, db)
	if err != nil {
		return fail("ExternalSourceUnreachable", fmt.Sprintf(
			"spec.bootstrap.external: reading the server %s failed: %v. Check that the operator reaches it, and the account in Secret %s; "+
				"Dolphin tries again every %s, and nothing of the cluster is created until then",
			ep.Describe(), err, ext.AccountSecretName, externalSourceRecheck))
	}
	method := migrate.CopyLogical
	if ext.PhysicalCopy != nil {
		method = migrate.CopyPhysical
	}
	findings := migrate.Check(src, migrate.Target{EngineVersion: c.Spec.Engine.Version, Copy: method, Fallback: ext.Fallback != nil})
	var lines []string
	for _, f := range findings {
		lines = append(lines, f.String())
	}
	if migrate.Blocking(findings) {
		return fail("ExternalSourceNotReady", fmt.Sprintf(
			"the server %s (%s) cannot be copied as it is: %s. Change it on the server; Dolphin checks again every %s, and nothing of the cluster is created until then",
			ep.Describe(), src.Version, strings.Join(lines, "; "), externalSourceRecheck))
	}
	msg := fmt.Sprintf("the server %s (%s, GTID position %q) passed the checks", ep.Describe(), src.Version, src.GTIDBinlogPos)
	if ext.PhysicalCopy != nil {
		from, err := r.physicalCopySource(ctx, c, ext.PhysicalCopy, src.GTIDBinlogPos)
		if err != nil {
			var ue *userError
			if errors.As(err, &ue) {
				return fail(ue.Reason, ue.Message)
			}
			return err
		}
		if c.Status.RestoredFrom == nil {
			if err := r.recordRestoredFrom(ctx, c, from); err != nil {
				return err
			}
		}
		msg += fmt.Sprintf("; the backup %s was taken from it at GTID position %q", from.Path, from.GTIDPosition)
	}
	if len(lines) > 0 {
		msg += "; warnings: " + strings.Join(lines, "; ")
	}
	r.externalChecks.put(key, externalCheck{ready: true, reason: "Checked", message: msg})
	r.event(c, corev1.EventTypeNormal, "ExternalSourceChecked", "Check", "%s", msg)
	// The seed step of this reconcile reads the condition (the status written at its end
	// records it with the same words).
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: dolphinv1.ConditionExternalSourceReady,
		Status: metav1.ConditionTrue, Reason: "Checked", Message: msg, ObservedGeneration: c.Generation})
	return nil
}

// externalEndpoint is the source spec.bootstrap.external names, with the account and CA of
// its Secrets (the CA in memory: the operator has no writable temporary directory). A
// missing Secret or key is a userError.
func (r *MySQLClusterReconciler) externalEndpoint(ctx context.Context, c *dolphinv1.MySQLCluster, ext *dolphinv1.ExternalSource) (migrate.Endpoint, error) {
	ep := migrate.Endpoint{Host: ext.Host, Port: int(ext.Port)}
	secret := func(name string, keys ...string) (map[string][]byte, error) {
		var s corev1.Secret
		err := r.apiReader().Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, &s)
		switch {
		case apierrors.IsNotFound(err):
			return nil, &userError{Reason: "ExternalSourceSecretMissing", Message: fmt.Sprintf(
				"spec.bootstrap.external names Secret %s, which does not exist in namespace %s: create it with the keys %s", name, c.Namespace, strings.Join(keys, " and "))}
		case err != nil:
			return nil, fmt.Errorf("reading Secret %s: %w", name, err)
		}
		for _, k := range keys {
			if len(s.Data[k]) == 0 {
				return nil, &userError{Reason: "ExternalSourceSecretIncomplete", Message: fmt.Sprintf(
					"Secret %s has no %q key: spec.bootstrap.external needs %s in it", name, k, strings.Join(keys, " and "))}
			}
		}
		return s.Data, nil
	}
	acct, err := secret(ext.AccountSecretName, externalUsernameKey, externalPasswordKey)
	if err != nil {
		return ep, err
	}
	ep.User, ep.Password = string(acct[externalUsernameKey]), string(acct[externalPasswordKey])
	if ext.CASecretName == "" {
		return ep, nil
	}
	ca, err := secret(ext.CASecretName, externalCAKey)
	if err != nil {
		return ep, err
	}
	ep.CACertPEM = ca[externalCAKey]
	return ep, nil
}

// externalSeedRequest is the seed instruction of a cluster's first instance: copy the external
// server, with the account and CA of spec.bootstrap.external's Secrets.
func (r *MySQLClusterReconciler) externalSeedRequest(ctx context.Context, c *dolphinv1.MySQLCluster) (agent.SeedRequest, error) {
	ep, err := r.externalEndpoint(ctx, c, externalBootstrap(c))
	if err != nil {
		return agent.SeedRequest{}, err
	}
	return agent.SeedRequest{Mode: SeedExternal, External: &agent.SeedExternal{
		Host: ep.Host, Port: ep.Port, User: ep.User, Password: ep.Password, CACertPEM: ep.CACertPEM}}, nil
}
