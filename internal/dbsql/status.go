package dbsql

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Status implements Instance: one round trip where the dialect has a status probe
// (statusInOneTrip), several otherwise.
func (in *instance) Status(ctx context.Context) (*Status, error) {
	if in.d.statusProbe != "" {
		return in.statusInOneTrip(ctx)
	}
	return in.statusInSteps(ctx)
}

// statusInSteps reads the status with one query per part: the server's variables, the
// replica status, the semi-sync variables and status, and stalled dump threads.
func (in *instance) statusInSteps(ctx context.Context) (*Status, error) {
	s := &Status{}
	if err := in.readServer(ctx, s); err != nil {
		return nil, err
	}
	rep, err := in.readReplica(ctx, s.Executed)
	if err != nil {
		return nil, err
	}
	s.Replica = rep
	if err := in.readSemiSync(ctx, s); err != nil {
		return nil, err
	}
	return s, nil
}

func (in *instance) readServer(ctx context.Context, s *Status) error {
	qctx, cancel := context.WithTimeout(ctx, in.queryTimeout)
	defer cancel()
	// read_only is scanned as text: 0/1 today, ON/OFF in some versions.
	var readOnly, superReadOnly, executed, secure sql.NullString
	err := in.db.QueryRowContext(qctx, in.d.statusQuery).
		Scan(&s.ServerID, &s.Version, &readOnly, &superReadOnly, &executed, &secure)
	if err != nil {
		return fmt.Errorf("dbsql: %s: %w", in.d.statusQuery, err)
	}
	return in.setServer(s, readOnly.String, superReadOnly.String, executed.String, secure.String)
}

// setServer parses the server variables every status read returns as text.
func (in *instance) setServer(s *Status, readOnly, superReadOnly, executed, secure string) error {
	s.ReadOnly, s.SuperReadOnly = isOn(readOnly), isOn(superReadOnly)
	s.RequireSecureTransport = isOn(secure)
	var err error
	if s.Executed, err = in.d.parseGTID(executed); err != nil {
		return fmt.Errorf("dbsql: executed GTID set: %w", err)
	}
	return nil
}

// queryRows runs query and returns every row as column name -> value (NULL
// is a missing key), reading columns by name so their order never matters.
func (in *instance) queryRows(ctx context.Context, query string) ([]map[string]string, error) {
	qctx, cancel := context.WithTimeout(ctx, in.queryTimeout)
	defer cancel()
	rows, err := in.db.QueryContext(qctx, query)
	if err != nil {
		return nil, fmt.Errorf("dbsql: %s: %w", query, err)
	}
	defer rows.Close()
	out, err := ResultMaps(rows)
	if err != nil {
		return nil, fmt.Errorf("dbsql: %s: %w", query, err)
	}
	return out, nil
}

// ResultMaps reads the current result set of rows as column name -> value (NULL is a
// missing key).
func ResultMaps(rows *sql.Rows) ([]map[string]string, error) {
	cols, err := rows.Columns()
	if err != nil {
		return nil, fmt.Errorf("columns: %w", err)
	}
	raw := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range raw {
		ptrs[i] = &raw[i]
	}
	var out []map[string]string
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return nil, fmt.Errorf("scan: %w", err)
		}
		row := make(map[string]string, len(cols))
		for i, c := range cols {
			if raw[i] != nil {
				row[c] = string(raw[i])
			}
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

func (in *instance) readReplica(ctx context.Context, executed GTIDSet) (*ReplicaStatus, error) {
	rows, err := in.queryRows(ctx, in.d.replicaStatusQuery)
	if err != nil {
		return nil, err
	}
	return in.replicaFromRows(rows, executed)
}

// replicaFromRows parses the replica status rows of Dolphin's replication connection (nil
// when there is none).
func (in *instance) replicaFromRows(rows []map[string]string, executed GTIDSet) (*ReplicaStatus, error) {
	if col := in.d.replica.connectionName; col != "" {
		rows = slices.DeleteFunc(rows, func(r map[string]string) bool { return r[col] != "" })
	}
	if len(rows) == 0 {
		return nil, nil
	}
	rep, err := parseReplicaRow(in.d, rows[0], executed)
	if err != nil {
		return nil, fmt.Errorf("dbsql: %s: %w", in.d.replicaStatusQuery, err)
	}
	return rep, nil
}

// parseReplicaRow turns one SHOW SLAVE/REPLICA STATUS row into a
// ReplicaStatus; executed is the server's own executed set, merged into
// Received.
func parseReplicaRow(d *dialect, row map[string]string, executed GTIDSet) (*ReplicaStatus, error) {
	c := d.replica
	for _, name := range []string{c.host, c.port, c.ioRunning, c.sqlRunning,
		c.ioErrno, c.ioError, c.sqlErrno, c.sqlError, c.received} {
		if _, ok := row[name]; !ok {
			return nil, fmt.Errorf("column %s missing or NULL", name)
		}
	}
	rep := &ReplicaStatus{
		SourceHost:   row[c.host],
		IORunning:    row[c.ioRunning] == "Yes",
		SQLRunning:   row[c.sqlRunning] == "Yes",
		LastIOError:  row[c.ioError],
		LastSQLError: row[c.sqlError],
	}
	var err error
	if rep.SourcePort, err = atoi(row, c.port); err != nil {
		return nil, err
	}
	if rep.LastIOErrno, err = atoi(row, c.ioErrno); err != nil {
		return nil, err
	}
	if rep.LastSQLErrno, err = atoi(row, c.sqlErrno); err != nil {
		return nil, err
	}
	if v, ok := row[c.secondsBehind]; ok && v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", c.secondsBehind, err)
		}
		rep.SecondsBehindSource = &n
	}
	if c.heartbeats != "" {
		rep.Progress = row[c.sourceLogFile] + ":" + row[c.readSourcePos] + "/" + row[c.heartbeats]
	}
	if v := strings.TrimSpace(row[c.heartbeatPeriod]); c.heartbeatPeriod != "" && v != "" {
		secs, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", c.heartbeatPeriod, err)
		}
		rep.HeartbeatPeriod = time.Duration(secs * float64(time.Second))
	}
	rep.SSL = row[c.sslAllowed] == "Yes"
	rep.SSLCAFile = row[c.sslCAFile]
	rep.SSLVerifyName = row[c.sslVerifyName] == "Yes"
	received, err := d.parseGTID(row[c.received])
	if err != nil {
		return nil, fmt.Errorf("column %s: %w", c.received, err)
	}
	if executed != nil {
		if received, err = unionGTID(received, executed); err != nil {
			return nil, err
		}
	}
	rep.Received = received
	return rep, nil
}

func atoi(row map[string]string, col string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(row[col]))
	if err != nil {
		return 0, fmt.Errorf("column %s: %w", col, err)
	}
	return n, nil
}

// readSemiSync reads the semi-sync variables into s.SemiSync, and the
// server's uptime that comes with them into s.Uptime. Missing variables (a
// MySQL server without the plugins) leave fields zero.
func (in *instance) readSemiSync(ctx context.Context, s *Status) error {
	vars, err := in.variables(ctx, semiSyncVariablesQuery)
	if err != nil {
		return err
	}
	status, err := in.variables(ctx, semiSyncStatusQuery)
	if err != nil {
		return err
	}
	if err := in.setSemiSync(s, vars, status); err != nil {
		return err
	}
	if s.SemiSync.SourceEnabled && in.d.waitingCommits != "" {
		rows, err := in.queryRows(ctx, in.d.waitingCommits)
		if err != nil {
			return err
		}
		if len(rows) == 1 {
			if s.SemiSync.WaitingCommits, err = atoi(rows[0], "n"); err != nil {
				return fmt.Errorf("dbsql: commits waiting for an acknowledgement: %w", err)
			}
		}
	}
	if s.SemiSync.SourceEnabled && in.d.stalledDumps != "" {
		rows, err := in.queryRows(ctx, in.d.stalledDumps)
		if err != nil {
			return err
		}
		if len(rows) == 1 {
			if s.SemiSync.StalledDumps, err = atoi(rows[0], "n"); err != nil {
				return fmt.Errorf("dbsql: stalled dump threads: %w", err)
			}
		}
	}
	return nil
}

// setSemiSync parses the semi-sync variables (vars) and status variables with Uptime
// (status), both keyed by lower-case name, into s.
func (in *instance) setSemiSync(s *Status, vars, status map[string]string) error {
	var err error
	if v := status["uptime"]; v != "" {
		secs, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("dbsql: Uptime=%q: %w", v, err)
		}
		s.Uptime = time.Duration(secs) * time.Second
	}
	ss := &s.SemiSync
	n := in.d.semiSync
	get := func(m map[string]string, name string) string { return m[strings.ToLower(name)] }
	ss.SourceEnabled = isOn(get(vars, n.sourceEnabled))
	ss.ReplicaEnabled = isOn(get(vars, n.replicaEnabled))
	ss.WaitPoint = get(vars, n.waitPoint)
	ss.SourceActive = isOn(get(status, n.sourceStatus))
	if v := get(vars, n.timeout); v != "" {
		if ss.TimeoutMS, err = strconv.ParseInt(v, 10, 64); err != nil {
			return fmt.Errorf("dbsql: %s=%q: %w", n.timeout, v, err)
		}
	}
	if v := get(status, n.clients); v != "" {
		if ss.Clients, err = strconv.Atoi(v); err != nil {
			return fmt.Errorf("dbsql: %s=%q: %w", n.clients, v, err)
		}
	}
	return nil
}

// variables runs a SHOW VARIABLES/STATUS query into name -> value, with names
// lower-cased (MariaDB and MySQL differ in the case of status names).
func (in *instance) variables(ctx context.Context, query string) (map[string]string, error) {
	rows, err := in.queryRows(ctx, query)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(rows))
	for _, r := range rows {
		out[strings.ToLower(r["Variable_name"])] = r["Value"]
	}
	return out, nil
}

func isOn(v string) bool {
	switch strings.ToUpper(v) {
	case "ON", "1", "YES", "TRUE":
		return true
	}
	return false
}
