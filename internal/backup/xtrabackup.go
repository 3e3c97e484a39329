package backup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// The MySQL flavor's physical backup: Percona XtraBackup, the same shape as MariaDB's —
// `xtrabackup --backup --stream=xbstream` → zstd → sha256 → store, `xbstream -x` and
// `xtrabackup --prepare` to restore. No MySQL server or XtraBackup runs on the machines these
// tests run on, so this path is proven by exact-command tests with stand-in tools, not
// against a real server (see the README).
const (
	// FlavorMariaDB and FlavorMySQL are the flavors a backup is taken of (Manifest.Flavor).
	FlavorMariaDB = "mariadb"
	FlavorMySQL   = "mysql"

	toolMariaDBBackup = "mariadb-backup"
	toolMBStream      = "mbstream"
	toolXtrabackup    = "xtrabackup"
	toolXBStream      = "xbstream"

	// xtrabackupInfoFile is what `--extra-lsndir` receives besides xtrabackup_checkpoints: the
	// backup's summary, with the binary log position and the whole GTID set (the stderr line
	// was truncated for large sets before XtraBackup 8.0.35, PXB-3302).
	xtrabackupInfoFile = "xtrabackup_info"
)

// backupTools names the backup tool and the stream extractor of flavor.
func backupTools(flavor string) (tool, extractor string, err error) {
	switch flavor {
	case "", FlavorMariaDB:
		return toolMariaDBBackup, toolMBStream, nil
	case FlavorMySQL:
		return toolXtrabackup, toolXBStream, nil
	}
	return "", "", fmt.Errorf("flavor %q: physical backups are implemented for %s and %s", flavor, FlavorMariaDB, FlavorMySQL)
}

// xtrabackupArgs are xtrabackup's arguments for a run that reads its password from pwFile
// and leaves its summary in infoDir.
func (o *StreamOptions) xtrabackupArgs(pwFile, targetDir, infoDir string) []string {
	return o.toolArgs(pwFile, "--backup", "--stream=xbstream", "--slave-info",
		"--extra-lsndir="+infoDir, "--target-dir="+targetDir)
}

// xtrabackupInfo is what xtrabackup_info says about the position of a backup.
type xtrabackupInfo struct {
	BinlogFile     string
	BinlogPosition uint64
	// GTIDSet is MySQL's gtid_executed at the lock point, whitespace removed.
	GTIDSet       string
	ServerVersion string
	ToolVersion   string
}

// xtrabackupBinlogRE is the binlog_pos value: "filename 'binlog.000002', position '156',
// GTID of the last change '<uuid:1-5,\nuuid2:1-3>'" (the set may span lines).
var xtrabackupBinlogRE = regexp.MustCompile(`(?s)filename '([^']*)', position '(\d+)'(?:, GTID of the last change '([^']*)')?`)

// readXtrabackupInfo reads the summary xtrabackup wrote into dir.
func readXtrabackupInfo(dir string) (xtrabackupInfo, error) {
	b, err := os.ReadFile(filepath.Join(dir, xtrabackupInfoFile))
	if err != nil {
		return xtrabackupInfo{}, err
	}
	return parseXtrabackupInfo(string(b))
}

// parseXtrabackupInfo parses xtrabackup_info: "key = value" lines, a value possibly
// continued on the next lines (a long GTID set).
func parseXtrabackupInfo(text string) (xtrabackupInfo, error) {
	values := map[string]string{}
	var last string
	for l := range strings.Lines(text) {
		l = strings.TrimRight(l, "\r\n")
		if k, v, ok := strings.Cut(l, " = "); ok && !strings.ContainsAny(k, " '") {
			last = strings.TrimSpace(k)
			values[last] = v
			continue
		}
		if last != "" {
			values[last] += "\n" + l
		}
	}
	info := xtrabackupInfo{ServerVersion: values["server_version"], ToolVersion: values["tool_version"]}
	bp, ok := values["binlog_pos"]
	if !ok || strings.TrimSpace(bp) == "" {
		return info, errors.New("it records no binary log position (is the binary log enabled?)")
	}
	m := xtrabackupBinlogRE.FindStringSubmatch(bp)
	if m == nil {
		return info, fmt.Errorf("binlog_pos %q is not in the form filename '…', position '…', GTID of the last change '…'", bp)
	}
	pos, err := strconv.ParseUint(m[2], 10, 64)
	if err != nil {
		return info, fmt.Errorf("binlog_pos position %q: %w", m[2], err)
	}
	info.BinlogFile, info.BinlogPosition = m[1], pos
	info.GTIDSet = strings.Join(strings.Fields(m[3]), "")
	if info.GTIDSet != "" {
		if err := checkMySQLGTIDSet(info.GTIDSet); err != nil {
			return info, err
		}
	}
	return info, nil
}

// mysqlGTIDRE is one member of a MySQL GTID set: a server UUID, an optional tag (8.4), and
// intervals.
var mysqlGTIDRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}(:[A-Za-z_][A-Za-z0-9_]{0,31})?(:[0-9]+(-[0-9]+)?)+$`)

// checkMySQLGTIDSet refuses what is not a MySQL GTID set ("uuid:1-5,uuid2:tag:1-3").
func checkMySQLGTIDSet(set string) error {
	for _, member := range strings.Split(set, ",") {
		if !mysqlGTIDRE.MatchString(member) {
			return fmt.Errorf("%q in the GTID set %q is not a MySQL GTID (uuid[:tag]:interval…)", member, set)
		}
	}
	return nil
}

// checkMySQLBinlogInfo compares the prepared directory's xtrabackup_binlog_info with the
// manifest: "<file>\t<position>\t<GTID set>", the set possibly continued on more lines.
func checkMySQLBinlogInfo(target string, m *Manifest) error {
	const name = "xtrabackup_binlog_info"
	b, err := os.ReadFile(filepath.Join(target, name))
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: the extracted data holds no %s", ErrCorrupt, name)
	}
	if err != nil {
		return err
	}
	f := strings.SplitN(strings.TrimSpace(string(b)), "\t", 3)
	if len(f) < 2 {
		return fmt.Errorf("%w: %s %q: want <file>\\t<position>[\\t<GTID set>]", ErrCorrupt, name, b)
	}
	set := ""
	if len(f) == 3 {
		set = strings.Join(strings.Fields(f[2]), "")
	}
	if set != "" {
		if err := checkMySQLGTIDSet(set); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrCorrupt, name, err)
		}
	}
	if want := strings.Join(strings.Fields(m.GTIDPosition), ""); set != want {
		return fmt.Errorf("%w: the restored data's %s holds GTID set %q, the manifest says %q", ErrCorrupt, name, set, want)
	}
	return nil
}
