package controller

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/binlog"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// expiredSegments are the archive segments no kept backup needs: those that end at or
// before oldestKept, the GTID position of the oldest successful backup retention keeps (a
// restore from it replays from that position on, so a segment that contains it is kept). The
// last segment is never expired: the archiver continues after it.
func expiredSegments(l *binlog.Listing, oldestKept binlog.Position) []*binlog.Manifest {
	var out []*binlog.Manifest
	for i, m := range l.Segments {
		if i == len(l.Segments)-1 {
			break
		}
		end, err := binlog.Parse(m.End)
		if err != nil || !oldestKept.Covers(end) {
			break // in order: the ones after are needed too
		}
		out = append(out, m)
	}
	return out
}

// applyArchiveRetention deletes the binlog archive's segments that the kept backups do not
// need (expiredSegments), manifest first (a segment without a manifest does not exist), and
// says what went in an event. kept are the successful backups retention keeps.
func (r *MySQLClusterReconciler) applyArchiveRetention(ctx context.Context, c *dolphinv1.MySQLCluster, store objectstore.Store, kept []dolphinv1.MySQLBackup) error {
	var oldest *dolphinv1.MySQLBackup
	for i := range kept {
		b := &kept[i]
		if b.Status.Phase == dolphinv1.BackupSucceeded && b.Status.GTIDPosition != "" && (oldest == nil || endedLater(oldest, b)) {
			oldest = b
		}
	}
	if oldest == nil {
		return nil // nothing kept: keep the whole archive
	}
	boundary, err := binlog.Parse(oldest.Status.GTIDPosition)
	if err != nil {
		return fmt.Errorf("backup %s's GTID position: %w", oldest.Name, err)
	}
	prefix := resources.BinlogArchivePrefix(c)
	l, err := binlog.ListSegments(ctx, store, prefix)
	if err != nil {
		return err
	}
	expired := expiredSegments(l, boundary)
	if len(expired) == 0 {
		return nil
	}
	for _, m := range expired {
		if err := store.Delete(ctx, prefix+m.Name()+".json", prefix+m.Object); err != nil && !errors.Is(err, objectstore.ErrNotFound) {
			return fmt.Errorf("deleting archive segment %s: %w", m.Name(), err)
		}
	}
	r.event(c, corev1.EventTypeNormal, "ArchiveSegmentsExpired", "Retention",
		"deleted %d binlog archive segment(s) (GTID %s to %s, %s to %s) that no kept backup needs: the oldest kept backup %s starts at %s",
		len(expired), expired[0].Start, expired[len(expired)-1].End, expired[0].Name(), expired[len(expired)-1].Name(), oldest.Name, oldest.Status.GTIDPosition)
	return nil
}
