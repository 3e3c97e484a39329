package controller

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/schedule"
)

func TestDecideSchedule(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	sched, loc, err := schedule.Parse(&dolphinv1.BackupSchedule{Cron: "30 2 * * *", TimeZone: "Europe/Berlin"}, "spec.backup.schedule")
	if err != nil {
		t.Fatal(err)
	}
	if loc.String() != berlin.String() {
		t.Fatalf("location %s", loc)
	}
	at := func(s string) time.Time {
		v, err := time.ParseInLocation("2006-01-02 15:04", s, berlin)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// Not due yet: the next slot is 02:30 Berlin (01:30 UTC in winter).
	d := decideSchedule(sched, loc, at("2026-12-01 00:00"), at("2026-12-01 02:00"))
	if !d.Due.IsZero() || !d.Next.Equal(at("2026-12-01 02:30")) {
		t.Fatalf("due %v next %v", d.Due, d.Next)
	}
	if got := d.Next.UTC().Format("15:04"); got != "01:30" {
		t.Fatalf("next in UTC = %s, want 01:30 (Berlin is UTC+1 in December)", got)
	}
	// Three days missed while the operator was down: one backup, for the newest slot.
	d = decideSchedule(sched, loc, at("2026-11-28 02:30"), at("2026-12-01 03:00"))
	if !d.Due.Equal(at("2026-12-01 02:30")) || !d.Next.Equal(at("2026-12-02 02:30")) {
		t.Fatalf("due %v next %v", d.Due, d.Next)
	}
	// The slot just taken is not due again.
	d = decideSchedule(sched, loc, at("2026-12-01 02:30"), at("2026-12-01 02:31"))
	if !d.Due.IsZero() {
		t.Fatalf("due again: %v", d.Due)
	}
	every, _, err := schedule.Parse(&dolphinv1.BackupSchedule{Cron: "@every 6h"}, "spec.backup.schedule")
	if err != nil {
		t.Fatal(err)
	}
	if d := decideSchedule(every, time.UTC, at("2026-12-01 00:00"), at("2026-12-01 06:00")); d.Due.IsZero() {
		t.Fatal("@every 6h not due after 6h")
	}
	for _, bad := range []dolphinv1.BackupSchedule{{Cron: "61 * * * *"}, {Cron: "* * *"}, {Cron: "@daily", TimeZone: "Mars/Olympus"}} {
		if _, _, err := schedule.Parse(&bad, "spec.backup.schedule"); err == nil || !strings.Contains(err.Error(), "spec.backup.schedule") {
			t.Errorf("%+v: error %v, want one naming the field", bad, err)
		}
	}
}

func finished(name string, phase dolphinv1.BackupPhase, ended time.Time) dolphinv1.MySQLBackup {
	t := metav1.NewTime(ended)
	return dolphinv1.MySQLBackup{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: t},
		Status: dolphinv1.MySQLBackupStatus{Phase: phase, CompletionTime: &t, Error: "boom"}}
}

func names(bs []dolphinv1.MySQLBackup) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.Name)
	}
	slices.Sort(out)
	return out
}

func TestExpiredBackups(t *testing.T) {
	now := time.Date(2026, 12, 10, 12, 0, 0, 0, time.UTC)
	day := func(n int) time.Time { return now.Add(-time.Duration(n) * 24 * time.Hour) }
	all := []dolphinv1.MySQLBackup{
		finished("d1", dolphinv1.BackupSucceeded, day(1)),
		finished("d2", dolphinv1.BackupSucceeded, day(2)),
		finished("d3", dolphinv1.BackupSucceeded, day(3)),
		finished("d4", dolphinv1.BackupSucceeded, day(4)),
		finished("f5", dolphinv1.BackupFailed, day(5)),
		finished("d6", dolphinv1.BackupSucceeded, day(6)),
		finished("f0", dolphinv1.BackupFailed, day(0)),
		{ObjectMeta: metav1.ObjectMeta{Name: "running"}, Status: dolphinv1.MySQLBackupStatus{Phase: dolphinv1.BackupRunning}},
	}
	window := func(h int) *metav1.Duration { return &metav1.Duration{Duration: time.Duration(h) * time.Hour} }
	for _, tc := range []struct {
		name string
		r    *dolphinv1.BackupRetention
		want []string
	}{
		{"none", nil, nil},
		{"keep 2", &dolphinv1.BackupRetention{Keep: ptr.To(int32(2))}, []string{"d3", "d4", "d6", "f5"}},
		// 60h window: d1, d2 inside; d3 is the newest before the window's start and is needed.
		{"window 60h", &dolphinv1.BackupRetention{Window: window(60)}, []string{"d4", "d6", "f5"}},
		// Either limit keeps: keep 4 keeps d1..d4, the window only d1..d3.
		{"keep 4 or window", &dolphinv1.BackupRetention{Keep: ptr.To(int32(4)), Window: window(60)}, []string{"d6", "f5"}},
		{"keep 1", &dolphinv1.BackupRetention{Keep: ptr.To(int32(1))}, []string{"d2", "d3", "d4", "d6", "f5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := names(expiredBackups(all, tc.r, now)); !slices.Equal(got, tc.want) {
				t.Fatalf("expired %v, want %v", got, tc.want)
			}
		})
	}
	// Only failures: nothing is deleted (the newest success is always kept, and failures go
	// only when older than a kept success).
	if got := expiredBackups([]dolphinv1.MySQLBackup{finished("f", dolphinv1.BackupFailed, day(9))}, &dolphinv1.BackupRetention{Keep: ptr.To(int32(1))}, now); len(got) != 0 {
		t.Fatalf("expired %v", names(got))
	}
}

func TestSummarizeBackups(t *testing.T) {
	now := time.Date(2026, 12, 10, 12, 0, 0, 0, time.UTC)
	ok := finished("ok", dolphinv1.BackupSucceeded, now.Add(-2*time.Hour))
	bad := finished("bad", dolphinv1.BackupFailed, now.Add(-time.Hour))
	bad.Status.Error = "the backup tool failed: access denied"
	st, cond, set := summarizeBackups([]dolphinv1.MySQLBackup{ok, bad})
	if !set || cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, "access denied") || !strings.Contains(cond.Message, "newest successful backup is ok") {
		t.Fatalf("condition %+v", cond)
	}
	if st.LastSuccessfulBackup != "ok" || st.LastFailedBackup != "bad" {
		t.Fatalf("status %+v", st)
	}
	newer := finished("newer", dolphinv1.BackupSucceeded, now)
	newer.Labels = map[string]string{BackupScheduledLabel: "true"}
	newer.Annotations = map[string]string{BackupSlotAnnotation: "2026-12-10T11:30:00Z"}
	st, cond, _ = summarizeBackups([]dolphinv1.MySQLBackup{ok, bad, newer})
	if cond.Status != metav1.ConditionTrue || st.LastFailedBackup != "" || st.LastSuccessfulBackup != "newer" {
		t.Fatalf("condition %+v status %+v", cond, st)
	}
	if st.LastScheduleTime == nil || st.LastScheduleTime.UTC().Format(time.RFC3339) != "2026-12-10T11:30:00Z" {
		t.Fatalf("last schedule %v", st.LastScheduleTime)
	}
	if _, _, set := summarizeBackups(nil); set {
		t.Fatal("a condition without any finished backup")
	}

	// Seen in a fresh-machine e2e run: a backup of a small database asked for right after a
	// failure finished within the failure's second. The one created later is the newer.
	failedAt := now.Add(300 * time.Millisecond).Truncate(time.Second)
	fail := finished("unreachable", dolphinv1.BackupFailed, failedAt)
	fail.CreationTimestamp = metav1.NewTime(failedAt.Add(-2 * time.Second))
	fast := finished("fast", dolphinv1.BackupSucceeded, failedAt)
	if _, cond, _ = summarizeBackups([]dolphinv1.MySQLBackup{fail, fast}); cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, "fast") {
		t.Fatalf("a success created after a failure that ended in the same second: condition %+v", cond)
	}
	// The other way round the failure is the newer, and with nothing to order them by the
	// failure is reported.
	fast.CreationTimestamp = metav1.NewTime(failedAt.Add(-3 * time.Second))
	if _, cond, _ = summarizeBackups([]dolphinv1.MySQLBackup{fast, fail}); cond.Status != metav1.ConditionFalse {
		t.Fatalf("a failure created after a success that ended in the same second: condition %+v", cond)
	}
	fast.CreationTimestamp = fail.CreationTimestamp
	if _, cond, _ = summarizeBackups([]dolphinv1.MySQLBackup{fast, fail}); cond.Status != metav1.ConditionFalse {
		t.Fatalf("a failure and a success that cannot be ordered: condition %+v", cond)
	}
}

func TestHumanBytesAndManifestURL(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 1023: "1023", 1024: "1.0Ki", 670842: "655.1Ki", 3 << 20: "3.0Mi", 1536 << 20: "1.5Gi"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
	s := &dolphinv1.BackupStore{S3: &dolphinv1.S3Store{Bucket: "b", Prefix: "prod"}}
	if got := manifestURL(s, "ns/db/x/"); got != "s3://b/prod/ns/db/x/manifest.json" {
		t.Errorf("manifestURL = %q", got)
	}
}

// A scheduled slot without its backup for more than backupOverdueGrace turns the backup
// condition False (BackupOverdue, and why when the cluster is paused); a slot just due, a
// backup running, a suspended schedule or none are not overdue.
func TestBackupOverdue(t *testing.T) {
	now := time.Date(2026, 12, 6, 10, 30, 0, 0, time.UTC)
	cluster := func(mod func(*dolphinv1.MySQLCluster)) *dolphinv1.MySQLCluster {
		c := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(now.Add(-48 * time.Hour))},
			Spec: dolphinv1.MySQLClusterSpec{Backup: &dolphinv1.BackupSpec{Schedule: &dolphinv1.BackupSchedule{Cron: "@hourly"}}}}
		if mod != nil {
			mod(c)
		}
		return c
	}
	scheduled := func(slot time.Time, phase dolphinv1.BackupPhase, created time.Time) dolphinv1.MySQLBackup {
		return dolphinv1.MySQLBackup{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created),
			Labels:      map[string]string{BackupScheduledLabel: "true"},
			Annotations: map[string]string{BackupSlotAnnotation: slot.Format(time.RFC3339)}},
			Status: dolphinv1.MySQLBackupStatus{Phase: phase}}
	}
	hourAgo := now.Truncate(time.Hour).Add(-time.Hour) // 09:00: the 10:00 slot is due, for 30 min
	for _, tc := range []struct {
		name    string
		c       *dolphinv1.MySQLCluster
		backups []dolphinv1.MySQLBackup
		now     time.Time
		want    string // a part of the answer; "" for none
	}{
		{"the 10:00 slot missed for 30 min", cluster(nil), []dolphinv1.MySQLBackup{scheduled(hourAgo, dolphinv1.BackupSucceeded, hourAgo)}, now,
			"the scheduled backup for 2026-12-06T10:00:00Z was not taken"},
		{"paused", cluster(func(c *dolphinv1.MySQLCluster) { c.Spec.Paused = true }), []dolphinv1.MySQLBackup{scheduled(hourAgo, dolphinv1.BackupSucceeded, hourAgo)}, now,
			"(spec.paused stops scheduled backups)"},
		{"due for 5 minutes only", cluster(nil), []dolphinv1.MySQLBackup{scheduled(hourAgo, dolphinv1.BackupSucceeded, hourAgo)}, now.Add(-25 * time.Minute), ""},
		{"the 10:00 backup taken", cluster(nil), []dolphinv1.MySQLBackup{scheduled(now.Truncate(time.Hour), dolphinv1.BackupSucceeded, now.Truncate(time.Hour))}, now, ""},
		{"the 09:00 backup still running", cluster(nil), []dolphinv1.MySQLBackup{scheduled(hourAgo, dolphinv1.BackupRunning, hourAgo)}, now, ""},
		{"the 09:00 backup pending for 90 minutes", cluster(nil), []dolphinv1.MySQLBackup{scheduled(hourAgo, dolphinv1.BackupPending, hourAgo)}, now,
			"was not taken"},
		{"schedule suspended", cluster(func(c *dolphinv1.MySQLCluster) { c.Spec.Backup.Schedule.Suspend = true }), nil, now, ""},
		{"no schedule", cluster(func(c *dolphinv1.MySQLCluster) { c.Spec.Backup.Schedule = nil }), nil, now, ""},
	} {
		got := backupOverdue(tc.c, tc.backups, tc.now)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	// The condition says so, whatever the last backup did.
	var st dolphinv1.MySQLClusterStatus
	applyBackupSummary(&st, []dolphinv1.MySQLBackup{scheduled(hourAgo, dolphinv1.BackupSucceeded, hourAgo)}, true, "the scheduled backup for X was not taken", metav1.NewTime(now))
	if c := meta.FindStatusCondition(st.Conditions, dolphinv1.ConditionLastBackupSucceeded); c == nil || c.Status != metav1.ConditionFalse || c.Reason != "BackupOverdue" {
		t.Fatalf("condition %+v, want False/BackupOverdue", c)
	}
}

// Only a successful backup with deletionPolicy Retain, not expired by retention, keeps its
// data when deleted.
func TestKeepsData(t *testing.T) {
	b := func(phase dolphinv1.BackupPhase, policy dolphinv1.BackupDeletionPolicy, expired bool) *dolphinv1.MySQLBackup {
		x := &dolphinv1.MySQLBackup{Spec: dolphinv1.MySQLBackupSpec{DeletionPolicy: policy}, Status: dolphinv1.MySQLBackupStatus{Phase: phase}}
		if expired {
			x.Annotations = map[string]string{BackupDeleteDataAnnotation: "retention"}
		}
		return x
	}
	for _, tc := range []struct {
		name string
		b    *dolphinv1.MySQLBackup
		want bool
	}{
		{"succeeded, Retain", b(dolphinv1.BackupSucceeded, dolphinv1.BackupRetain, false), true},
		{"succeeded, policy unset (read before the default)", b(dolphinv1.BackupSucceeded, "", false), true},
		{"succeeded, Delete", b(dolphinv1.BackupSucceeded, dolphinv1.BackupDelete, false), false},
		{"succeeded, Retain, expired by retention", b(dolphinv1.BackupSucceeded, dolphinv1.BackupRetain, true), false},
		{"failed, Retain: nothing restorable to keep", b(dolphinv1.BackupFailed, dolphinv1.BackupRetain, false), false},
		{"running, Retain: incomplete", b(dolphinv1.BackupRunning, dolphinv1.BackupRetain, false), false},
	} {
		if got := keepsData(tc.b); got != tc.want {
			t.Errorf("%s: keepsData %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The operator opens an S3 store without credentialsSecret with its own AWS identity only
// when started with --s3-default-credentials; a store with keys, or any other store, is
// opened as before.
func TestOperatorStoreIdentity(t *testing.T) {
	chain := objectstore.Config{S3: &objectstore.S3Config{Bucket: "b", DefaultCredentials: true}}
	keys := objectstore.Config{S3: &objectstore.S3Config{Bucket: "b", AccessKeyID: "AKID", SecretAccessKey: "s"}}
	var ue *userError
	if err := operatorStoreIdentity(chain, false); !errors.As(err, &ue) || ue.Reason != "BackupStoreNeedsCredentials" || !strings.Contains(ue.Message, "--s3-default-credentials") {
		t.Fatalf("the operator's identity lent without the flag: %v", err)
	}
	for name, tc := range map[string]struct {
		cfg   objectstore.Config
		allow bool
	}{"chain, allowed": {chain, true}, "keys": {keys, false}, "a directory": {objectstore.Config{Directory: "/x"}, false}} {
		if err := operatorStoreIdentity(tc.cfg, tc.allow); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
