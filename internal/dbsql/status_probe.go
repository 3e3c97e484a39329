package dbsql

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// statusInOneTrip reads the Status with the dialect's statusProbe: one round trip to the
// server, where statusInSteps takes four or five. The engine probes every instance of
// every cluster each detection interval, so this is most of what an idle cluster costs its
// servers and the operator (docs/design/0037).
func (in *instance) statusInOneTrip(ctx context.Context) (*Status, error) {
	qctx, cancel := context.WithTimeout(ctx, in.queryTimeout)
	defer cancel()
	rows, err := in.db.QueryContext(qctx, in.d.statusProbe)
	if err != nil {
		return nil, fmt.Errorf("dbsql: status probe: %w", err)
	}
	defer rows.Close()
	server, err := ResultMaps(rows)
	if err != nil {
		return nil, fmt.Errorf("dbsql: status probe: server variables: %w", err)
	}
	if len(server) != 1 {
		return nil, fmt.Errorf("dbsql: status probe: %d rows of server variables, want 1", len(server))
	}
	if !rows.NextResultSet() {
		return nil, fmt.Errorf("dbsql: status probe: no replica status after the server variables (%v)", rows.Err())
	}
	replicas, err := ResultMaps(rows)
	if err != nil {
		return nil, fmt.Errorf("dbsql: status probe: %s: %w", in.d.replicaStatusQuery, err)
	}
	return in.statusFromProbe(server[0], replicas)
}

// statusFromProbe parses the two result sets of statusProbe.
func (in *instance) statusFromProbe(row map[string]string, replicas []map[string]string) (*Status, error) {
	s := &Status{Version: row["version"]}
	id, err := strconv.ParseUint(strings.TrimSpace(row["server_id"]), 10, 32)
	if err != nil {
		return nil, fmt.Errorf("dbsql: status probe: server_id %q: %w", row["server_id"], err)
	}
	s.ServerID = uint32(id)
	if err := in.setServer(s, row["read_only"], row["super_read_only"], row["executed"], row["require_secure_transport"]); err != nil {
		return nil, err
	}
	// The row's columns are named by the lower-case variable names setSemiSync looks up.
	if err := in.setSemiSync(s, row, row); err != nil {
		return nil, err
	}
	if s.SemiSync.SourceEnabled {
		if s.SemiSync.StalledDumps, err = atoi(row, "stalled_dumps"); err != nil {
			return nil, fmt.Errorf("dbsql: status probe: %w", err)
		}
		if s.SemiSync.WaitingCommits, err = atoi(row, "waiting_commits"); err != nil {
			return nil, fmt.Errorf("dbsql: status probe: %w", err)
		}
	}
	if s.Replica, err = in.replicaFromRows(replicas, s.Executed); err != nil {
		return nil, fmt.Errorf("dbsql: %s: %w", in.d.replicaStatusQuery, err)
	}
	return s, nil
}
