package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/binlog"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// resolvePointInTime turns spec.bootstrap.pointInTime into the GTID position every instance
// replays to, once, before anything starts: a time is resolved by reading the archived
// events (binlog.ResolveTime), latest is the archive's end now (so that instances seeded
// later replay exactly as far), and every target is checked against what can be reached —
// the archive must start at or before the backup's position, run without a gap up to the
// target, and the target must not be before the backup. A target that cannot be reached is a
// userError with the recoverable window in its message.
func resolvePointInTime(ctx context.Context, store objectstore.Store, prefix string, m *backup.Manifest, pit *dolphinv1.PointInTimeTarget) (string, error) {
	where := store.Describe() + prefix
	fail := func(format string, args ...any) error {
		return &userError{Reason: "PointInTimeUnreachable", Message: fmt.Sprintf(format, args...) +
			"; nothing was started: create the cluster again with a target inside the window"}
	}
	l, err := binlog.ListSegments(ctx, store, prefix)
	if err != nil {
		return "", fmt.Errorf("listing the binlog archive %s: %w", where, err)
	}
	if len(l.Segments) == 0 {
		return "", fail("the binlog archive %s holds nothing (is spec.backup.continuousArchiving on for the backup's cluster?)", where)
	}
	base, err := binlog.Parse(m.GTIDPosition)
	if err != nil {
		return "", fmt.Errorf("the backup's GTID position: %w", err)
	}
	first, last := l.Segments[0], l.Last()
	start, err := binlog.Parse(first.Start)
	if err != nil {
		return "", fmt.Errorf("the archive's first segment: %w", err)
	}
	window := fmt.Sprintf("the backup ends at %s (GTID %s); the archive %s holds %s to %s (commits up to %s)",
		m.EndTime.UTC().Format(time.RFC3339), m.GTIDPosition, where, first.Start, last.End, last.MaxCommit.UTC().Format(time.RFC3339))
	if !base.Covers(start) {
		return "", fail("the archive starts after the backup, so the transactions in between are missing: %s", window)
	}
	if err := l.Err(); err != nil {
		return "", fail("the archive is not whole (%v): %s", err, window)
	}
	var target string
	switch {
	case pit.Latest:
		target = last.End
	case pit.GTID != "":
		target = pit.GTID
	case pit.Time != nil:
		if pit.Time.Time.Before(m.EndTime) {
			return "", fail("pointInTime.time %s is before the backup ended: %s; restore an older backup", pit.Time.UTC().Format(time.RFC3339), window)
		}
		target, err = binlog.ResolveTime(ctx, store, prefix, pit.Time.Time)
		if errors.Is(err, binlog.ErrOutsideArchive) {
			return "", fail("pointInTime.time %s is outside the archive: %s", pit.Time.UTC().Format(time.RFC3339), window)
		}
		if err != nil {
			return "", fmt.Errorf("resolving pointInTime.time: %w", err)
		}
	}
	named, err := binlog.Parse(target)
	if err != nil {
		return "", fail("pointInTime.gtid %q: %v", target, err)
	}
	// Domains the target does not name stay at the backup's position.
	to := base.With(named)
	end, err := binlog.Parse(last.End)
	if err != nil {
		return "", fmt.Errorf("the archive's last segment: %w", err)
	}
	switch {
	case !to.Covers(base):
		return "", fail("the target %s is before the backup's position: %s; restore an older backup", target, window)
	case !end.Covers(to):
		return "", fail("the target %s is beyond the archive: %s", target, window)
	}
	return to.String(), nil
}

// chooseBaseBackup picks the backup a point-in-time restore of pit.Cluster starts from: the
// newest successful one that ended at or before the target time, whose position a GTID target
// covers, or simply the newest for latest (chooseBase).
func (r *MySQLClusterReconciler) chooseBaseBackup(ctx context.Context, namespace string, pit *dolphinv1.PointInTimeTarget) (string, error) {
	var list dolphinv1.MySQLBackupList
	if err := r.Client.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return "", fmt.Errorf("listing MySQLBackups: %w", err)
	}
	name, err := chooseBase(list.Items, pit)
	if err != nil {
		return "", &userError{Reason: "PointInTimeUnreachable", Message: err.Error() + "; nothing was started: create the cluster again with another target or cluster"}
	}
	return name, nil
}

// chooseBase is chooseBaseBackup's pure part.
func chooseBase(backups []dolphinv1.MySQLBackup, pit *dolphinv1.PointInTimeTarget) (string, error) {
	var target binlog.Position
	if pit.GTID != "" {
		var err error
		if target, err = binlog.Parse(pit.GTID); err != nil {
			return "", fmt.Errorf("pointInTime.gtid: %w", err)
		}
	}
	var best *dolphinv1.MySQLBackup
	n := 0
	for i := range backups {
		b := &backups[i]
		if b.Spec.Cluster != pit.Cluster || b.Status.Phase != dolphinv1.BackupSucceeded || b.Status.GTIDPosition == "" || b.DeletionTimestamp != nil {
			continue
		}
		n++
		switch {
		case pit.Time != nil && backupEnded(b).After(pit.Time.Time):
			continue
		case pit.GTID != "":
			pos, err := binlog.Parse(b.Status.GTIDPosition)
			if err != nil || !pos.With(target).Covers(pos) {
				continue
			}
		}
		if best == nil || endedLater(b, best) {
			best = b
		}
	}
	switch {
	case best != nil:
		return best.Name, nil
	case n == 0:
		return "", fmt.Errorf("cluster %s has no successful backup to restore from", pit.Cluster)
	default:
		return "", fmt.Errorf("none of the %d successful backups of cluster %s is before the target", n, pit.Cluster)
	}
}
