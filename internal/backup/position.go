package backup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// What mariadb-backup 10.11 writes to stderr about the position its backup contains
// (checked against /usr/bin/mariadb-backup 10.11.14), after a "[00] <date> <time> " prefix:
//
//	Using server version 10.11.14-MariaDB-0+deb12u2-log
//	MySQL binlog position: filename 'binlog.000001', position '172524', GTID of the last change '0-1-3'
//	MySQL slave binlog position: gtid_slave_pos '0-1-3'; master '' master_use_gtid = slave_pos
//	completed OK!
//
// The binlog line is printed from the values read under BACKUP STAGE BLOCK_COMMIT (SHOW MASTER
// STATUS and @@gtid_current_pos), so it is consistent with the copied data. Without a GTID
// the ", GTID of the last change" part is missing; without a binary log the line is missing.
// On a server that is not a replica, --slave-info prints "Failed to get master binlog
// coordinates from SHOW SLAVE STATUS..." instead of the slave line. Other versions word the
// slave line differently ("master host 'h', gtid_slave_pos 0-1-3"), hence the loose pattern.
var (
	binlogLineRE    = regexp.MustCompile(`MySQL binlog position: filename '([^']*)', position '(\d+)'(?:, GTID of the last change '([^']*)')?`)
	serverVersionRE = regexp.MustCompile(`Using server version (\S+)`)
	slaveLineRE     = regexp.MustCompile(`MySQL slave binlog position: .*?gtid_slave_pos '?([0-9,\-]*)`)
)

// completedLine ends mariadb-backup's output when it succeeded.
const completedLine = "completed OK!"

// redoLogBehindLine starts the line mariadb-backup prints when its redo log copy did not
// reach the backup's end: "Was only able to copy log from 45518 to 479220, not 524079; try
// increasing innodb_log_file_size".
const redoLogBehindLine = "Was only able to copy log from"

// toolReport is what mariadb-backup's stderr says about the backup it made.
type toolReport struct {
	// HasBinlog is set by the "MySQL binlog position" line.
	HasBinlog      bool
	BinlogFile     string
	BinlogPosition uint64
	// GTID is "GTID of the last change" (MariaDB's gtid_current_pos at the lock point).
	GTID string
	// ReplicaGTID is gtid_slave_pos from the "MySQL slave binlog position" line.
	ReplicaGTID string
	// ServerVersion is the server's version as the tool saw it ("Using server version X").
	ServerVersion string
	// Completed is set by a line ending in "completed OK!".
	Completed bool
	// RedoLogBehind is set by "Was only able to copy log from …": see ErrRedoLogCopy.
	RedoLogBehind bool
}

// line takes one line of mariadb-backup's stderr into account.
func (r *toolReport) line(s string) {
	s = strings.TrimRight(s, "\r\n")
	if strings.HasSuffix(s, completedLine) {
		r.Completed = true
		return
	}
	if strings.Contains(s, redoLogBehindLine) {
		r.RedoLogBehind = true
		return
	}
	if m := serverVersionRE.FindStringSubmatch(s); m != nil {
		r.ServerVersion = m[1]
		return
	}
	if m := binlogLineRE.FindStringSubmatch(s); m != nil {
		pos, err := strconv.ParseUint(m[2], 10, 64)
		if err != nil {
			return
		}
		r.HasBinlog, r.BinlogFile, r.BinlogPosition, r.GTID = true, m[1], pos, strings.TrimSpace(m[3])
		return
	}
	if m := slaveLineRE.FindStringSubmatch(s); m != nil {
		r.ReplicaGTID = m[1]
	}
}

// parseToolReport reads a whole stderr text; Take feeds lines as they come instead.
func parseToolReport(text string) toolReport {
	var r toolReport
	for l := range strings.Lines(text) {
		r.line(l)
	}
	return r
}

// Binlog info files in a backup: MariaDB 11 writes mariadb_backup_binlog_info, 10.11 (and
// earlier) xtrabackup_binlog_info. ReadBinlogInfo reads the first that exists.
var binlogInfoFiles = []string{"mariadb_backup_binlog_info", "xtrabackup_binlog_info"}

// BinlogInfo is the content of a backup's binlog info file: the position the data holds.
type BinlogInfo struct {
	// File and Position are the source's own binary log coordinates.
	File     string
	Position uint64
	// GTID is the source's gtid_current_pos at the backup's lock point (may be empty).
	GTID string
}

// parseBinlogInfo parses a binlog info file: one line per binary log copied into the backup,
// "<file>\t<position>[\t<gtid>]", where only the last line describes the backup's position
// (earlier ones, written by versions that copy binary logs, carry "[]" as GTID).
func parseBinlogInfo(content string) (BinlogInfo, error) {
	var last string
	for l := range strings.Lines(content) {
		if l = strings.TrimSpace(l); l != "" {
			last = l
		}
	}
	if last == "" {
		return BinlogInfo{}, fmt.Errorf("binlog info is empty")
	}
	f := strings.Split(last, "\t")
	if len(f) < 2 || len(f) > 3 {
		return BinlogInfo{}, fmt.Errorf("binlog info line %q: want <file>\\t<position>[\\t<gtid>]", last)
	}
	pos, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return BinlogInfo{}, fmt.Errorf("binlog info line %q: position: %w", last, err)
	}
	bi := BinlogInfo{File: f[0], Position: pos}
	if len(f) == 3 {
		bi.GTID = strings.TrimSpace(f[2])
	}
	return bi, nil
}

// normalizeGTID returns a MariaDB GTID position (domain-server-seq, comma-separated, one per
// domain) in a canonical form: spaces removed, sorted by domain. It refuses anything else,
// including two GTIDs of one domain.
func normalizeGTID(pos string) (string, error) {
	pos = strings.Join(strings.Fields(pos), "")
	if pos == "" {
		return "", nil
	}
	type gtid struct {
		domain uint32
		text   string
	}
	var gs []gtid
	seen := map[uint32]bool{}
	for _, p := range strings.Split(pos, ",") {
		parts := strings.Split(p, "-")
		if len(parts) != 3 {
			return "", fmt.Errorf("GTID position %q: %q is not domain-server-sequence", pos, p)
		}
		var nums [3]uint64
		for i, s := range parts {
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil || (i < 2 && n > 1<<32-1) {
				return "", fmt.Errorf("GTID position %q: %q is not domain-server-sequence", pos, p)
			}
			nums[i] = n
		}
		d := uint32(nums[0])
		if seen[d] {
			return "", fmt.Errorf("GTID position %q: domain %d appears twice", pos, d)
		}
		seen[d] = true
		gs = append(gs, gtid{d, fmt.Sprintf("%d-%d-%d", nums[0], nums[1], nums[2])})
	}
	slices.SortFunc(gs, func(a, b gtid) int { return int(int64(a.domain) - int64(b.domain)) })
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = g.text
	}
	return strings.Join(out, ","), nil
}

// sameGTID reports whether two GTID positions are equal once normalized.
func sameGTID(a, b string) (bool, error) {
	na, err := normalizeGTID(a)
	if err != nil {
		return false, err
	}
	nb, err := normalizeGTID(b)
	if err != nil {
		return false, err
	}
	return na == nb, nil
}

// parseToolVersion turns `mariadb-backup --version` output, e.g. "mariadb-backup based on
// MariaDB server 10.11.14-MariaDB debian-linux-gnu (x86_64)", into "mariadb-backup
// 10.11.14-MariaDB" (the tool prints its name as invoked, a path included, which is cut).
// Output it does not recognise is returned as its first line.
func parseToolVersion(out string) string {
	if m := toolVersionRE.FindStringSubmatch(out); m != nil {
		return filepath.Base(m[1]) + " " + m[2]
	}
	if m := xtrabackupVersionRE.FindStringSubmatch(out); m != nil {
		return filepath.Base(m[1]) + " " + m[2]
	}
	first, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	return strings.TrimSpace(first)
}

var (
	toolVersionRE = regexp.MustCompile(`(\S+) based on MariaDB server (\S+)`)
	// xtrabackupVersionRE: "xtrabackup version 8.4.0-2 based on MySQL server 8.4.0 Linux …".
	xtrabackupVersionRE = regexp.MustCompile(`(\S+) version (\S+) based on MySQL server`)
)

// ReadBinlogInfo reads the binlog info file of a backup extracted into dir
// (mariadb_backup_binlog_info, or xtrabackup_binlog_info as 10.11 names it) and returns it
// with the file's name. The error wraps os.ErrNotExist when dir holds neither.
func ReadBinlogInfo(dir string) (BinlogInfo, string, error) {
	for _, name := range binlogInfoFiles {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return BinlogInfo{}, name, err
		}
		bi, err := parseBinlogInfo(string(b))
		if err != nil {
			return BinlogInfo{}, name, fmt.Errorf("%s: %w", name, err)
		}
		if _, err := normalizeGTID(bi.GTID); err != nil {
			return BinlogInfo{}, name, fmt.Errorf("%s: %w", name, err)
		}
		return bi, name, nil
	}
	last := binlogInfoFiles[len(binlogInfoFiles)-1]
	return BinlogInfo{}, last, fmt.Errorf("the extracted data holds no %s nor %s: %w", binlogInfoFiles[0], last, os.ErrNotExist)
}
