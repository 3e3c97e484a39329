package controller

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/binlog"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
)

// TestArchiveRetention: segments that end at or before the oldest kept backup's position go
// (manifest and object), the one holding it stays, later ones stay, the last always stays,
// and an event says what went.
func TestArchiveRetention(t *testing.T) {
	ctx := context.Background()
	store, err := objectstore.NewDirectory(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "ns/db/binlog/"
	fakeArchive(t, store, prefix, "0-1-10", "0-1-20", "0-1-30", "0-1-40", "0-1-50")
	rec := events.NewFakeRecorder(10)
	r := &MySQLClusterReconciler{Recorder: rec}
	c := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db"}}
	backupAt := func(name, gtid string, ended time.Time) dolphinv1.MySQLBackup {
		done := metav1.NewTime(ended)
		return dolphinv1.MySQLBackup{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: dolphinv1.MySQLBackupStatus{Phase: dolphinv1.BackupSucceeded, GTIDPosition: gtid, CompletionTime: &done}}
	}
	now := time.Now()
	// The oldest kept backup is at 0-1-30: segments [10,20] and [20,30] are not needed.
	kept := []dolphinv1.MySQLBackup{backupAt("b3", "0-1-45", now), backupAt("b2", "0-1-30", now.Add(-time.Hour))}
	if err := r.applyArchiveRetention(ctx, c, store, kept); err != nil {
		t.Fatal(err)
	}
	l, err := binlog.ListSegments(ctx, store, prefix)
	if err != nil || l.Err() != nil {
		t.Fatalf("ListSegments: %v %v", err, l.Err())
	}
	var starts []string
	for _, m := range l.Segments {
		starts = append(starts, m.Start)
	}
	if !slices.Equal(starts, []string{"0-1-30", "0-1-40"}) {
		t.Fatalf("segments left start at %v, want 0-1-30 and 0-1-40", starts)
	}
	objs, _ := store.List(ctx, prefix)
	if len(objs) != 4 {
		t.Errorf("the store holds %d objects under the archive, want 2 segments × (object + manifest)", len(objs))
	}
	select {
	case e := <-rec.Events:
		if !strings.Contains(e, "ArchiveSegmentsExpired") || !strings.Contains(e, "deleted 2 binlog archive segment(s) (GTID 0-1-10 to 0-1-30") {
			t.Errorf("event %q", e)
		}
	default:
		t.Error("no event about the deleted segments")
	}

	// A kept backup in the middle of a segment keeps it; the last segment is never deleted.
	if err := r.applyArchiveRetention(ctx, c, store, []dolphinv1.MySQLBackup{backupAt("b4", "0-1-35", now)}); err != nil {
		t.Fatal(err)
	}
	if l, _ := binlog.ListSegments(ctx, store, prefix); len(l.Segments) != 2 {
		t.Errorf("%d segments after a backup inside the first one, want 2", len(l.Segments))
	}
	if err := r.applyArchiveRetention(ctx, c, store, []dolphinv1.MySQLBackup{backupAt("b5", "0-1-60", now)}); err != nil {
		t.Fatal(err)
	}
	if l, _ := binlog.ListSegments(ctx, store, prefix); len(l.Segments) != 1 || l.Segments[0].End != "0-1-50" {
		t.Errorf("segments %+v: want only the last", l.Segments)
	}
}
