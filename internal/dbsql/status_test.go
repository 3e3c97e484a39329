package dbsql

import (
	"strings"
	"testing"
	"time"
)

// replicaRow builds a SHOW SLAVE/REPLICA STATUS result: extra columns first
// and the rest in reverse order, since Status must read columns by name.
func replicaRow(kv ...any) result {
	res := row(append([]any{"Connection_name", "", "Replicate_Do_DB", ""}, kv...)...)
	for i, j := 2, len(res.cols)-1; i < j; i, j = i+1, j-1 {
		res.cols[i], res.cols[j] = res.cols[j], res.cols[i]
		res.rows[0][i], res.rows[0][j] = res.rows[0][j], res.rows[0][i]
	}
	return res
}

func TestStatusMariaDB(t *testing.T) {
	r := newRecorder()
	d := mariadbDialect
	r.results[d.statusQuery] = row("@@server_id", int64(2), "@@version", "10.11.19-MariaDB",
		"@@read_only", int64(1), "0", int64(0), "@@gtid_binlog_pos", "0-1-90", "@@require_secure_transport", int64(1))
	r.results[d.replicaStatusQuery] = replicaRow(
		"Master_Host", "127.0.0.11", "Master_Port", "3306",
		"Slave_IO_Running", "Yes", "Slave_SQL_Running", "No",
		"Last_IO_Errno", "0", "Last_IO_Error", "",
		"Last_SQL_Errno", "1062", "Last_SQL_Error", "Duplicate entry",
		"Gtid_IO_Pos", "0-1-100", "Seconds_Behind_Master", nil)
	r.results[semiSyncVariablesQuery] = variables(
		"rpl_semi_sync_master_enabled", "OFF", "rpl_semi_sync_slave_enabled", "ON",
		"rpl_semi_sync_master_wait_point", "AFTER_SYNC", "rpl_semi_sync_master_timeout", "10000")
	r.results[semiSyncStatusQuery] = variables(
		"Rpl_semi_sync_master_status", "OFF", "Rpl_semi_sync_master_clients", "0",
		"Rpl_semi_sync_slave_status", "ON", "Uptime", "75")

	s, err := r.open(t, FlavorMariaDB).statusInSteps(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if s.ServerID != 2 || s.Version != "10.11.19-MariaDB" || !s.ReadOnly || s.SuperReadOnly || s.Executed.String() != "0-1-90" || !s.RequireSecureTransport {
		t.Errorf("server: %+v executed %q", s, s.Executed)
	}
	rep := s.Replica
	if rep == nil {
		t.Fatal("Replica is nil")
	}
	if rep.SourceHost != "127.0.0.11" || rep.SourcePort != 3306 || !rep.IORunning || rep.SQLRunning ||
		rep.LastSQLErrno != 1062 || rep.LastSQLError != "Duplicate entry" || rep.SecondsBehindSource != nil {
		t.Errorf("replica: %+v", rep)
	}
	if rep.Received.String() != "0-1-100" {
		t.Errorf("Received = %q, want the IO position 0-1-100", rep.Received)
	}
	if s.Uptime != 75*time.Second {
		t.Errorf("Uptime = %s, want 75s", s.Uptime)
	}
	want := SemiSyncStatus{ReplicaEnabled: true, WaitPoint: "AFTER_SYNC", TimeoutMS: 10000}
	if s.SemiSync != want {
		t.Errorf("semi-sync %+v, want %+v", s.SemiSync, want)
	}
	if d := diffLines(r.statements(t), []string{d.statusQuery, d.replicaStatusQuery,
		semiSyncVariablesQuery, semiSyncStatusQuery}); d != "" {
		t.Error(d)
	}
}

// TestStatusMariaDBOneTrip: on MariaDB, Status sends one statement (the two-result probe)
// and reads from it what statusInSteps reads with four or five. TestServerStatusOneTrip
// compares both on real servers.
func TestStatusMariaDBOneTrip(t *testing.T) {
	d := mariadbDialect
	probe := func(kv ...any) result {
		res := row(append([]any{"server_id", "2", "version", "10.11.19-MariaDB", "read_only", "1",
			"super_read_only", "0", "executed", "0-1-90", "require_secure_transport", "1",
			"rpl_semi_sync_master_enabled", "1", "rpl_semi_sync_slave_enabled", "0",
			"rpl_semi_sync_master_wait_point", "AFTER_SYNC", "rpl_semi_sync_master_timeout", "10000",
			"rpl_semi_sync_master_status", "ON", "rpl_semi_sync_master_clients", "2", "uptime", "75",
			"stalled_dumps", "1", "waiting_commits", "3"}, kv...)...)
		rep := replicaRow(
			"Master_Host", "127.0.0.11", "Master_Port", "3306",
			"Slave_IO_Running", "Yes", "Slave_SQL_Running", "No",
			"Last_IO_Errno", "0", "Last_IO_Error", "",
			"Last_SQL_Errno", "1062", "Last_SQL_Error", "Duplicate entry",
			"Gtid_IO_Pos", "0-1-100", "Seconds_Behind_Master", nil)
		res.next = &rep
		return res
	}
	r := newRecorder()
	r.results[d.statusProbe] = probe()
	s, err := r.open(t, FlavorMariaDB).Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if s.ServerID != 2 || s.Version != "10.11.19-MariaDB" || !s.ReadOnly || s.SuperReadOnly || s.Executed.String() != "0-1-90" ||
		!s.RequireSecureTransport || s.Uptime != 75*time.Second {
		t.Errorf("server: %+v executed %q", s, s.Executed)
	}
	if rep := s.Replica; rep == nil || rep.SourceHost != "127.0.0.11" || rep.SourcePort != 3306 || !rep.IORunning ||
		rep.SQLRunning || rep.LastSQLErrno != 1062 || rep.Received.String() != "0-1-100" {
		t.Errorf("replica: %+v", rep)
	}
	want := SemiSyncStatus{SourceEnabled: true, SourceActive: true, Clients: 2, WaitPoint: "AFTER_SYNC", TimeoutMS: 10000, StalledDumps: 1, WaitingCommits: 3}
	if s.SemiSync != want {
		t.Errorf("semi-sync %+v, want %+v", s.SemiSync, want)
	}
	if diff := diffLines(r.statements(t), []string{d.statusProbe}); diff != "" {
		t.Error(diff)
	}

	for _, tc := range []struct {
		name string
		res  result
		want string
	}{
		{"bad server id", probe("server_id", "x"), "server_id"},
		{"bad executed set", probe("executed", "0-1"), "executed GTID set"},
		{"bad timeout", probe("rpl_semi_sync_master_timeout", "soon"), "rpl_semi_sync_master_timeout"},
		{"no replica result", func() result { p := probe(); p.next = nil; return p }(), "no replica status"},
		{"no row", result{cols: []string{"server_id"}}, "0 rows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Later columns of the same name win in the row map: probe(k, v) overrides k.
			r := newRecorder()
			r.results[d.statusProbe] = tc.res
			_, err := r.open(t, FlavorMariaDB).Status(t.Context())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}

func TestStatusMySQL(t *testing.T) {
	r := newRecorder()
	d := mysqlDialect
	executed := uuidA + ":1-100,\n" + uuidB + ":1-3"
	r.results[d.statusQuery] = row("@@server_id", int64(3), "@@version", "8.4.6",
		"@@read_only", int64(1), "@@super_read_only", "ON", "@@GLOBAL.gtid_executed", executed, "@@require_secure_transport", "OFF")
	r.results[d.replicaStatusQuery] = replicaRow(
		"Source_Host", "db-0", "Source_Port", "3306",
		"Replica_IO_Running", "Connecting", "Replica_SQL_Running", "Yes",
		"Last_IO_Errno", "2003", "Last_IO_Error", "can't connect",
		"Last_SQL_Errno", "0", "Last_SQL_Error", "",
		"Retrieved_Gtid_Set", uuidA+":90-120", "Executed_Gtid_Set", executed,
		"Seconds_Behind_Source", "7")
	r.results[semiSyncVariablesQuery] = variables(
		"rpl_semi_sync_source_enabled", "ON", "rpl_semi_sync_replica_enabled", "OFF",
		"rpl_semi_sync_source_wait_point", "AFTER_SYNC", "rpl_semi_sync_source_timeout", "86400000")
	r.results[semiSyncStatusQuery] = variables(
		"Rpl_semi_sync_source_status", "ON", "Rpl_semi_sync_source_clients", "2")

	s, err := r.open(t, FlavorMySQL).Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if s.ServerID != 3 || !s.ReadOnly || !s.SuperReadOnly || s.Executed.String() != uuidA+":1-100,"+uuidB+":1-3" || s.RequireSecureTransport {
		t.Errorf("server: %+v executed %q", s, s.Executed)
	}
	rep := s.Replica
	if rep == nil || rep.SourceHost != "db-0" || rep.IORunning || !rep.SQLRunning || rep.LastIOErrno != 2003 ||
		rep.SecondsBehindSource == nil || *rep.SecondsBehindSource != 7 {
		t.Fatalf("replica: %+v", rep)
	}
	// Retrieved merged with executed: what the server has, applied or not.
	if got, want := rep.Received.String(), uuidA+":1-120,"+uuidB+":1-3"; got != want {
		t.Errorf("Received = %q, want %q", got, want)
	}
	want := SemiSyncStatus{SourceEnabled: true, SourceActive: true, Clients: 2, WaitPoint: "AFTER_SYNC", TimeoutMS: 86400000}
	if s.SemiSync != want {
		t.Errorf("semi-sync %+v, want %+v", s.SemiSync, want)
	}
}

// TestStatusStalledDumps: on a MariaDB source with semi-sync on, Status also
// counts dump threads stuck ending; with the source side off it does not ask.
func TestStatusStalledDumps(t *testing.T) {
	r := newRecorder()
	d := mariadbDialect
	r.results[d.statusQuery] = row("a", int64(1), "b", "10.11", "c", int64(0), "d", int64(0), "e", "0-1-1", "f", int64(0))
	r.results[semiSyncVariablesQuery] = variables("rpl_semi_sync_master_enabled", "ON")
	r.results[semiSyncStatusQuery] = variables("Rpl_semi_sync_master_status", "ON", "Rpl_semi_sync_master_clients", "0")
	r.results[d.stalledDumps] = row("n", "1")
	r.results[d.waitingCommits] = row("n", "2")
	s, err := r.open(t, FlavorMariaDB).statusInSteps(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if s.SemiSync.StalledDumps != 1 || s.SemiSync.WaitingCommits != 2 || !s.SemiSync.SourceEnabled {
		t.Errorf("semi-sync %+v, want SourceEnabled, StalledDumps 1 and WaitingCommits 2", s.SemiSync)
	}
	if diff := diffLines(r.statements(t), []string{d.statusQuery, d.replicaStatusQuery,
		semiSyncVariablesQuery, semiSyncStatusQuery, d.waitingCommits, d.stalledDumps}); diff != "" {
		t.Error(diff)
	}
}

// TestStatusNoReplica covers a fresh server: no replication row, and (MySQL
// without the semi-sync plugins) no semi-sync variables.
func TestStatusNoReplica(t *testing.T) {
	r := newRecorder()
	r.results[mysqlDialect.statusQuery] = row("a", int64(1), "b", "8.4.6", "c", int64(0), "d", int64(0), "e", "", "f", int64(0))
	s, err := r.open(t, FlavorMySQL).Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if s.Replica != nil || s.SemiSync != (SemiSyncStatus{}) || !s.Executed.IsEmpty() {
		t.Errorf("got %+v", s)
	}
}

func TestStatusErrors(t *testing.T) {
	good := row("a", int64(1), "b", "10.11", "c", int64(0), "d", int64(0), "e", "0-1-1", "f", int64(0))
	tests := []struct {
		name    string
		results map[string]result
		want    string
	}{
		{"bad executed set", map[string]result{
			mariadbDialect.statusQuery: row("a", int64(1), "b", "10.11", "c", int64(0), "d", int64(0), "e", "0-1", "f", int64(0)),
		}, "executed GTID set"},
		{"missing column", map[string]result{
			mariadbDialect.statusQuery:        good,
			mariadbDialect.replicaStatusQuery: row("Master_Host", "x"),
		}, "column Master_Port missing"},
		{"bad received set", map[string]result{
			mariadbDialect.statusQuery: good,
			mariadbDialect.replicaStatusQuery: row("Master_Host", "h", "Master_Port", "3306",
				"Slave_IO_Running", "Yes", "Slave_SQL_Running", "Yes", "Last_IO_Errno", "0", "Last_IO_Error", "",
				"Last_SQL_Errno", "0", "Last_SQL_Error", "", "Gtid_IO_Pos", "junk", "Seconds_Behind_Master", "0"),
		}, "column Gtid_IO_Pos"},
		{"bad timeout", map[string]result{
			mariadbDialect.statusQuery: good,
			semiSyncVariablesQuery:     variables("rpl_semi_sync_master_timeout", "soon"),
		}, "rpl_semi_sync_master_timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRecorder()
			r.results = tc.results
			_, err := r.open(t, FlavorMariaDB).statusInSteps(t.Context())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}
