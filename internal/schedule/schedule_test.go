package schedule

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// Check names each schedule that does not parse by its field, and passes the ones that do.
func TestCheck(t *testing.T) {
	if errs := Check(nil); errs != nil {
		t.Errorf("no backup spec: %v", errs)
	}
	ok := &dolphinv1.BackupSpec{Schedule: &dolphinv1.BackupSchedule{Cron: "@every 6h", TimeZone: "Europe/Berlin"},
		Verification: &dolphinv1.BackupVerification{Schedule: dolphinv1.BackupSchedule{Cron: "30 3 * * 0"}}}
	if errs := Check(ok); errs != nil {
		t.Errorf("valid schedules: %v", errs)
	}
	bad := &dolphinv1.BackupSpec{Schedule: &dolphinv1.BackupSchedule{Cron: "61 2 * * *"},
		Verification: &dolphinv1.BackupVerification{Schedule: dolphinv1.BackupSchedule{Cron: "@daily", TimeZone: "Nowhere/Else"}}}
	errs := Check(bad)
	if len(errs) != 2 || !strings.Contains(errs[0].Error(), `spec.backup.schedule.cron "61 2 * * *" does not parse`) ||
		!strings.Contains(errs[1].Error(), `spec.backup.verification.schedule.timeZone "Nowhere/Else"`) {
		t.Errorf("invalid schedules: %v", errs)
	}
}

func TestCheckRetention(t *testing.T) {
	now := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	spec := func(cron string, window time.Duration) *dolphinv1.BackupSpec {
		return &dolphinv1.BackupSpec{Schedule: &dolphinv1.BackupSchedule{Cron: cron},
			Retention: &dolphinv1.BackupRetention{Window: &metav1.Duration{Duration: window}}}
	}
	for _, tc := range []struct {
		name string
		spec *dolphinv1.BackupSpec
		bad  bool
	}{
		{"daily for a week", spec("@daily", 168*time.Hour), false},
		{"hourly for 41 days (984 backups)", spec("@hourly", 984*time.Hour), false},
		{"every 30 minutes for 30 days (1440 backups)", spec("@every 30m", 720*time.Hour), true},
		{"every minute for a day", spec("* * * * *", 24*time.Hour), true},
		{"a window without a schedule", &dolphinv1.BackupSpec{Retention: &dolphinv1.BackupRetention{Window: &metav1.Duration{Duration: time.Hour}}}, false},
		{"keep only", &dolphinv1.BackupSpec{Schedule: &dolphinv1.BackupSchedule{Cron: "* * * * *"}, Retention: &dolphinv1.BackupRetention{Keep: ptr.To[int32](5)}}, false},
		{"no backup spec", nil, false},
	} {
		err := CheckRetention(tc.spec, now)
		if (err != nil) != tc.bad {
			t.Errorf("%s: %v, want rejected=%v", tc.name, err, tc.bad)
		}
		if err != nil && !strings.Contains(err.Error(), "would keep more than 1000 backups") {
			t.Errorf("%s: %v does not say what is wrong", tc.name, err)
		}
	}
}
