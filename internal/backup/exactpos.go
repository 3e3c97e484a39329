package backup

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
)

// binlogGTIDPosQuery turns binary log coordinates of the server into the GTID position they
// mark (NULL when the file is not one of the server's binary logs any more).
const binlogGTIDPosQuery = "SELECT BINLOG_GTID_POS(?, ?)"

// exactPosition returns the GTID position of the data mariadb-backup copied: the server's
// gtid_binlog_pos at the binary log coordinates the tool read under BACKUP STAGE
// BLOCK_COMMIT, asked of the server with BINLOG_GTID_POS once the tool is done.
//
// The tool's own "GTID of the last change" is @@gtid_current_pos, which on a replica takes
// each domain replicated from the primary from the in-memory gtid_slave_pos. The SQL thread
// advances that only after its commit is over — after it released the commit lock that
// BLOCK_COMMIT waits for — so under writes it can name one transaction less than the data
// holds (measured: data and mysql.gtid_slave_pos at 0-1-156, the tool said 0-1-155; a
// replica restored from it would apply 0-1-156 twice). The binary log coordinates are
// written inside the commit, so the position they mark is exactly the data's; Dolphin's
// replicas log what they apply (log_slave_updates), so it holds every replicated
// transaction too.
//
// It fails, and with it the backup, when the position cannot be asked (the binary log was
// purged while the backup ran) or is behind the tool's in some domain: a backup with a
// wrong position is worse than none.
func (o *StreamOptions) exactPosition(ctx context.Context, report toolReport) (string, error) {
	ask := o.positionAt
	if ask == nil {
		ask = o.binlogGTIDPos
	}
	pos, addr, err := ask(ctx, report.BinlogFile, report.BinlogPosition)
	if err != nil {
		return "", fmt.Errorf("asking %s for the GTID position at the backup's binary log coordinates %s:%d: %w",
			addr, report.BinlogFile, report.BinlogPosition, err)
	}
	if !pos.Valid {
		return "", fmt.Errorf("%s no longer has the binary log %s the backup's position is in (purged while the backup ran?): "+
			"the exact GTID position of the backup is unknown, so it is not kept; keep binary logs longer than a backup takes",
			addr, report.BinlogFile)
	}
	exact, err := normalizeGTID(pos.String)
	if err != nil {
		return "", fmt.Errorf("BINLOG_GTID_POS(%s, %d) on %s: %w", report.BinlogFile, report.BinlogPosition, addr, err)
	}
	if behind := domainsBehind(exact, report.GTID); len(behind) > 0 {
		return "", fmt.Errorf("the GTID position at the backup's binary log coordinates %s:%d is %q, behind the tool's %q in %s: "+
			"the backup's position is uncertain, so it is not kept", report.BinlogFile, report.BinlogPosition, exact, report.GTID,
			strings.Join(behind, ", "))
	}
	return exact, nil
}

// domainsBehind lists the GTIDs of ref ("domain d at seq n") whose domain is missing from
// pos or has a lower sequence number there. Both are valid MariaDB GTID positions.
func domainsBehind(pos, ref string) []string {
	seqs := gtidSeqs(pos)
	var out []string
	for d, n := range gtidSeqs(ref) {
		if m, ok := seqs[d]; !ok || m < n {
			out = append(out, fmt.Sprintf("domain %d (seq %d)", d, n))
		}
	}
	return out
}

// gtidSeqs maps each domain of a GTID position to its sequence number; unparsable parts are
// left out (positions are normalized before they get here).
func gtidSeqs(pos string) map[uint64]uint64 {
	out := map[uint64]uint64{}
	for _, g := range strings.Split(pos, ",") {
		p := strings.Split(strings.TrimSpace(g), "-")
		if len(p) != 3 {
			continue
		}
		d, err1 := strconv.ParseUint(p[0], 10, 64)
		n, err2 := strconv.ParseUint(p[2], 10, 64)
		if err1 == nil && err2 == nil {
			out[d] = n
		}
	}
	return out
}

// positionFunc returns the GTID position at binary log coordinates of the server, and the
// server's address for messages.
type positionFunc func(ctx context.Context, file string, pos uint64) (gtid sql.NullString, addr string, err error)

// binlogGTIDPos asks the server.
func (o *StreamOptions) binlogGTIDPos(ctx context.Context, file string, at uint64) (sql.NullString, string, error) {
	var pos sql.NullString
	db, addr, err := o.openDB()
	if err != nil {
		return pos, addr, err
	}
	defer db.Close()
	err = db.QueryRowContext(ctx, binlogGTIDPosQuery, file, at).Scan(&pos)
	return pos, addr, err
}
