package controller

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/binlog"
)

// defaultArchiveStallAfter is spec.backup.continuousArchiving.stallAfter's default.
const defaultArchiveStallAfter = time.Minute

// archiveView is what the archive step observed; judgeArchive turns it into the status and
// the ContinuousArchiving condition.
type archiveView struct {
	Now time.Time
	// StallAfter is the lag beyond which the archive is reported stalled.
	StallAfter time.Duration
	// Location of the archive in the store.
	Location string
	// OldestBase is the end of the oldest successful backup the archive continues (zero when
	// unknown).
	OldestBase time.Time
	// PodReady is true when the archiver's pod runs and is ready; PodProblem says why not.
	PodReady   bool
	PodProblem string
	// Status is the archiver's own report, and FetchErr why it could not be read.
	Status   *binlog.Status
	FetchErr error
	// PrimaryGTID is the primary's executed GTID position ("" when unknown).
	PrimaryGTID string
	// Previous is the archive status of the last reconcile (nil before one): the lag is counted
	// from the first time the primary was seen ahead of the archive.
	Previous *dolphinv1.ArchiveStatus
	// BehindSince is when the primary was first seen ahead of the archived position (zero
	// when it was not).
	BehindSince time.Time
}

// judgeArchive is a pure function of what the step observed: the archive status and the
// condition. behindSince is the BehindSince to remember for the next reconcile.
func judgeArchive(v archiveView) (st *dolphinv1.ArchiveStatus, cond metav1.Condition, behindSince time.Time) {
	st = &dolphinv1.ArchiveStatus{Location: v.Location}
	if v.Previous != nil {
		// Kept while the archiver cannot be asked: what was archived stays archived.
		st.LastArchivedGTID, st.LastRecoverableTime, st.LastUploadTime = v.Previous.LastArchivedGTID, v.Previous.LastRecoverableTime, v.Previous.LastUploadTime
	}
	if !v.OldestBase.IsZero() {
		t := metav1.NewTime(v.OldestBase)
		st.FirstRecoverableTime = &t
	}
	cond = metav1.Condition{Type: dolphinv1.ConditionContinuousArchiving}
	if v.Status != nil {
		s := v.Status
		st.LastArchivedGTID, st.Source = s.Position, s.Source
		if !s.LastCommit.IsZero() {
			t := metav1.NewTime(s.LastCommit)
			st.LastRecoverableTime = &t
		}
		if !s.LastUpload.IsZero() {
			t := metav1.NewTime(s.LastUpload)
			st.LastUploadTime = &t
		}
		if s.LastError != "" && s.LastErrorTime.After(s.LastUpload) {
			st.LastError = s.LastError
		}
	}

	caughtUp := false
	if v.Status != nil && v.PrimaryGTID != "" {
		archived, err1 := binlog.Parse(v.Status.Position)
		primary, err2 := binlog.Parse(v.PrimaryGTID)
		caughtUp = err1 == nil && err2 == nil && archived.Covers(primary)
	}
	switch {
	case caughtUp:
		behindSince = time.Time{}
	case v.BehindSince.IsZero():
		behindSince = v.Now
	default:
		behindSince = v.BehindSince
	}
	lag := time.Duration(0)
	if !behindSince.IsZero() {
		lag = v.Now.Sub(behindSince)
	}
	st.LagSeconds = int64(lag / time.Second)

	switch {
	case !v.PodReady:
		cond.Status, cond.Reason = metav1.ConditionFalse, "ArchiverNotRunning"
		cond.Message = fmt.Sprintf("the binlog archiver pod is not running: %s; nothing is archived meanwhile (the source keeps its binary logs for binlog_expire_logs_seconds)", v.PodProblem)
	case v.FetchErr != nil:
		cond.Status, cond.Reason = metav1.ConditionFalse, "ArchiverUnreachable"
		cond.Message = fmt.Sprintf("the binlog archiver does not answer: %v", v.FetchErr)
	case lag > v.StallAfter:
		cond.Status, cond.Reason = metav1.ConditionFalse, "Stalled"
		cond.Message = fmt.Sprintf("the primary has had transactions not in the archive for %s (stallAfter %s); archived up to %q, the primary is at %q",
			lag.Round(time.Second), v.StallAfter, st.LastArchivedGTID, v.PrimaryGTID)
		if st.LastError != "" {
			cond.Message += "; the archiver's last error: " + st.LastError
		}
	case v.Status != nil && !v.Status.Connected && st.LastError != "":
		// Behind by less than stallAfter (or idle) but not connected: say why, still True.
		cond.Status, cond.Reason = metav1.ConditionTrue, "Reconnecting"
		cond.Message = "the archiver is reconnecting: " + st.LastError
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, "Archiving"
		cond.Message = fmt.Sprintf("archived up to %q", st.LastArchivedGTID)
		if st.LastRecoverableTime != nil {
			cond.Message += " (last transaction committed " + st.LastRecoverableTime.UTC().Format(time.RFC3339) + ")"
		}
		if lag > 0 {
			cond.Message += fmt.Sprintf("; %s behind the primary", lag.Round(time.Second))
		}
	}
	return st, cond, behindSince
}
