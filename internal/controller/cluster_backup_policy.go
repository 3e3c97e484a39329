package controller

import (
	"fmt"
	"sort"
	"time"

	"github.com/robfig/cron/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/schedule"
)

// Labels on the MySQLBackups the schedule creates.
const (
	// BackupClusterLabel names the cluster of a scheduled MySQLBackup.
	BackupClusterLabel = "mysql.dolphin.dev/cluster"
	// BackupScheduledLabel is "true" on MySQLBackups created by a schedule.
	BackupScheduledLabel = "mysql.dolphin.dev/scheduled"
	// BackupSlotAnnotation holds the schedule slot (RFC 3339) a scheduled MySQLBackup was
	// created for; the newest one is where the schedule continues from.
	BackupSlotAnnotation = "mysql.dolphin.dev/scheduled-for"
)

// lastScheduledSlot is the newest slot a scheduled backup was created for (zero: none).
func lastScheduledSlot(backups []dolphinv1.MySQLBackup) time.Time {
	var last time.Time
	for _, b := range backups {
		if b.Labels[BackupScheduledLabel] != "true" {
			continue
		}
		if t, err := time.Parse(time.RFC3339, b.Annotations[BackupSlotAnnotation]); err == nil && t.After(last) {
			last = t
		}
	}
	return last
}

// scheduleDecision is what the schedule asks for now.
type scheduleDecision struct {
	// Due is the slot to take a backup for now (zero: none). Only the newest missed slot is
	// taken after a pause: missed slots are not caught up one by one.
	Due time.Time
	// Next is the next slot after now, to be woken at.
	Next time.Time
}

// decideSchedule compares the schedule with the last slot a backup was created for (or, when
// none was, the time the schedule was first seen: the cluster's creation) and now.
func decideSchedule(sched cron.Schedule, loc *time.Location, last, now time.Time) scheduleDecision {
	var d scheduleDecision
	for t := sched.Next(last.In(loc)); !t.After(now); t = sched.Next(t) {
		d.Due = t
	}
	d.Next = sched.Next(now.In(loc))
	return d
}

// backupEnded is the time a finished backup completed (its creation when unknown).
func backupEnded(b *dolphinv1.MySQLBackup) time.Time {
	if b.Status.CompletionTime != nil {
		return b.Status.CompletionTime.Time
	}
	return b.CreationTimestamp.Time
}

// endedLater reports whether backup a finished after backup b. Completion and creation
// times have one-second precision, and a backup of a small database can finish within the
// second in which the previous one failed: a tie on completion goes to the backup created
// later (it was asked for after the other, which had already taken its share of the second).
func endedLater(a, b *dolphinv1.MySQLBackup) bool {
	ea, eb := backupEnded(a), backupEnded(b)
	if !ea.Equal(eb) {
		return ea.After(eb)
	}
	return a.CreationTimestamp.After(b.CreationTimestamp.Time)
}

// expiredBackups returns the backups retention deletes. A successful backup is kept when
// either set limit keeps it: among the newest `keep`, or needed by the window (completed
// within it, or the newest one completed before it, which a restore to the window's start
// needs). The newest success is always kept. Failed backups older than the oldest kept
// success go too (they hold no data). Running and Pending backups are never touched.
func expiredBackups(backups []dolphinv1.MySQLBackup, r *dolphinv1.BackupRetention, now time.Time) []dolphinv1.MySQLBackup {
	if r == nil || (r.Keep == nil && r.Window == nil) {
		return nil
	}
	var ok []dolphinv1.MySQLBackup
	for _, b := range backups {
		if b.Status.Phase == dolphinv1.BackupSucceeded && b.DeletionTimestamp == nil {
			ok = append(ok, b)
		}
	}
	sort.SliceStable(ok, func(i, j int) bool { return endedLater(&ok[i], &ok[j]) })
	keep := map[string]bool{}
	if len(ok) > 0 {
		keep[ok[0].Name] = true
	}
	if r.Keep != nil {
		for i := 0; i < len(ok) && i < int(*r.Keep); i++ {
			keep[ok[i].Name] = true
		}
	}
	if r.Window != nil {
		start := now.Add(-r.Window.Duration)
		for _, b := range ok {
			keep[b.Name] = true
			if !backupEnded(&b).After(start) {
				break // the newest one at or before the window's start is the last needed
			}
		}
	}
	var oldestKept time.Time
	for _, b := range ok {
		if keep[b.Name] {
			oldestKept = backupEnded(&b)
		}
	}
	var out []dolphinv1.MySQLBackup
	for _, b := range backups {
		if b.DeletionTimestamp != nil {
			continue
		}
		switch b.Status.Phase {
		case dolphinv1.BackupSucceeded:
			if !keep[b.Name] {
				out = append(out, b)
			}
		case dolphinv1.BackupFailed:
			if len(ok) > 0 && backupEnded(&b).Before(oldestKept) {
				out = append(out, b)
			}
		}
	}
	return out
}

// summarizeBackups derives the cluster's status.backup and its LastBackupSucceeded
// condition from the cluster's MySQLBackups. ok is false when there is nothing to report (no
// finished backup): then no condition is set.
func summarizeBackups(backups []dolphinv1.MySQLBackup) (st *dolphinv1.BackupStatus, cond metav1.Condition, ok bool) {
	st = &dolphinv1.BackupStatus{}
	if slot := lastScheduledSlot(backups); !slot.IsZero() {
		t := metav1.NewTime(slot)
		st.LastScheduleTime = &t
	}
	var lastOK, lastFailed *dolphinv1.MySQLBackup
	for i := range backups {
		b := &backups[i]
		switch b.Status.Phase {
		case dolphinv1.BackupSucceeded:
			if lastOK == nil || endedLater(b, lastOK) {
				lastOK = b
			}
		case dolphinv1.BackupFailed:
			if lastFailed == nil || endedLater(b, lastFailed) {
				lastFailed = b
			}
		}
	}
	var lastVerified *dolphinv1.MySQLBackup
	for i := range backups {
		v := backups[i].Status.Verification
		if v == nil || v.Phase != dolphinv1.VerificationVerified || v.CompletionTime == nil {
			continue
		}
		if lastVerified == nil || v.CompletionTime.After(lastVerified.Status.Verification.CompletionTime.Time) {
			lastVerified = &backups[i]
		}
	}
	if lastVerified != nil {
		st.LastVerifiedBackup = lastVerified.Name
		st.LastVerifiedTime = lastVerified.Status.Verification.CompletionTime.DeepCopy()
	}
	if lastOK != nil {
		st.LastSuccessfulBackup = lastOK.Name
		t := metav1.NewTime(backupEnded(lastOK))
		st.LastSuccessTime = &t
	}
	switch {
	// A failure that cannot be ordered against the last success (same completion and
	// creation second) is reported: the condition errs towards saying something is wrong.
	case lastFailed != nil && (lastOK == nil || !endedLater(lastOK, lastFailed)):
		st.LastFailedBackup = lastFailed.Name
		msg := fmt.Sprintf("backup %s failed: %s", lastFailed.Name, lastFailed.Status.Error)
		if lastOK != nil {
			msg += fmt.Sprintf("; the newest successful backup is %s", lastOK.Name)
		} else {
			msg += "; there is no successful backup"
		}
		return st, metav1.Condition{Type: dolphinv1.ConditionLastBackupSucceeded, Status: metav1.ConditionFalse, Reason: "BackupFailed", Message: msg}, true
	case lastOK != nil:
		return st, metav1.Condition{Type: dolphinv1.ConditionLastBackupSucceeded, Status: metav1.ConditionTrue, Reason: "BackupSucceeded",
			Message: fmt.Sprintf("backup %s completed at %s", lastOK.Name, backupEnded(lastOK).UTC().Format(time.RFC3339))}, true
	}
	return st, metav1.Condition{}, false
}

// applyBackupSummary puts the summary into a status being computed.
func applyBackupSummary(st *dolphinv1.MySQLClusterStatus, backups []dolphinv1.MySQLBackup, hasBackupSpec bool, overdue string, now metav1.Time) {
	if !hasBackupSpec && len(backups) == 0 {
		st.Backup = nil
		meta.RemoveStatusCondition(&st.Conditions, dolphinv1.ConditionLastBackupSucceeded)
		return
	}
	sum, cond, ok := summarizeBackups(backups)
	st.Backup = sum
	if overdue != "" {
		// Backups that do not run are reported as such, whatever the last one did.
		msg := overdue
		if sum.LastSuccessfulBackup != "" {
			msg += "; the newest successful backup is " + sum.LastSuccessfulBackup
		}
		cond, ok = metav1.Condition{Type: dolphinv1.ConditionLastBackupSucceeded, Status: metav1.ConditionFalse, Reason: "BackupOverdue", Message: msg}, true
	}
	if ok {
		cond.LastTransitionTime = now
		meta.SetStatusCondition(&st.Conditions, cond)
	}
}

// backupOverdueGrace is how long a scheduled slot may go without its backup before the
// cluster says backups do not run: room for a reconcile and a backup waiting its turn.
const backupOverdueGrace = 10 * time.Minute

// backupOverdue says why the slot of spec.backup.schedule that is due has had no backup for
// backupOverdueGrace, when no backup of the cluster is running (one that runs long delays the
// next, by design): "" when backups run as scheduled, or there is no schedule.
func backupOverdue(c *dolphinv1.MySQLCluster, backups []dolphinv1.MySQLBackup, now time.Time) string {
	if c.Spec.Backup == nil || c.Spec.Backup.Schedule == nil || c.Spec.Backup.Schedule.Suspend {
		return ""
	}
	sched, loc, err := schedule.Parse(c.Spec.Backup.Schedule, "spec.backup.schedule")
	if err != nil {
		return "" // refused at admission; an event says so otherwise
	}
	last := lastScheduledSlot(backups)
	if last.IsZero() {
		last = c.CreationTimestamp.Time
	}
	d := decideSchedule(sched, loc, last, now)
	if d.Due.IsZero() || now.Sub(d.Due) < backupOverdueGrace {
		return ""
	}
	for _, b := range backups {
		switch b.Status.Phase {
		case dolphinv1.BackupRunning:
			return ""
		case "", dolphinv1.BackupPending:
			if now.Sub(b.CreationTimestamp.Time) < backupOverdueGrace {
				return ""
			}
		}
	}
	why := ""
	if c.Spec.Paused {
		why = " (spec.paused stops scheduled backups)"
	}
	return "the scheduled backup for " + d.Due.UTC().Format(time.RFC3339) + " was not taken" + why
}
