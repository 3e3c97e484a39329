package migrate

import (
	"slices"
	"strings"
	"testing"
)

// goodSource passes every check.
func goodSource() Source {
	return Source{
		Version: "10.11.14-MariaDB-0+deb12u2", ServerID: 1, LogBin: true, BinlogFormat: "ROW", BinlogRowImage: "FULL",
		GTIDStrictMode: true, GTIDBinlogPos: "0-1-42", BinlogRetentionDays: 7, Account: "migrate@%",
		BinlogFiltersKnown: true, LogReplicaUpdates: false,
		GlobalPrivileges: []string{"SELECT", "SHOW VIEW", "TRIGGER", "EVENT", "REPLICATION SLAVE", "BINLOG MONITOR", "READ_ONLY ADMIN", "CONNECTION ADMIN", "PROCESS"},
		Tables:           []Table{{Schema: "app", Name: "orders", Engine: "InnoDB", PrimaryKey: true}},
	}
}

func TestCheckGoodSource(t *testing.T) {
	for _, copyMethod := range []CopyMethod{CopyLogical, CopyPhysical} {
		if fs := Check(goodSource(), Target{EngineVersion: "10.11.19", Copy: copyMethod}); len(fs) != 0 {
			t.Errorf("%s: findings on a good source: %v", copyMethod, fs)
		}
	}
}

// TestCheckFindings changes one thing of a good source at a time: each must fail its check,
// blocking or not as designed, with a message naming what to change.
func TestCheckFindings(t *testing.T) {
	for _, tc := range []struct {
		name     string
		change   func(*Source)
		target   Target
		check    string
		blocking bool
		says     string
	}{
		{"mysql", func(s *Source) { s.Version = "8.4.3" }, Target{}, "flavor", true, "only MariaDB"},
		{"too old", func(s *Source) { s.Version = "10.4.34-MariaDB" }, Target{}, "version", true, "10.5 or later"},
		{"newer than the cluster", func(s *Source) { s.Version = "11.8.9-MariaDB" }, Target{EngineVersion: "10.11.19"}, "version", true, "engine version of 11.8"},
		{"unreadable engine version", func(*Source) {}, Target{EngineVersion: "latest"}, "version", true, "spec.engine"},
		{"binlog off", func(s *Source) { s.LogBin = false }, Target{}, "binlog", true, "log_bin"},
		{"statement format", func(s *Source) { s.BinlogFormat = "MIXED" }, Target{}, "binlog-format", true, "binlog_format='ROW'"},
		{"binlog filters", func(s *Source) { s.BinlogIgnoreDB = "scratch" }, Target{}, "binlog-filters", true, `binlog_ignore_db="scratch"`},
		{"replica without its updates logged", func(s *Source) { s.GTIDSlavePos = "0-9-100" }, Target{}, "log-slave-updates", true, "log_slave_updates=ON"},
		{"replica with its updates logged", func(s *Source) { s.GTIDSlavePos, s.LogReplicaUpdates = "0-9-100", true; s.BinlogIgnoreDB = "x" }, Target{}, "binlog-filters", true, "x"},
		{"server_id 0", func(s *Source) { s.ServerID = 0 }, Target{}, "server-id", true, "non-zero"},
		{"server_id of an instance", func(s *Source) { s.ServerID = 1002 }, Target{}, "server-id", true, "another server_id"},
		{"server_id of the archiver", func(s *Source) { s.ServerID = 4000000000 }, Target{}, "server-id", true, "another server_id"},
		{"no REPLICATION SLAVE", func(s *Source) { s.GlobalPrivileges = without(s.GlobalPrivileges, "REPLICATION SLAVE") }, Target{},
			"privileges", true, "GRANT REPLICATION SLAVE ON *.* TO 'migrate'@'%'"},
		{"no SELECT for a logical copy", func(s *Source) {
			s.GlobalPrivileges = without(s.GlobalPrivileges, "SELECT", "SHOW VIEW", "TRIGGER", "EVENT")
		}, Target{Copy: CopyLogical},
			"privileges", true, "GRANT SELECT, SHOW VIEW, TRIGGER, EVENT ON *.*"},
		{"MyISAM table", func(s *Source) { s.Tables = append(s.Tables, Table{"app", "log", "MyISAM", true}) }, Target{},
			"engines", true, "app.log (MyISAM)"},
		{"no primary key", func(s *Source) { s.Tables = append(s.Tables, Table{"app", "events", "InnoDB", false}) }, Target{},
			"primary-keys", false, "app.events without a primary key"},
		{"minimal row image", func(s *Source) { s.BinlogRowImage = "MINIMAL" }, Target{}, "binlog-row-image", false, "FULL"},
		{"strict mode off", func(s *Source) { s.GTIDStrictMode = false }, Target{}, "gtid-strict-mode", false, "gtid_strict_mode=ON"},
		{"short retention", func(s *Source) { s.BinlogRetentionDays = 0.25 }, Target{}, "binlog-retention", false, "0.25 days"},
		{"fallback without REPLICATION SLAVE ADMIN", func(*Source) {}, Target{Fallback: true}, "fallback-privileges", false, "REPLICATION SLAVE ADMIN"},
		{"no fencing privilege", func(s *Source) { s.GlobalPrivileges = without(s.GlobalPrivileges, "READ_ONLY ADMIN") },
			Target{}, "cutover-privileges", false, "READ_ONLY ADMIN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := goodSource()
			tc.change(&src)
			if tc.target.EngineVersion == "" {
				tc.target.EngineVersion = "10.11.19"
			}
			fs := Check(src, tc.target)
			if len(fs) != 1 {
				t.Fatalf("findings %v, want one of check %q", fs, tc.check)
			}
			f := fs[0]
			if f.Check != tc.check || f.Blocking != tc.blocking || !strings.Contains(f.Message, tc.says) {
				t.Errorf("finding %+v, want check %q blocking=%v saying %q", f, tc.check, tc.blocking, tc.says)
			}
			if Blocking(fs) != tc.blocking {
				t.Errorf("Blocking = %v", !tc.blocking)
			}
		})
	}
}

// TestCheckPhysicalCopy: a physical copy needs no SELECT and takes any engine.
func TestCheckPhysicalCopy(t *testing.T) {
	src := goodSource()
	src.GlobalPrivileges = []string{"REPLICATION SLAVE", "BINLOG MONITOR", "READ_ONLY ADMIN", "CONNECTION ADMIN", "PROCESS"}
	src.Tables = append(src.Tables, Table{"app", "log", "Aria", true})
	if fs := Check(src, Target{EngineVersion: "10.11", Copy: CopyPhysical}); len(fs) != 0 {
		t.Errorf("findings for a physical copy: %v", fs)
	}
	if fs := Check(src, Target{EngineVersion: "10.11", Copy: CopyLogical}); !Blocking(fs) || len(fs) != 2 {
		t.Errorf("findings for a logical copy of the same source: %v, want privileges and engines", fs)
	}
}

func TestListSome(t *testing.T) {
	if got := listSome([]string{"a", "b", "c", "d", "e", "f", "g"}); got != "a, b, c, d, e and 2 more" {
		t.Errorf("listSome = %q", got)
	}
}

// without is privs less the named ones.
func without(privs []string, drop ...string) []string {
	return slices.DeleteFunc(slices.Clone(privs), func(p string) bool { return slices.Contains(drop, p) })
}
