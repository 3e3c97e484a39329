package restore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/dolphin-operator/dolphin/internal/backup"
)

// Fix-up statements, run in this order on one session of the temporary server. `?` are
// interpolated by the driver (see tempServer.connector).
const (
	// Nothing of the fix-up may reach the binary log: a restored instance must hold exactly
	// the backup's transactions. First, so that FLUSH PRIVILEGES is not logged either.
	sqlLogBinOff = "SET SESSION sql_log_bin = 0"
	// Loads the grant tables, which --skip-grant-tables left out, so that account statements
	// work; the session keeps its privileges.
	flushPrivileges = "FLUSH PRIVILEGES"
	replaceOperator = "CREATE OR REPLACE USER ?@'%' IDENTIFIED BY ?"
	grantOperator   = "GRANT ALL PRIVILEGES ON *.* TO ?@'%' WITH GRANT OPTION"
	createRoot      = "CREATE USER IF NOT EXISTS 'root'@'localhost' IDENTIFIED BY ?"
	alterRoot       = "ALTER USER 'root'@'localhost' IDENTIFIED BY ?"
	grantRoot       = "GRANT ALL PRIVILEGES ON *.* TO 'root'@'localhost' WITH GRANT OPTION"
	stopAllSlaves   = "STOP ALL SLAVES"
	showAllSlaves   = "SHOW ALL SLAVES STATUS"
	resetSlaveAll   = "RESET SLAVE ALL"
	resetNamedSlave = "RESET SLAVE ? ALL"
	resetMaster     = "RESET MASTER"
	setBinlogState  = "SET GLOBAL gtid_binlog_state = ?"
	setSlavePos     = "SET GLOBAL gtid_slave_pos = ?"
	gtidStateQuery  = "SELECT @@log_bin, @@gtid_binlog_pos, @@gtid_slave_pos, @@gtid_current_pos"
	// The server loads gtid_slave_pos from the data's mysql.gtid_slave_pos table.
	slavePosQuery    = "SELECT @@gtid_slave_pos"
	connectionColumn = "Connection_name"
)

// fixUp makes the restored data directory the new cluster's, on a temporary server: its
// accounts, no replication connection and the data's GTID position as its GTID state. That
// position is what the data holds (see heldPosition: its binlog info file's GTID, and
// mysql.gtid_slave_pos where it is further); for a backup (m set) it must agree with the
// manifest's. fixUp returns the position it set.
func (o *Options) fixUp(ctx context.Context, m *backup.Manifest) (_ string, err error) {
	log := o.logf()
	info, infoName, err := backup.ReadBinlogInfo(o.DataDir)
	if err != nil {
		return "", fmt.Errorf("%w: %w", backup.ErrCorrupt, err)
	}
	srv, err := o.startTempServer(ctx)
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, srv.stop(o.StopTimeout))
		}
	}()
	c, err := srv.connector()
	if err != nil {
		return "", err
	}
	db := sql.OpenDB(c)
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return "", fmt.Errorf("connecting to the temporary server: %w", err)
	}
	defer conn.Close()

	// Read before anything of the fix-up sets it.
	var tablePos string
	if err := conn.QueryRowContext(ctx, slavePosQuery).Scan(&tablePos); err != nil {
		return "", fmt.Errorf("%s: %w", slavePosQuery, err)
	}
	position, err := heldPosition(info.GTID, infoName, tablePos, m, log)
	if err != nil {
		return "", err
	}

	exec := func(q string, args ...any) error {
		if _, err := conn.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("%s: %w", q, err) // q holds placeholders, never a password
		}
		return nil
	}
	for _, s := range []struct {
		q    string
		args []any
	}{
		{sqlLogBinOff, nil},
		{flushPrivileges, nil},
		{replaceOperator, []any{o.OperatorUser, o.OperatorPassword}},
		{grantOperator, []any{o.OperatorUser}},
		{createRoot, []any{o.RootPassword}},
		{alterRoot, []any{o.RootPassword}},
		{grantRoot, nil},
		{stopAllSlaves, nil},
	} {
		if err := exec(s.q, s.args...); err != nil {
			return "", err
		}
	}
	log("replaced the operator account %q and root@localhost's password", o.OperatorUser)

	names, err := connectionNames(ctx, conn)
	if err != nil {
		return "", err
	}
	for _, n := range names {
		q, args := resetSlaveAll, []any(nil)
		if n != "" {
			q, args = resetNamedSlave, []any{n}
		}
		if err := exec(q, args...); err != nil {
			return "", err
		}
	}
	if len(names) > 0 {
		log("removed the replication connection(s) of the source: %q", names)
	}
	for _, s := range []struct {
		q    string
		args []any
	}{
		{resetMaster, nil},
		{setBinlogState, []any{position}},
		{setSlavePos, []any{position}},
	} {
		if err := exec(s.q, s.args...); err != nil {
			return "", err
		}
	}
	if err := checkState(ctx, conn, position); err != nil {
		return "", err
	}
	log("binary log reset; gtid_binlog_state and gtid_slave_pos set to %q", position)
	if o.PointInTime != nil && m != nil {
		if position, err = o.replay(ctx, srv, position); err != nil {
			return "", err
		}
		// The replayed transactions moved the binary log; replication continues from there.
		if err := exec(setSlavePos, position); err != nil {
			return "", err
		}
		if err := checkState(ctx, conn, position); err != nil {
			return "", err
		}
	}
	if err := srv.shutdown(ctx, conn, o.StopTimeout); err != nil {
		return "", err
	}
	log("the temporary server shut down cleanly")
	return position, nil
}

// connectionNames returns the replication connections the server knows ("" is the default
// one), as SHOW ALL SLAVES STATUS lists them.
func connectionNames(ctx context.Context, conn *sql.Conn) ([]string, error) {
	rows, err := conn.QueryContext(ctx, showAllSlaves)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", showAllSlaves, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	idx := slices.Index(cols, connectionColumn)
	if idx < 0 {
		return nil, fmt.Errorf("%s has no column %s", showAllSlaves, connectionColumn)
	}
	var names []string
	vals := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		names = append(names, string(vals[idx]))
	}
	return names, rows.Err()
}

// checkState verifies what the fix-up set: the binary log is on and every GTID position is
// want, and no replication connection is left.
func checkState(ctx context.Context, conn *sql.Conn, want string) error {
	var logBin int
	var binlogPos, slavePos, currentPos string
	if err := conn.QueryRowContext(ctx, gtidStateQuery).Scan(&logBin, &binlogPos, &slavePos, &currentPos); err != nil {
		return fmt.Errorf("%s: %w", gtidStateQuery, err)
	}
	if logBin != 1 {
		return errors.New("the binary log is off: the server's option file must set log_bin")
	}
	for _, p := range []struct{ name, v string }{
		{"gtid_binlog_pos", binlogPos}, {"gtid_slave_pos", slavePos}, {"gtid_current_pos", currentPos},
	} {
		if !SameGTIDPosition(p.v, want) {
			return fmt.Errorf("after setting it, @@%s is %q, not the backup's position %q", p.name, p.v, want)
		}
	}
	names, err := connectionNames(ctx, conn)
	if err != nil {
		return err
	}
	if len(names) > 0 {
		return fmt.Errorf("replication connections %q are left after RESET SLAVE ALL", names)
	}
	return nil
}

// SameGTIDPosition reports whether two MariaDB GTID positions (comma-separated
// domain-server-seq, in any order, with any spaces) are the same set.
func SameGTIDPosition(a, b string) bool {
	return slices.Equal(gtidSet(a), gtidSet(b))
}

func gtidSet(pos string) []string {
	var out []string
	for _, g := range strings.Split(pos, ",") {
		if g = strings.TrimSpace(g); g != "" {
			out = append(out, g)
		}
	}
	slices.Sort(out)
	return out
}

// dataPosition returns the GTID position restored data holds, given position (what the
// backup tool recorded) and tablePos (the data's mysql.gtid_slave_pos, as the server loads
// it): position, with every domain in which tablePos is further taken from tablePos.
//
// mysql.gtid_slave_pos is written in the same InnoDB transaction as each replicated change,
// so it is exactly what the data holds of what was replicated. mariadb-backup's recorded
// position can be one transaction behind it on a replica under writes (its @@gtid_current_pos
// reads the in-memory gtid_slave_pos, which the SQL thread advances after its commit is
// over): starting from that would apply a transaction twice. Backups taken by Dolphin record
// the exact position (backup.Take asks BINLOG_GTID_POS), but clones — whose position comes
// from the binlog info file inside the stream — and older backups need this. On a source
// that was never a replica the table is empty; on Dolphin's replicas (log_slave_updates) it
// is never ahead of the binary log, so it changes nothing but the lagging domains.
func dataPosition(position, tablePos string) (string, error) {
	given, err := gtidBySeq(position)
	if err != nil {
		return "", fmt.Errorf("the backup's GTID position: %w", err)
	}
	table, err := gtidBySeq(tablePos)
	if err != nil {
		return "", fmt.Errorf("the data's mysql.gtid_slave_pos: %w", err)
	}
	for d, g := range table {
		if cur, ok := given[d]; !ok || g.seq > cur.seq {
			given[d] = g
		}
	}
	out := make([]string, 0, len(given))
	for _, g := range given {
		out = append(out, g.text)
	}
	slices.Sort(out)
	return strings.Join(out, ","), nil
}

// heldPosition returns the GTID position prepared data holds: info (the GTID of its binlog
// info file, named infoName) with table's further domains (dataPosition; table is its
// mysql.gtid_slave_pos). For a backup (m set) the manifest's position must be that position:
//   - equal: the usual case;
//   - behind it (and nowhere ahead): a manifest from before Take asked BINLOG_GTID_POS, whose
//     position is the tool's lagging one; the data's position is taken, and logged;
//   - ahead of it anywhere: the manifest claims transactions the data does not hold, and a
//     restored server would never get them by replication: an error wrapping
//     backup.ErrCorrupt.
func heldPosition(info, infoName, table string, m *backup.Manifest, log func(string, ...any)) (string, error) {
	holds, err := dataPosition(info, table)
	if err != nil {
		return "", err
	}
	if !SameGTIDPosition(holds, info) {
		log("the data's mysql.gtid_slave_pos (%q) is further than its %s (%q): the data holds %q", table, infoName, info, holds)
	}
	if m == nil {
		return holds, nil
	}
	manifest, err := gtidBySeq(m.GTIDPosition)
	if err != nil {
		return "", fmt.Errorf("%w: the manifest's GTID position: %w", backup.ErrCorrupt, err)
	}
	held, _ := gtidBySeq(holds)
	if ahead := furtherDomains(manifest, held); len(ahead) > 0 {
		return "", fmt.Errorf("%w: the manifest's GTID position %q is ahead of what the data holds, %q (its %s says %q, its mysql.gtid_slave_pos %q) in %s: "+
			"a server restored from it would never receive those transactions; restore another backup",
			backup.ErrCorrupt, m.GTIDPosition, holds, infoName, info, table, strings.Join(ahead, ", "))
	}
	if !SameGTIDPosition(holds, m.GTIDPosition) {
		log("the manifest's GTID position %q is behind what the data holds, %q (a backup taken before Dolphin recorded exact positions): continuing from the data's",
			m.GTIDPosition, holds)
	}
	return holds, nil
}

// furtherDomains names the domains in which a is further than b (b lacks it or has a lower
// sequence number there).
func furtherDomains(a, b map[uint64]domainGTID) []string {
	var out []string
	for d, g := range a {
		if h, ok := b[d]; !ok || g.seq > h.seq {
			out = append(out, fmt.Sprintf("domain %d (%s)", d, g.text))
		}
	}
	slices.Sort(out)
	return out
}

// domainGTID is one domain's GTID of a position.
type domainGTID struct {
	seq  uint64
	text string
}

// gtidBySeq parses a MariaDB GTID position into its GTID per domain.
func gtidBySeq(pos string) (map[uint64]domainGTID, error) {
	out := map[uint64]domainGTID{}
	for _, g := range gtidSet(pos) {
		p := strings.Split(g, "-")
		if len(p) != 3 {
			return nil, fmt.Errorf("%q is not domain-server-sequence", g)
		}
		var n [3]uint64
		for i, s := range p {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%q is not domain-server-sequence", g)
			}
			n[i] = v
		}
		if _, dup := out[n[0]]; dup {
			return nil, fmt.Errorf("domain %d appears twice in %q", n[0], pos)
		}
		out[n[0]] = domainGTID{seq: n[2], text: fmt.Sprintf("%d-%d-%d", n[0], n[1], n[2])}
	}
	return out, nil
}
