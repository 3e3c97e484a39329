package dbsql

import (
	"fmt"
	"math"
	"time"
)

// dialect is the SQL text and column names of one flavor. Everything else
// (control flow, parsing, error handling) is shared.
type dialect struct {
	flavor    Flavor
	parseGTID func(string) (GTIDSet, error)

	// sessionInit runs on every new connection before it is used.
	sessionInit []string

	// statusQuery returns server_id, version, read_only, super_read_only,
	// executed GTID set, require_secure_transport, in that order.
	statusQuery string
	// receiverThreads lists the process ids of the replication receiver threads
	// ("" when the flavor's STOP alone is used).
	receiverThreads string
	// beforeStopIO runs before a receiver is stopped to fence it off a lost source.
	beforeStopIO []string
	// statusProbe reads the whole Status in one round trip: two statements, a row of the
	// server variables (columns named as statusQuery's are in probeColumns), the semi-sync
	// variables and status variables with Uptime (columns named by their lower-case variable
	// names) and stalled_dumps, then replicaStatusQuery. "" where Status reads in steps.
	statusProbe string
	// replicaStatusQuery is SHOW SLAVE/REPLICA STATUS, read by column name.
	replicaStatusQuery string
	replica            replicaColumns
	semiSync           semiSyncNames

	// changeSource takes host, port, user, password, then the TLS settings (use TLS 0/1, CA
	// file, verify the source's name 0/1) as arguments.
	changeSource    string
	startReplica    string
	stopReplica     string
	stopReplicaIO   string
	resetReplicaAll string
	// resetReplica discards the relay logs and their info but keeps the source's settings
	// ("" when the flavor is not known to need it).
	resetReplica string

	// waitForGTID takes the set and waitTimeout(timeout); it returns 0 when
	// the set was applied.
	waitForGTID string
	waitTimeout func(time.Duration) any

	readOnlyOn, readOnlyOff []string
	seedGTIDForRejoin       []string

	// processList returns ID, USER, COMMAND of every thread but our own.
	processList string
	// stalledDumps counts dump threads stuck ending (see
	// SemiSyncStatus.StalledDumps); "" where the flavor has no such state.
	stalledDumps string
	// waitingCommits counts sessions waiting for a semi-sync acknowledgement for 2 s or
	// more (SemiSyncStatus.WaitingCommits); the probe has it as waiting_commits.
	waitingCommits string

	replicationPrivileges string
	monitorPrivileges     string
	// schemaPrivileges are the schema account's (with grant option): what application
	// accounts may be granted, CREATE USER, and nothing that bypasses read_only or
	// administers the server.
	schemaPrivileges string
}

// replicaColumns names the SHOW SLAVE/REPLICA STATUS columns Status reads.
type replicaColumns struct {
	host, port, ioRunning, sqlRunning    string
	ioErrno, ioError, sqlErrno, sqlError string
	received, secondsBehind              string
	// sourceLogFile, readSourcePos and heartbeats change whenever the receiver gets
	// anything from its source, an event or a heartbeat: Status folds them into
	// ReplicaStatus.Progress (left "" when the flavor has no heartbeat column).
	sourceLogFile, readSourcePos, heartbeats string
	// heartbeatPeriod is the configured heartbeat period in seconds ("" when not reported).
	heartbeatPeriod string
	// connectionName is the column that names a replication connection in a status
	// query listing all of them ("" when the query lists only the default one).
	connectionName string
	// sslAllowed, sslCAFile and sslVerifyName describe the TLS settings of the replication
	// connection (read when present).
	sslAllowed, sslCAFile, sslVerifyName string
}

// semiSyncNames names the semi-sync system and status variables.
type semiSyncNames struct {
	sourceEnabled, replicaEnabled, waitPoint, timeout string // system variables
	sourceStatus, clients                             string // status variables
}

const (
	// SHOW … LIKE patterns are case-insensitive on both flavors.
	semiSyncVariablesQuery = "SHOW GLOBAL VARIABLES LIKE 'rpl_semi_sync%'"
	// semiSyncStatusQuery also reads Uptime (Status.Uptime) in the same round trip.
	semiSyncStatusQuery = "SHOW GLOBAL STATUS WHERE Variable_name LIKE 'Rpl_semi_sync%' OR Variable_name = 'Uptime'"
	// lockdownQuery finds passwordless accounts left by the installer.
	lockdownQuery = "SELECT User, Host FROM mysql.user WHERE " +
		"((User = 'root' AND Host <> 'localhost') OR User = '') AND authentication_string = ''"
	createUser = "CREATE USER IF NOT EXISTS ?@'%' IDENTIFIED BY ?"
	alterUser  = "ALTER USER ?@'%' IDENTIFIED BY ?"
	// alterLocalUser sets the password of a local account that may have been removed.
	alterLocalUser = "ALTER USER IF EXISTS ?@'localhost' IDENTIFIED BY ?"
	dropUser       = "DROP USER IF EXISTS ?@?"
	grantAll       = "GRANT ALL PRIVILEGES ON *.* TO ?@'%' WITH GRANT OPTION"
	killConn       = "KILL CONNECTION ?"
	sqlLogBinOff   = "SET SESSION sql_log_bin=0"
	// flushSSL reloads the server's certificate files (MariaDB 10.4+; MySQL has ALTER
	// INSTANCE RELOAD TLS instead).
	flushSSL = "FLUSH SSL"
)

// waitingForAckState matches the sessions whose commit waits for a semi-sync acknowledgement
// (MariaDB: "Waiting for semi-sync ACK from slave", MySQL: "… from replica").
const waitingForAckState = "STATE LIKE 'Waiting for semi-sync ACK from %'"

// waitingCommitsQuery counts the sessions whose commit has waited 2 s or more for a semi-sync
// acknowledgement.
const waitingCommitsQuery = "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE " + waitingForAckState + " AND TIME >= 2"

// HeartbeatPeriodMariaDB is the heartbeat period (seconds) MariaDB replicas ask their source
// for: an idle source sends one this often, so a receiver that got nothing for longer is
// hearing nothing from a hung or cut-off source (docs/design/0035).
const HeartbeatPeriodMariaDB = "0.5"

var mariadbDialect = &dialect{
	flavor:      FlavorMariaDB,
	parseGTID:   ParseMariaDBGTID,
	sessionInit: []string{sqlLogBinOff},
	statusQuery: "SELECT @@server_id, @@version, @@read_only, 0, @@gtid_binlog_pos, @@require_secure_transport",
	statusProbe: "SELECT @@server_id AS server_id, @@version AS version, @@read_only AS read_only, 0 AS super_read_only, " +
		"@@gtid_binlog_pos AS executed, @@require_secure_transport AS require_secure_transport, " +
		"@@rpl_semi_sync_master_enabled AS rpl_semi_sync_master_enabled, @@rpl_semi_sync_slave_enabled AS rpl_semi_sync_slave_enabled, " +
		"@@rpl_semi_sync_master_wait_point AS rpl_semi_sync_master_wait_point, @@rpl_semi_sync_master_timeout AS rpl_semi_sync_master_timeout, " +
		"st.rpl_semi_sync_master_status, st.rpl_semi_sync_master_clients, st.uptime, " +
		"(SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE = 'Waiting to finalize termination' AND TIME >= 2) AS stalled_dumps, " +
		"(SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE " + waitingForAckState + " AND TIME >= 2) AS waiting_commits " +
		"FROM (SELECT MAX(IF(VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_STATUS', VARIABLE_VALUE, NULL)) AS rpl_semi_sync_master_status, " +
		"MAX(IF(VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_CLIENTS', VARIABLE_VALUE, NULL)) AS rpl_semi_sync_master_clients, " +
		"MAX(IF(VARIABLE_NAME = 'UPTIME', VARIABLE_VALUE, NULL)) AS uptime " +
		"FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME IN ('RPL_SEMI_SYNC_MASTER_STATUS', 'RPL_SEMI_SYNC_MASTER_CLIENTS', 'UPTIME')) AS st; " +
		"SHOW ALL SLAVES STATUS",
	// SHOW ALL SLAVES STATUS is SHOW SLAVE STATUS plus the heartbeat counter, one row per
	// connection: Dolphin's is the default one, named "".
	replicaStatusQuery: "SHOW ALL SLAVES STATUS",
	replica: replicaColumns{
		sourceLogFile: "Master_Log_File", readSourcePos: "Read_Master_Log_Pos",
		heartbeats: "Slave_received_heartbeats", heartbeatPeriod: "Slave_heartbeat_period",
		connectionName: "Connection_name", host: "Master_Host", port: "Master_Port",
		ioRunning: "Slave_IO_Running", sqlRunning: "Slave_SQL_Running",
		ioErrno: "Last_IO_Errno", ioError: "Last_IO_Error",
		sqlErrno: "Last_SQL_Errno", sqlError: "Last_SQL_Error",
		received: "Gtid_IO_Pos", secondsBehind: "Seconds_Behind_Master",
		sslAllowed: "Master_SSL_Allowed", sslCAFile: "Master_SSL_CA_File", sslVerifyName: "Master_SSL_Verify_Server_Cert",
	},
	semiSync: semiSyncNames{
		sourceEnabled: "rpl_semi_sync_master_enabled", replicaEnabled: "rpl_semi_sync_slave_enabled",
		waitPoint: "rpl_semi_sync_master_wait_point", timeout: "rpl_semi_sync_master_timeout",
		sourceStatus: "Rpl_semi_sync_master_status", clients: "Rpl_semi_sync_master_clients",
	},
	changeSource: "CHANGE MASTER TO MASTER_HOST=?, MASTER_PORT=?, MASTER_USER=?, MASTER_PASSWORD=?, " +
		"MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1, MASTER_HEARTBEAT_PERIOD=" + HeartbeatPeriodMariaDB + ", " +
		"MASTER_SSL=?, MASTER_SSL_CA=?, MASTER_SSL_VERIFY_SERVER_CERT=?",
	startReplica:  "START SLAVE",
	stopReplica:   "STOP SLAVE",
	stopReplicaIO: "STOP SLAVE IO_THREAD",
	// Killed before STOP SLAVE IO_THREAD (see StopReplicationIO).
	receiverThreads: "SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND = 'Slave_IO'",
	// A semi-sync receiver that stops first connects to its source to KILL its dump thread,
	// with this timeout (default 5 s): against a hung or cut-off source STOP waited for it
	// until its own 2 s re-signal interrupted it. 1 s is the shortest (0 means no timeout).
	beforeStopIO:    []string{"SET GLOBAL rpl_semi_sync_slave_kill_conn_timeout=1"},
	resetReplicaAll: "RESET SLAVE ALL",
	resetReplica:    "RESET SLAVE",
	// MASTER_GTID_WAIT returns 0, or -1 on timeout; fractional seconds work.
	waitForGTID:       "SELECT MASTER_GTID_WAIT(?, ?)",
	waitTimeout:       func(d time.Duration) any { return d.Seconds() },
	readOnlyOn:        []string{"SET GLOBAL read_only=ON"},
	readOnlyOff:       []string{"SET GLOBAL read_only=OFF"},
	seedGTIDForRejoin: []string{"STOP SLAVE", "SET GLOBAL gtid_slave_pos=@@GLOBAL.gtid_binlog_pos"},
	processList:       "SELECT ID, USER, COMMAND FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID()",
	waitingCommits:    waitingCommitsQuery,
	stalledDumps: "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST " +
		"WHERE STATE = 'Waiting to finalize termination' AND TIME >= 2",
	// BINLOG MONITOR and REPLICATION SLAVE ADMIN let the account run the
	// semi-sync and GTID checks MariaDB replicas issue on connect.
	replicationPrivileges: "REPLICATION SLAVE, REPLICATION SLAVE ADMIN, BINLOG MONITOR",
	monitorPrivileges:     "PROCESS, BINLOG MONITOR, SLAVE MONITOR",
	// Without READ_ONLY ADMIN (or SUPER, which no longer includes it since 10.11.0),
	// read_only stops every write: measured, CREATE USER, CREATE DATABASE and GRANT answer 1290.
	schemaPrivileges: "SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, REFERENCES, INDEX, ALTER, " +
		"CREATE TEMPORARY TABLES, LOCK TABLES, EXECUTE, CREATE VIEW, SHOW VIEW, CREATE ROUTINE, ALTER ROUTINE, " +
		"EVENT, TRIGGER, DELETE HISTORY, PROCESS, SHOW DATABASES, REPLICATION SLAVE, BINLOG MONITOR, SLAVE MONITOR, CREATE USER",
}

var mysqlDialect = &dialect{
	flavor:             FlavorMySQL,
	waitingCommits:     waitingCommitsQuery,
	parseGTID:          ParseMySQLGTID,
	sessionInit:        []string{sqlLogBinOff},
	statusQuery:        "SELECT @@server_id, @@version, @@read_only, @@super_read_only, @@GLOBAL.gtid_executed, @@require_secure_transport",
	replicaStatusQuery: "SHOW REPLICA STATUS",
	replica: replicaColumns{
		// No heartbeat counter in SHOW REPLICA STATUS: Progress stays "" (unknown).
		host: "Source_Host", port: "Source_Port",
		ioRunning: "Replica_IO_Running", sqlRunning: "Replica_SQL_Running",
		ioErrno: "Last_IO_Errno", ioError: "Last_IO_Error",
		sqlErrno: "Last_SQL_Errno", sqlError: "Last_SQL_Error",
		received: "Retrieved_Gtid_Set", secondsBehind: "Seconds_Behind_Source",
		sslAllowed: "Source_SSL_Allowed", sslCAFile: "Source_SSL_CA_File", sslVerifyName: "Source_SSL_Verify_Server_Cert",
	},
	semiSync: semiSyncNames{
		sourceEnabled: "rpl_semi_sync_source_enabled", replicaEnabled: "rpl_semi_sync_replica_enabled",
		waitPoint: "rpl_semi_sync_source_wait_point", timeout: "rpl_semi_sync_source_timeout",
		sourceStatus: "Rpl_semi_sync_source_status", clients: "Rpl_semi_sync_source_clients",
	},
	// GET_SOURCE_PUBLIC_KEY lets caching_sha2_password (the 8.4 default)
	// authenticate without TLS.
	changeSource: "CHANGE REPLICATION SOURCE TO SOURCE_HOST=?, SOURCE_PORT=?, SOURCE_USER=?, SOURCE_PASSWORD=?, " +
		"SOURCE_AUTO_POSITION=1, SOURCE_CONNECT_RETRY=1, SOURCE_HEARTBEAT_PERIOD=1, GET_SOURCE_PUBLIC_KEY=1, " +
		"SOURCE_SSL=?, SOURCE_SSL_CA=?, SOURCE_SSL_VERIFY_SERVER_CERT=?",
	startReplica:    "START REPLICA",
	stopReplica:     "STOP REPLICA",
	stopReplicaIO:   "STOP REPLICA IO_THREAD",
	resetReplicaAll: "RESET REPLICA ALL",
	// WAIT_FOR_EXECUTED_GTID_SET returns 0, or 1 on timeout. Its timeout is
	// documented in whole seconds and 0 means "wait forever", so round up.
	waitForGTID: "SELECT WAIT_FOR_EXECUTED_GTID_SET(?, ?)",
	waitTimeout: func(d time.Duration) any { return int64(math.Ceil(d.Seconds())) },
	// super_read_only=ON implies read_only=ON and read_only=OFF implies
	// super_read_only=OFF; both are set explicitly, in an order that is valid
	// on its own.
	readOnlyOn:            []string{"SET GLOBAL read_only=ON", "SET GLOBAL super_read_only=ON"},
	readOnlyOff:           []string{"SET GLOBAL super_read_only=OFF", "SET GLOBAL read_only=OFF"},
	seedGTIDForRejoin:     nil,
	processList:           "SELECT ID, USER, COMMAND FROM performance_schema.processlist WHERE ID <> CONNECTION_ID()",
	replicationPrivileges: "REPLICATION SLAVE",
	monitorPrivileges:     "PROCESS, REPLICATION CLIENT",
	// No SUPER or CONNECTION_ADMIN, which pass read_only (super_read_only stops even them).
	// Not verified here: no MySQL server.
	schemaPrivileges: "SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, REFERENCES, INDEX, ALTER, " +
		"CREATE TEMPORARY TABLES, LOCK TABLES, EXECUTE, CREATE VIEW, SHOW VIEW, CREATE ROUTINE, ALTER ROUTINE, " +
		"EVENT, TRIGGER, PROCESS, SHOW DATABASES, REPLICATION SLAVE, REPLICATION CLIENT, CREATE USER",
}

func dialectFor(f Flavor) (*dialect, error) {
	switch f {
	case FlavorMariaDB:
		return mariadbDialect, nil
	case FlavorMySQL:
		return mysqlDialect, nil
	default:
		return nil, fmt.Errorf("dbsql: unknown flavor %q (want %q or %q)", f, FlavorMariaDB, FlavorMySQL)
	}
}

func onOff(b bool) string {
	if b {
		return "ON"
	}
	return "OFF"
}
