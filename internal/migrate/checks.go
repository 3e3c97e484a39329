package migrate

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/dolphin-operator/dolphin/internal/serverid"
)

// CopyMethod is how the initial copy is made.
type CopyMethod string

const (
	// CopyLogical copies through the migration account (a consistent dump at one GTID
	// position).
	CopyLogical CopyMethod = "Logical"
	// CopyPhysical restores a mariadb-backup stream the user made on the source host.
	CopyPhysical CopyMethod = "Physical"
)

// Target is what the checks need to know of the cluster the data goes to.
type Target struct {
	// EngineVersion is the cluster's server version, e.g. "10.11.19" (major.minor at least).
	EngineVersion string
	// Copy is the initial copy's method.
	Copy CopyMethod
	// Fallback is set when the old source is to follow the new primary after the cutover.
	Fallback bool
}

// Finding is one check the source failed.
type Finding struct {
	// Check names the check, e.g. "binlog-format".
	Check string
	// Blocking findings stop the migration before anything is created; the others are
	// reported and do not.
	Blocking bool
	// Message says what is wrong and what to change on the source.
	Message string
}

// String is the finding as a status line.
func (f Finding) String() string {
	if f.Blocking {
		return f.Check + ": " + f.Message
	}
	return f.Check + " (warning): " + f.Message
}

// Blocking reports whether any finding blocks the migration.
func Blocking(fs []Finding) bool {
	return slices.ContainsFunc(fs, func(f Finding) bool { return f.Blocking })
}

// minSourceSeries is the oldest MariaDB series a cluster replicates from: the privilege names
// the checks use (BINLOG MONITOR, READ_ONLY ADMIN) exist from 10.5.
var minSourceSeries = series{10, 5}

// transactionalEngines are the engines whose tables a consistent-snapshot dump copies at the
// dump's GTID position.
var transactionalEngines = []string{"InnoDB", "ROCKSDB"}

// Privileges the migration account needs ON *.*.
var (
	// replicationPrivileges to replicate in, and to read the binary log's filters.
	replicationPrivileges = []string{"REPLICATION SLAVE", "BINLOG MONITOR"}
	// logicalCopyPrivileges to dump every schema with its views, triggers, events and
	// routines, and the accounts (mysql.global_priv).
	logicalCopyPrivileges = []string{"SELECT", "SHOW VIEW", "TRIGGER", "EVENT"}
	// cutoverPrivileges to fence the source at cutover: read_only, and seeing and ending the
	// sessions of its clients (an account without PROCESS sees only its own).
	cutoverPrivileges = []string{"READ_ONLY ADMIN", "CONNECTION ADMIN", "PROCESS"}
)

// Check decides whether a migration from src into t can start: every failed check, blocking
// first, in a fixed order. No finding means nothing to change.
func Check(src Source, t Target) []Finding {
	var f findings
	f.version(src, t)
	f.binlog(src)
	f.serverID(src)
	f.privileges(src, t)
	f.tables(src, t)
	f.warnings(src, t)
	return f.list
}

// findings collects Check's findings.
type findings struct{ list []Finding }

func (f *findings) block(check, format string, args ...any) {
	f.list = append(f.list, Finding{Check: check, Blocking: true, Message: fmt.Sprintf(format, args...)})
}

func (f *findings) warn(check, format string, args ...any) {
	f.list = append(f.list, Finding{Check: check, Message: fmt.Sprintf(format, args...)})
}

func (f *findings) version(src Source, t Target) {
	srcSeries, srcOK := parseSeries(src.Version)
	tgtSeries, tgtOK := parseSeries(t.EngineVersion)
	switch {
	case !strings.Contains(src.Version, "MariaDB"):
		f.block("flavor", "the source runs %q: only MariaDB sources can be migrated from", src.Version)
	case !srcOK:
		f.block("version", "the source's version %q is not one Dolphin can read", src.Version)
	case srcSeries.less(minSourceSeries):
		f.block("version", "the source runs MariaDB %s: upgrade it to %s or later first", srcSeries, minSourceSeries)
	case !tgtOK:
		f.block("version", "the cluster's engine version %q is not one Dolphin can read: give spec.engine a version such as 10.11", t.EngineVersion)
	case tgtSeries.less(srcSeries):
		f.block("version", "the source runs MariaDB %s, newer than the cluster's %s: replication goes from an older "+
			"server to a newer one only; give the cluster an engine version of %s or later", srcSeries, tgtSeries, srcSeries)
	}
}

func (f *findings) binlog(src Source) {
	if !src.LogBin {
		f.block("binlog", "the binary log is off: start the source with log_bin (and binlog_format=ROW); "+
			"the cluster replicates the changes made after the copy from it")
		return
	}
	if !strings.EqualFold(src.BinlogFormat, "ROW") {
		f.block("binlog-format", "binlog_format is %s: set it to ROW (SET GLOBAL binlog_format='ROW' and in the "+
			"configuration); statement-based events can apply differently on the cluster", src.BinlogFormat)
	}
	if src.BinlogDoDB != "" || src.BinlogIgnoreDB != "" {
		f.block("binlog-filters", "the binary log leaves out some databases' changes (binlog_do_db=%q, "+
			"binlog_ignore_db=%q): the cluster would silently miss them after the copy; remove the filters from the "+
			"source's configuration and restart it", src.BinlogDoDB, src.BinlogIgnoreDB)
	}
	if src.GTIDSlavePos != "" && !src.LogReplicaUpdates {
		f.block("log-slave-updates", "the source applies replication (gtid_slave_pos %s) without writing what it "+
			"applies to its binary log (log_slave_updates off): the cluster would silently miss those changes; set "+
			"log_slave_updates=ON in its configuration and restart it", src.GTIDSlavePos)
	}
}

func (f *findings) serverID(src Source) {
	switch {
	case src.ServerID == 0:
		f.block("server-id", "server_id is 0, which cannot replicate: give the source a non-zero server_id")
	case serverid.Reserved(src.ServerID):
		f.block("server-id", "server_id %d is one Dolphin gives its own servers (1000 to 1008, 4000000000): a replica "+
			"skips the events that carry its own server_id, so changes would be lost without an error; give the "+
			"source another server_id", src.ServerID)
	}
}

func (f *findings) privileges(src Source, t Target) {
	var missing []string
	need := slices.Clone(replicationPrivileges)
	if t.Copy != CopyPhysical {
		need = append(need, logicalCopyPrivileges...)
	}
	for _, p := range need {
		if !hasPrivilege(src.GlobalPrivileges, p) {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		f.block("privileges", "the account %s lacks %s ON *.*: GRANT %s ON *.* TO %s (privileges through roles are not counted)",
			src.Account, strings.Join(missing, ", "), strings.Join(missing, ", "), quoteAccount(src.Account))
	}
}

func (f *findings) tables(src Source, t Target) {
	if t.Copy != CopyPhysical {
		var nonTx []string
		for _, tb := range src.Tables {
			if !slices.ContainsFunc(transactionalEngines, func(e string) bool { return strings.EqualFold(e, tb.Engine) }) {
				nonTx = append(nonTx, fmt.Sprintf("%s (%s)", tb, orUnknown(tb.Engine)))
			}
		}
		if len(nonTx) > 0 {
			f.block("engines", "%s: a logical copy is consistent with its GTID position for transactional tables only; "+
				"convert them (ALTER TABLE … ENGINE=InnoDB) or use the physical copy", listSome(nonTx))
		}
	}
	var noPK []string
	for _, tb := range src.Tables {
		if !tb.PrimaryKey {
			noPK = append(noPK, tb.String())
		}
	}
	if len(noPK) > 0 {
		f.warn("primary-keys", "%s without a primary key: the cluster applies each changed row of such a table with a "+
			"full scan, so it can fall far behind under writes; add one where you can", listSome(noPK))
	}
}

func (f *findings) warnings(src Source, t Target) {
	if src.LogBin && !strings.EqualFold(src.BinlogRowImage, "FULL") {
		f.warn("binlog-row-image", "binlog_row_image is %s: FULL is safest (a MINIMAL image names a row by its primary "+
			"key only)", src.BinlogRowImage)
	}
	if !src.GTIDStrictMode {
		f.warn("gtid-strict-mode", "gtid_strict_mode is off: the cluster's servers run with it on and stop replicating "+
			"at an out-of-order GTID in the source's log; turn it on (SET GLOBAL gtid_strict_mode=ON, and in the "+
			"configuration)")
	}
	if src.LogBin && src.BinlogRetentionDays > 0 && src.BinlogRetentionDays < 1 {
		f.warn("binlog-retention", "the source keeps its binary logs %s days (expire_logs_days): the copy and the "+
			"catch-up must end before the copy's position leaves them; keep them a day or more",
			strconv.FormatFloat(src.BinlogRetentionDays, 'f', -1, 64))
	}
	var cutover []string
	for _, p := range cutoverPrivileges {
		if !hasPrivilege(src.GlobalPrivileges, p) {
			cutover = append(cutover, p)
		}
	}
	if len(cutover) > 0 {
		f.warn("cutover-privileges", "the account %s lacks %s ON *.*, which the cutover needs to fence the source "+
			"(read_only, ending its clients' sessions); grant it before the cutover, or fence the source yourself",
			src.Account, strings.Join(cutover, ", "))
	}
	if t.Fallback && !hasAll(src.GlobalPrivileges, "REPLICATION SLAVE ADMIN", "SLAVE MONITOR", "RELOAD") {
		f.warn("fallback-privileges", "the account %s lacks REPLICATION SLAVE ADMIN, SLAVE MONITOR or RELOAD ON *.*, which the way back needs "+
			"to make the old source follow the new primary after the cutover, to watch it (SHOW SLAVE STATUS) and to detach it when writes move back (RESET SLAVE ALL)", src.Account)
	}
}

// hasPrivilege reports whether privs holds p (information_schema spells them upper case).
func hasPrivilege(privs []string, p string) bool {
	return slices.ContainsFunc(privs, func(q string) bool { return strings.EqualFold(q, p) })
}

// quoteAccount writes CURRENT_USER()'s user@host as 'user'@'host' for a GRANT statement.
func quoteAccount(a string) string {
	if u, h, ok := splitAccount(a); ok {
		return "'" + u + "'@'" + h + "'"
	}
	return a
}

func orUnknown(s string) string {
	if s == "" {
		return "no engine"
	}
	return s
}

// listSome names up to five items and counts the rest.
func listSome(items []string) string {
	const most = 5
	if len(items) <= most {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:most], ", "), len(items)-most)
}

// series is a server's major.minor version.
type series struct{ major, minor int }

func (s series) String() string { return fmt.Sprintf("%d.%d", s.major, s.minor) }
func (s series) less(o series) bool {
	return s.major < o.major || (s.major == o.major && s.minor < o.minor)
}

var seriesRE = regexp.MustCompile(`^(\d+)\.(\d+)`)

// parseSeries reads major.minor from the start of a version string.
func parseSeries(v string) (series, bool) {
	m := seriesRE.FindStringSubmatch(v)
	if m == nil {
		return series{}, false
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	return series{major, minor}, true
}

// hasAll reports whether every privilege of want is held.
func hasAll(held []string, want ...string) bool {
	for _, w := range want {
		if !hasPrivilege(held, w) {
			return false
		}
	}
	return true
}
