package schedule

import (
	"strings"
	"testing"

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
