package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/schedule"
)

// clusterBackups lists the MySQLBackups of c (from the cache): those of its namespace whose
// spec.cluster names it.
func (r *MySQLClusterReconciler) clusterBackups(ctx context.Context, c *dolphinv1.MySQLCluster) ([]dolphinv1.MySQLBackup, error) {
	var list dolphinv1.MySQLBackupList
	if err := r.Client.List(ctx, &list, client.InNamespace(c.Namespace)); err != nil {
		return nil, fmt.Errorf("listing the cluster's MySQLBackups: %w", err)
	}
	out := list.Items[:0]
	for _, b := range list.Items {
		if b.Spec.Cluster == c.Name {
			out = append(out, b)
		}
	}
	return out, nil
}

// backupToCluster maps a MySQLBackup to its cluster (its phase feeds the cluster's status and
// the schedule).
func backupToCluster(_ context.Context, o client.Object) []reconcile.Request {
	b := o.(*dolphinv1.MySQLBackup)
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: b.Namespace, Name: b.Spec.Cluster}}}
}

// reconcileBackupSchedule is the backup-schedule step: scheduleBackups, asking to look again
// at the next slot.
func (r *MySQLClusterReconciler) reconcileBackupSchedule(ctx context.Context, c *dolphinv1.MySQLCluster) (stepOutcome, error) {
	var out stepOutcome
	next, err := r.scheduleBackups(ctx, c)
	out.after(next, "the next scheduled backup or restore check")
	return out, err
}

// scheduleBackups creates the scheduled backup that is due and deletes the backups
// retention expires. It returns how long until the next slot (zero: no schedule). A due
// backup waits while another backup of the cluster is Pending or Running (concurrency policy
// Forbid: at most one runs, and the due one is taken when it ends). Scheduled backups are not
// owned by the cluster: they outlive it, which is what a restore of a deleted cluster needs.
func (r *MySQLClusterReconciler) scheduleBackups(ctx context.Context, c *dolphinv1.MySQLCluster) (time.Duration, error) {
	if c.Spec.Backup == nil || c.Spec.Paused {
		return 0, nil
	}
	backups, err := r.clusterBackups(ctx, c)
	if err != nil {
		return 0, err
	}
	if err := r.applyRetention(ctx, c, backups); err != nil {
		return 0, err
	}
	verifyNext, err := r.scheduleVerification(ctx, c, backups)
	if err != nil {
		return 0, err
	}
	next, err := r.scheduleBackup(ctx, c, backups)
	if err != nil {
		return 0, err
	}
	if next == 0 || (verifyNext > 0 && verifyNext < next) {
		next = verifyNext
	}
	return next, nil
}

// scheduleBackup creates the backup that is due and returns how long until the next slot.
func (r *MySQLClusterReconciler) scheduleBackup(ctx context.Context, c *dolphinv1.MySQLCluster, backups []dolphinv1.MySQLBackup) (time.Duration, error) {
	s := c.Spec.Backup.Schedule
	if s == nil || s.Suspend {
		return 0, nil
	}
	sched, loc, err := schedule.Parse(s, "spec.backup.schedule")
	if err != nil {
		r.event(c, corev1.EventTypeWarning, "InvalidBackupSchedule", "Schedule", "%s", err.Error())
		return 0, nil
	}
	last := lastScheduledSlot(backups)
	if last.IsZero() {
		last = c.CreationTimestamp.Time
	}
	now := time.Now()
	d := decideSchedule(sched, loc, last, now)
	if d.Due.IsZero() {
		return time.Until(d.Next) + time.Second, nil
	}
	for _, b := range backups {
		if b.DeletionTimestamp == nil && (b.Status.Phase == "" || b.Status.Phase == dolphinv1.BackupPending || b.Status.Phase == dolphinv1.BackupRunning) {
			log.FromContext(ctx).V(1).Info("scheduled backup waits for the running one", "due", d.Due, "running", b.Name)
			return backupWaitInterval, nil
		}
	}
	b := &dolphinv1.MySQLBackup{
		ObjectMeta: metav1.ObjectMeta{
			Name:        c.Name + "-" + d.Due.UTC().Format("20060102-150405"),
			Namespace:   c.Namespace,
			Labels:      map[string]string{BackupClusterLabel: c.Name, BackupScheduledLabel: "true"},
			Annotations: map[string]string{BackupSlotAnnotation: d.Due.UTC().Format(time.RFC3339)},
		},
		Spec: dolphinv1.MySQLBackupSpec{Cluster: c.Name, DeletionPolicy: c.Spec.Backup.DeletionPolicy},
	}
	if err := r.Client.Create(ctx, b); err != nil && !apierrors.IsAlreadyExists(err) {
		return 0, fmt.Errorf("creating the scheduled backup %s: %w", b.Name, err)
	}
	r.event(c, corev1.EventTypeNormal, "BackupScheduled", "Schedule", "created MySQLBackup %s for the slot %s", b.Name, d.Due.Format(time.RFC3339))
	return time.Until(d.Next) + time.Second, nil
}

// applyRetention deletes the backups that spec.backup.retention expires (their objects go
// with them, see MySQLBackupReconciler) and says which in an event.
func (r *MySQLClusterReconciler) applyRetention(ctx context.Context, c *dolphinv1.MySQLCluster, backups []dolphinv1.MySQLBackup) error {
	expired := expiredBackups(backups, c.Spec.Backup.Retention, time.Now())
	if len(expired) == 0 {
		return nil
	}
	names := make([]string, 0, len(expired))
	for i := range expired {
		// Retention deletes the data of what it expires, whatever the backup's deletionPolicy.
		if expired[i].Annotations[BackupDeleteDataAnnotation] == "" {
			patch := client.MergeFrom(expired[i].DeepCopy())
			if expired[i].Annotations == nil {
				expired[i].Annotations = map[string]string{}
			}
			expired[i].Annotations[BackupDeleteDataAnnotation] = "retention"
			if err := r.Client.Patch(ctx, &expired[i], patch); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("marking expired backup %s for deletion with its data: %w", expired[i].Name, err)
			}
		}
		if err := r.Client.Delete(ctx, &expired[i]); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting expired backup %s: %w", expired[i].Name, err)
		}
		names = append(names, expired[i].Name)
	}
	r.event(c, corev1.EventTypeNormal, "BackupsExpired", "Retention", "deleted %d backups that retention no longer keeps, with their data: %s", len(names), strings.Join(names, ", "))
	if archiving(c) == nil {
		return nil
	}
	// The archive before the oldest kept backup goes with the backups that needed it.
	gone := map[string]bool{}
	for _, b := range expired {
		gone[b.Name] = true
	}
	var kept []dolphinv1.MySQLBackup
	for _, b := range backups {
		if !gone[b.Name] && b.DeletionTimestamp == nil {
			kept = append(kept, b)
		}
	}
	spec, err := clusterStore(ctx, r.Client, c)
	if err != nil {
		return fmt.Errorf("the backup store, for the archive's retention: %w", err)
	}
	cfg, err := resolveStore(ctx, storeClients{Reader: r.apiReader(), Writer: r.Client, Build: r.Build, Owner: c}, c.Namespace, spec)
	if err != nil {
		return fmt.Errorf("the backup store, for the archive's retention: %w", err)
	}
	store, err := r.openStore(ctx, cfg)
	if err != nil {
		return fmt.Errorf("opening the backup store, for the archive's retention: %w", err)
	}
	return r.applyArchiveRetention(ctx, c, store, kept)
}

// verifySlotPrefix starts the mysql.dolphin.dev/verify value the verification schedule sets.
const verifySlotPrefix = "scheduled-"

// scheduleVerification asks for a restore check of the newest successful backup at each slot
// of spec.backup.verification.schedule, by annotating it; the MySQLBackup reconciler runs it.
// The slots already asked for are read back from those annotations.
func (r *MySQLClusterReconciler) scheduleVerification(ctx context.Context, c *dolphinv1.MySQLCluster, backups []dolphinv1.MySQLBackup) (time.Duration, error) {
	v := c.Spec.Backup.Verification
	if v == nil || v.Schedule.Suspend {
		return 0, nil
	}
	sched, loc, err := schedule.Parse(&v.Schedule, "spec.backup.verification.schedule")
	if err != nil {
		r.event(c, corev1.EventTypeWarning, "InvalidVerificationSchedule", "Schedule", "%s", err.Error())
		return 0, nil
	}
	last := c.CreationTimestamp.Time
	var newest *dolphinv1.MySQLBackup
	for i := range backups {
		b := &backups[i]
		if t, err := time.Parse(time.RFC3339, strings.TrimPrefix(b.Annotations[dolphinv1.VerifyAnnotation], verifySlotPrefix)); err == nil && t.After(last) {
			last = t
		}
		if b.Status.Phase == dolphinv1.BackupSucceeded && b.DeletionTimestamp == nil && (newest == nil || endedLater(b, newest)) {
			newest = b
		}
	}
	d := decideSchedule(sched, loc, last, time.Now())
	if !d.Due.IsZero() && newest != nil {
		patch := client.MergeFrom(newest.DeepCopy())
		if newest.Annotations == nil {
			newest.Annotations = map[string]string{}
		}
		newest.Annotations[dolphinv1.VerifyAnnotation] = verifySlotPrefix + d.Due.UTC().Format(time.RFC3339)
		if err := r.Client.Patch(ctx, newest, patch); err != nil {
			return 0, fmt.Errorf("asking for a restore check of %s: %w", newest.Name, err)
		}
		r.event(c, corev1.EventTypeNormal, "VerificationScheduled", "Schedule", "asked for a restore check of backup %s for the slot %s", newest.Name, d.Due.Format(time.RFC3339))
	}
	return time.Until(d.Next) + time.Second, nil
}
