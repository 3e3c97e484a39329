package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/termination"
)

// verifyPollInterval is how often a running restore check is looked at (its pod's changes
// wake the reconciler too).
const verifyPollInterval = 5 * time.Second

// verify runs the restore check of a successful backup when its mysql.dolphin.dev/verify
// annotation asks for one it has not answered: a throwaway pod restores the backup into an
// emptyDir and checks it (resources.VerifyPod); its result line becomes
// status.verification. A backup never checked is Unverified.
func (r *MySQLBackupReconciler) verify(ctx context.Context, b *dolphinv1.MySQLBackup) (reconcile.Result, error) {
	v := b.Status.Verification
	if v == nil {
		b.Status.Verification = &dolphinv1.BackupVerificationStatus{Phase: dolphinv1.VerificationUnverified}
		if err := r.Client.Status().Update(ctx, b); err != nil {
			return reconcile.Result{}, fmt.Errorf("recording the backup as unverified: %w", err)
		}
		return reconcile.Result{}, nil
	}
	if v.Phase == dolphinv1.VerificationRunning {
		return r.followVerification(ctx, b)
	}
	req := b.Annotations[dolphinv1.VerifyAnnotation]
	if req == "" || req == v.Request {
		return reconcile.Result{}, nil
	}
	var c dolphinv1.MySQLCluster
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: b.Spec.Cluster}, &c); err != nil {
		if apierrors.IsNotFound(err) {
			return r.endVerification(ctx, b, req, dolphinv1.VerificationFailed,
				fmt.Sprintf("MySQLCluster %s no longer exists: the check runs in its database image", b.Spec.Cluster))
		}
		return reconcile.Result{}, err
	}
	storeURL := ""
	if b.Status.Store != nil && b.Status.Store.PVC != nil {
		cfg, err := resolveStore(ctx, r.storeClients(b), b.Namespace, b.Status.Store)
		var ue *userError
		switch {
		case errors.As(err, &ue) && ue.Reason == "BackupStoreStarting":
			return reconcile.Result{RequeueAfter: verifyPollInterval}, nil
		case errors.As(err, &ue):
			return r.endVerification(ctx, b, req, dolphinv1.VerificationFailed, ue.Message)
		case err != nil:
			return reconcile.Result{}, err
		}
		storeURL = cfg.HTTP.URL
	}
	// With continuous archiving on, the check replays the archive after the backup too: a
	// point-in-time restore from this backup would need it.
	archivePrefix := ""
	if c.Spec.Backup != nil && c.Spec.Backup.ContinuousArchiving != nil && c.Spec.Backup.ContinuousArchiving.Enabled {
		archivePrefix = resources.BinlogArchivePrefix(&c)
	}
	if err := r.Client.Apply(ctx, resources.VerifyPod(&c, b, storeURL, archivePrefix, r.Build), client.FieldOwner(resources.FieldManager), client.ForceOwnership); err != nil {
		return reconcile.Result{}, fmt.Errorf("creating the verification pod: %w", err)
	}
	now := metav1.Now()
	b.Status.Verification = &dolphinv1.BackupVerificationStatus{Phase: dolphinv1.VerificationRunning, Request: req,
		Pod: resources.VerifyPodName(b), StartTime: &now}
	if err := r.Client.Status().Update(ctx, b); err != nil {
		return reconcile.Result{}, fmt.Errorf("recording the verification start: %w", err)
	}
	r.event(b, corev1.EventTypeNormal, "VerificationStarted", "Verify", "restoring the backup in pod %s to check it", b.Status.Verification.Pod)
	return reconcile.Result{RequeueAfter: verifyPollInterval}, nil
}

// followVerification records the end of a running check from its pod, then deletes the pod.
func (r *MySQLBackupReconciler) followVerification(ctx context.Context, b *dolphinv1.MySQLBackup) (reconcile.Result, error) {
	v := b.Status.Verification
	var pod corev1.Pod
	key := types.NamespacedName{Namespace: b.Namespace, Name: v.Pod}
	err := r.Client.Get(ctx, key, &pod)
	if apierrors.IsNotFound(err) {
		// The cache may not have seen a pod created a moment ago (the status update that
		// recorded it wakes this reconcile at once): gone only if the API server says so.
		err = liveReader(r.APIReader, r.Client).Get(ctx, key, &pod)
	}
	if apierrors.IsNotFound(err) {
		return r.endVerification(ctx, b, v.Request, dolphinv1.VerificationFailed, "the verification pod "+v.Pod+" disappeared before it ended")
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	phase, msg := verificationOutcome(&pod)
	if phase == "" {
		return reconcile.Result{RequeueAfter: verifyPollInterval}, nil
	}
	res, err := r.endVerification(ctx, b, v.Request, phase, msg)
	if err != nil {
		return res, err
	}
	if err := r.Client.Delete(ctx, &pod); client.IgnoreNotFound(err) != nil {
		return reconcile.Result{}, fmt.Errorf("deleting the verification pod: %w", err)
	}
	return res, nil
}

// verificationOutcome reads a finished verification pod: Verified with `dolphin verify`'s
// result line, or Failed with its last line; "" while it runs.
func verificationOutcome(p *corev1.Pod) (dolphinv1.VerificationPhase, string) {
	msg := ""
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == resources.ContainerVerify && s.State.Terminated != nil {
			msg = termination.Last(s.State.Terminated.Message)
			if msg == "" {
				msg = fmt.Sprintf("exit code %d (%s)", s.State.Terminated.ExitCode, s.State.Terminated.Reason)
			}
		}
	}
	switch p.Status.Phase {
	case corev1.PodSucceeded:
		result, ok := termination.Result(msg, termination.VerifyPrefix)
		if !ok || !strings.HasPrefix(result, termination.VerifiedResult) {
			return dolphinv1.VerificationFailed, "the check exited 0 without its result line (" + msg + ")"
		}
		return dolphinv1.VerificationVerified, result
	case corev1.PodFailed:
		if msg == "" {
			msg = p.Status.Reason + " " + p.Status.Message
		}
		return dolphinv1.VerificationFailed, msg
	}
	return "", ""
}

func (r *MySQLBackupReconciler) endVerification(ctx context.Context, b *dolphinv1.MySQLBackup, req string, phase dolphinv1.VerificationPhase, msg string) (reconcile.Result, error) {
	now := metav1.Now()
	v := b.Status.Verification
	if v == nil {
		v = &dolphinv1.BackupVerificationStatus{}
	}
	v.Phase, v.Request, v.Message, v.CompletionTime = phase, req, msg, &now
	b.Status.Verification = v
	if err := r.Client.Status().Update(ctx, b); err != nil {
		return reconcile.Result{}, fmt.Errorf("recording the verification result: %w", err)
	}
	typ, reason := corev1.EventTypeNormal, "BackupVerified"
	if phase != dolphinv1.VerificationVerified {
		typ, reason = corev1.EventTypeWarning, "VerificationFailed"
	}
	r.event(b, typ, reason, "Verify", "%s", msg)
	return reconcile.Result{}, nil
}
