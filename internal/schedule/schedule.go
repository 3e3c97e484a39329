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

// MaxKeptBackups is the most scheduled backups a retention policy may keep: each is a
// MySQLBackup object (and objects in the store), listed on every pass of the controller. It is
// the bound of retention.keep too.
const MaxKeptBackups = 1000

// CheckRetention rejects a retention window that would keep more than MaxKeptBackups of the
// scheduled backups (a window keeps every backup inside it: "@every 1m" with a 720h window is
// 43 200 objects). It is nil when there is no schedule or no window, and when the schedule
// does not parse (Check reports that).
func CheckRetention(b *dolphinv1.BackupSpec, now time.Time) error {
	if b == nil || b.Schedule == nil || b.Retention == nil || b.Retention.Window == nil {
		return nil
	}
	sched, loc, err := Parse(b.Schedule, "spec.backup.schedule")
	if err != nil {
		return nil
	}
	window := b.Retention.Window.Duration
	start := now.In(loc)
	end := start.Add(window)
	n := 0
	for t := sched.Next(start); !t.IsZero() && !t.After(end); t = sched.Next(t) {
		if n++; n > MaxKeptBackups {
			return fmt.Errorf("spec.backup.retention.window %s with spec.backup.schedule %q would keep more than %d backups (every backup of the window is kept): shorten the window or schedule backups less often",
				window, b.Schedule.Cron, MaxKeptBackups)
		}
	}
	return nil
}
