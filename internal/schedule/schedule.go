// Package schedule reads the cron schedules of the API (backups, their verification), for the
// controllers that follow them and the admission webhook that rejects the ones that do not
// parse (the CRD's CEL checks only their shape).
package schedule

import (
	"fmt"
	"time"

	"github.com/robfig/cron/v3"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// parser reads the five-field form and the @ descriptors (@daily, @every 6h …).
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Parse reads a schedule's cron expression in its time zone (UTC by default). field names the
// schedule in errors (spec.backup.schedule, spec.backup.verification.schedule), which say what
// to write instead.
func Parse(s *dolphinv1.BackupSchedule, field string) (cron.Schedule, *time.Location, error) {
	loc := time.UTC
	if s.TimeZone != "" {
		l, err := time.LoadLocation(s.TimeZone)
		if err != nil {
			return nil, nil, fmt.Errorf("%s.timeZone %q is not a known IANA time zone: use a name such as UTC or Europe/Berlin", field, s.TimeZone)
		}
		loc = l
	}
	sched, err := parser.Parse(s.Cron)
	if err != nil {
		return nil, nil, fmt.Errorf("%s.cron %q does not parse (%v): write five fields, e.g. '30 2 * * *', or @daily", field, s.Cron, err)
	}
	return sched, loc, nil
}

// Check returns the errors of every schedule of a cluster's spec.backup (nil when all parse).
func Check(b *dolphinv1.BackupSpec) []error {
	if b == nil {
		return nil
	}
	var errs []error
	if b.Schedule != nil {
		if _, _, err := Parse(b.Schedule, "spec.backup.schedule"); err != nil {
			errs = append(errs, err)
		}
	}
	if v := b.Verification; v != nil {
		if _, _, err := Parse(&v.Schedule, "spec.backup.verification.schedule"); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}
