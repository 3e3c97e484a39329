package controller

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/binlog"
)

func TestJudgeArchive(t *testing.T) {
	now := time.Date(2026, 12, 1, 14, 0, 0, 0, time.UTC)
	up := func(pos string) *binlog.Status {
		return &binlog.Status{Position: pos, Connected: true, Source: "10.0.0.2:3306",
			LastCommit: now.Add(-2 * time.Second), LastUpload: now.Add(-time.Second)}
	}
	base := archiveView{Now: now, StallAfter: time.Minute, Location: "s3://b/ns/c/binlog/", PodReady: true}
	for _, c := range []struct {
		name       string
		edit       func(*archiveView)
		status     metav1.ConditionStatus
		reason     string
		msg        string
		lag        int64
		behindZero bool
	}{
		{"caught up", func(v *archiveView) { v.Status, v.PrimaryGTID = up("0-1-10"), "0-1-10" },
			metav1.ConditionTrue, "Archiving", `archived up to "0-1-10"`, 0, true},
		{"just fell behind", func(v *archiveView) { v.Status, v.PrimaryGTID = up("0-1-10"), "0-1-12" },
			metav1.ConditionTrue, "Archiving", "", 0, false},
		{"behind for 20s", func(v *archiveView) {
			v.Status, v.PrimaryGTID, v.BehindSince = up("0-1-10"), "0-1-12", now.Add(-20*time.Second)
		}, metav1.ConditionTrue, "Archiving", "20s behind the primary", 20, false},
		{"behind for 2m: stalled", func(v *archiveView) {
			v.Status, v.PrimaryGTID, v.BehindSince = up("0-1-10"), "0-1-900", now.Add(-2*time.Minute)
			v.Status.Connected, v.Status.LastError, v.Status.LastErrorTime = false, "store: 503 Slow Down", now
		}, metav1.ConditionFalse, "Stalled", "the archiver's last error: store: 503 Slow Down", 120, false},
		{"pod not running", func(v *archiveView) { v.PodReady, v.PodProblem = false, "pod x is Pending and not ready" },
			metav1.ConditionFalse, "ArchiverNotRunning", "pod x is Pending", 0, false},
		{"unreachable", func(v *archiveView) { v.FetchErr = errors.New("connection refused") },
			metav1.ConditionFalse, "ArchiverUnreachable", "connection refused", 0, false},
		{"reconnecting, not behind", func(v *archiveView) {
			v.Status, v.PrimaryGTID = up("0-1-10"), "0-1-10"
			v.Status.Connected, v.Status.LastError, v.Status.LastErrorTime = false, "source gone", now
		}, metav1.ConditionTrue, "Reconnecting", "source gone", 0, true},
		{"a second domain not archived yet", func(v *archiveView) { v.Status, v.PrimaryGTID = up("0-1-10"), "0-1-10,1-1-1" },
			metav1.ConditionTrue, "Archiving", "", 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := base
			c.edit(&v)
			st, cond, behind := judgeArchive(v)
			if cond.Status != c.status || cond.Reason != c.reason || !strings.Contains(cond.Message, c.msg) {
				t.Errorf("condition %s %s %q, want %s %s containing %q", cond.Status, cond.Reason, cond.Message, c.status, c.reason, c.msg)
			}
			if st.LagSeconds != c.lag || st.Location != base.Location {
				t.Errorf("status %+v, want lag %d", st, c.lag)
			}
			if behind.IsZero() != c.behindZero {
				t.Errorf("behindSince %v, want zero: %v", behind, c.behindZero)
			}
		})
	}
	// What was archived is kept while the archiver cannot be asked.
	prev, _, _ := judgeArchive(func() archiveView { v := base; v.Status, v.PrimaryGTID = up("0-1-10"), "0-1-10"; return v }())
	v := base
	v.FetchErr, v.Previous = errors.New("timeout"), prev
	if st, _, _ := judgeArchive(v); st.LastArchivedGTID != "0-1-10" || st.LastRecoverableTime == nil {
		t.Errorf("after a failed fetch the status forgot the archive: %+v", st)
	}
}

// The archiver reads a cluster with replicas only through its replicas Service (what semi-sync
// acknowledged), a single instance through its primary Service.
func TestArchiveSourceService(t *testing.T) {
	for _, tt := range []struct {
		replicas int32
		want     string
	}{{1, "db-primary"}, {2, "db-replicas"}, {3, "db-replicas"}} {
		c := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Name: "db"}, Spec: dolphinv1.MySQLClusterSpec{Instances: tt.replicas}}
		if got := archiveSourceService(c); got != tt.want {
			t.Errorf("%d instances: archiveSourceService = %q, want %q", tt.replicas, got, tt.want)
		}
	}
}
