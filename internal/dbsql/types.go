package dbsql

import (
	"context"
	"crypto/tls"
	"errors"
	"time"
)

// ErrWaitTimeout is returned (wrapped) by [Instance.WaitForGTID] when the
// server did not apply the set within the timeout.
var ErrWaitTimeout = errors.New("dbsql: timed out waiting for GTID set")

// Status is what one server reports about itself in one observation.
type Status struct {
	// ServerID is @@server_id.
	ServerID uint32
	// Version is @@version, e.g. "10.11.19-MariaDB-0+deb12u1" or "8.4.6".
	Version string
	// Uptime is how long the server has run (the Uptime status variable,
	// whole seconds). A server that started after some point in time was
	// restarted since, possibly on a new, empty data directory.
	Uptime time.Duration
	// ReadOnly is @@read_only.
	ReadOnly bool
	// SuperReadOnly is @@super_read_only on MySQL; always false on MariaDB,
	// which has no such variable.
	SuperReadOnly bool
	// RequireSecureTransport is @@require_secure_transport: plain TCP logins are refused.
	RequireSecureTransport bool
	// Executed is every transaction this server has applied or written:
	// @@gtid_binlog_pos on MariaDB (see the package documentation for why) and
	// @@gtid_executed on MySQL. Use it for errant-GTID detection and to find
	// the most advanced server.
	Executed GTIDSet
	// Replica is nil when no replication source is configured.
	Replica *ReplicaStatus
	// SemiSync is the semi-synchronous replication state. All fields are zero
	// on a MySQL server without the semi-sync plugins loaded.
	SemiSync SemiSyncStatus
}

// ReplicaStatus is the state of the replication connection (SHOW SLAVE STATUS
// on MariaDB, SHOW REPLICA STATUS on MySQL).
type ReplicaStatus struct {
	// SourceHost and SourcePort name the configured source.
	SourceHost string
	SourcePort int
	// IORunning and SQLRunning are true only when the thread reports "Yes"
	// ("Connecting" and "Preparing" count as not running).
	IORunning, SQLRunning bool
	// LastIOErrno/LastIOError and LastSQLErrno/LastSQLError are the last
	// receiver and applier errors (0 and "" when none).
	LastIOErrno  int
	LastIOError  string
	LastSQLErrno int
	LastSQLError string
	// Received is every transaction the server has, applied or not: on
	// MariaDB Gtid_IO_Pos merged with Executed (per domain, the higher
	// sequence number, so a stale IO position after a restart does not hide
	// applied transactions); on MySQL Retrieved_Gtid_Set merged with Executed.
	// Choose a failover candidate by this, never by Executed.
	Received GTIDSet
	// Progress changes whenever the receiver gets anything from its source, an event
	// or a heartbeat (source log file, read position and heartbeat counter). Unchanged over
	// more than the heartbeat period (HeartbeatPeriod) means the source sends nothing, although the
	// receiver may still show as running: a hung or cut-off source is only noticed by the
	// receiver after slave_net_timeout. "" when the flavor reports no heartbeat counter
	// (MySQL's SHOW REPLICA STATUS), where an idle source would look silent.
	Progress string
	// HeartbeatPeriod is how often an idle source sends this receiver a heartbeat (0 when
	// the flavor does not report it).
	HeartbeatPeriod time.Duration
	// SecondsBehindSource is nil when the server reports NULL (applier or
	// receiver not running).
	SecondsBehindSource *int64
	// SSL is true when the replication connection is configured to use TLS; SSLCAFile is
	// the CA file it verifies the source with and SSLVerifyName whether it also checks the
	// source's name.
	SSL           bool
	SSLCAFile     string
	SSLVerifyName bool
}

// SemiSyncStatus is the semi-synchronous replication state of a server.
type SemiSyncStatus struct {
	// SourceEnabled is rpl_semi_sync_master_enabled (MariaDB) or
	// rpl_semi_sync_source_enabled (MySQL).
	SourceEnabled bool
	// ReplicaEnabled is rpl_semi_sync_slave_enabled or
	// rpl_semi_sync_replica_enabled.
	ReplicaEnabled bool
	// SourceActive is the Rpl_semi_sync_master_status (MySQL:
	// Rpl_semi_sync_source_status) status variable. False while SourceEnabled
	// is true means the source fell back to asynchronous replication.
	SourceActive bool
	// Clients is the number of connected semi-sync replicas.
	Clients int
	// WaitPoint is AFTER_SYNC or AFTER_COMMIT.
	WaitPoint string
	// TimeoutMS is the fallback timeout in milliseconds.
	TimeoutMS int64
	// StalledDumps counts binary-log dump threads (a replica's connection on
	// its source) that have been stuck ending for at least two seconds in the
	// state "Waiting to finalize termination". On MariaDB this is the
	// signature of a semi-sync ack-receiver stall: the ending dump thread
	// waits for the ack receiver, which sleeps until a replica connects, and
	// the same replica's reconnection waits for the ending thread. Nothing
	// replicates until the source side is restarted (RestartSemiSyncSource).
	// Always 0 on MySQL, which does not show it.
	StalledDumps int
	// WaitingCommits counts client sessions whose commit has waited at least two
	// seconds for a replica's acknowledgement: what the clients feel when no replica
	// acknowledges, also while the primary still counts replicas that no longer answer.
	WaitingCommits int
}

// Source is where a replica replicates from.
type Source struct {
	Host     string
	Port     int
	User     string
	Password string
	// TLS, when set, makes the replication connection use TLS; nil: a plain connection.
	TLS *SourceTLS
}

// SourceTLS is how a replica verifies its source over TLS.
type SourceTLS struct {
	// CAFile is the CA certificate file, as the replica's server sees it, that the source's
	// certificate must chain to.
	CAFile string
	// VerifyName also checks Host against the source's certificate. Only where Host is a
	// name the certificate holds (a pod DNS name); a pod IP is not in it, so replicas
	// addressed by IP verify the CA alone.
	VerifyName bool
}

// Account is a user name and password. Accounts are created for host '%'.
type Account struct {
	User, Password string
}

// Accounts are the accounts Dolphin keeps on every server.
type Accounts struct {
	// Operator runs everything Dolphin does (ALL PRIVILEGES WITH GRANT OPTION).
	Operator Account
	// Replication is what replicas connect to their source with.
	Replication Account
	// Monitor has only what metrics and health checks need.
	Monitor Account
	// Schema applies application users and databases (MySQLUser, MySQLDatabase) on the
	// primary: every privilege, with grant option, except the ones that bypass read_only, so
	// that a server that is not the writable primary refuses its statements. Not created
	// when User is empty.
	Schema Account
	// Root, when its password is set, is the password given to root@localhost: local
	// (socket) access from inside the instance's pod for emergencies. Dolphin never logs
	// in with it. An empty password leaves root@localhost as it is.
	Root Account
}

// Instance is one MySQL-family server.
//
// Every statement runs on a connection that has executed
// SET SESSION sql_log_bin=0, so nothing the operator does creates a GTID.
// Methods are safe for concurrent use. Each statement is bounded by
// Config.QueryTimeout (WaitForGTID by its own timeout on top).
type Instance interface {
	// Status observes the server.
	Status(ctx context.Context) (*Status, error)
	// ConfigureReplication (re)points the server at src with GTID
	// auto-positioning (MariaDB MASTER_USE_GTID=slave_pos, MySQL
	// SOURCE_AUTO_POSITION=1), a connect retry of 1 s and a heartbeat of 1 s,
	// and starts replication: STOP, CHANGE, START. Calling it again with the
	// same src leaves the same state (the threads restart).
	ConfigureReplication(ctx context.Context, src Source) error
	// StartReplication starts both replication threads.
	StartReplication(ctx context.Context) error
	// StopReplicationIO stops only the receiver thread, so the server applies
	// what it has but receives nothing more (fencing during failover).
	StopReplicationIO(ctx context.Context) error
	// StopReplication stops both replication threads.
	StopReplication(ctx context.Context) error
	// ResetReplication stops replication and forgets the source entirely
	// (RESET SLAVE ALL / RESET REPLICA ALL): the server is no replica after it.
	ResetReplication(ctx context.Context) error
	// WaitForGTID waits until the server has applied every transaction of set
	// or timeout (> 0) elapses; then it returns an error wrapping
	// ErrWaitTimeout. On MariaDB it waits on @@gtid_slave_pos
	// (MASTER_GTID_WAIT), so use it on replicas for transactions they receive.
	// An empty set returns at once without a statement.
	WaitForGTID(ctx context.Context, set GTIDSet, timeout time.Duration) error
	// SetReadOnly sets read_only (and on MySQL super_read_only, which also
	// stops accounts with SUPER). MariaDB has no super_read_only: accounts
	// with READ_ONLY ADMIN (such as root) can still write.
	SetReadOnly(ctx context.Context, readOnly bool) error
	// SetSemiSyncSource turns the semi-sync source (master) side on or off.
	SetSemiSyncSource(ctx context.Context, enabled bool) error
	// RestartSemiSyncSource turns the semi-sync source side off and on again.
	// That restarts the ack-receiver thread, which ends a stall (see
	// SemiSyncStatus.StalledDumps). Turning it off tells every transaction
	// waiting for an acknowledgement that it committed, so with
	// disconnectWaiting the connections of those transactions are closed first:
	// their clients get an error instead (the outcome unknown to them, never
	// "committed"). A commit that begins to wait between the two statements is
	// still released; the caller records that risk (topology.AckedAlone).
	RestartSemiSyncSource(ctx context.Context, disconnectWaiting bool) error
	// SetSemiSyncTimeout sets how long the primary waits for a replica's
	// acknowledgement before it falls back to asynchronous replication.
	SetSemiSyncTimeout(ctx context.Context, ms int64) error
	// SetSemiSyncReplica turns the semi-sync replica side on or off. It takes
	// effect when the receiver thread next connects (ConfigureReplication or
	// StartReplication after a stop).
	SetSemiSyncReplica(ctx context.Context, enabled bool) error
	// KillConnections kills every client connection except replication and
	// system threads, the connection it runs on and idle connections of
	// exceptUsers. Pass the operator's own user to spare the pool's other
	// connections; a connection of that user running a statement (a client
	// wrongly using the operator account, whose commit may be waiting for a
	// semi-sync acknowledgement) is killed all the same.
	KillConnections(ctx context.Context, exceptUsers []string) error
	// KillClientConnections kills every client connection except replication and system
	// threads, the connection it runs on and every connection of spareUsers, idle or busy:
	// for a server that is no longer the primary, whose clients must go while Dolphin's own
	// work there (mariadb-upgrade, a backup, a clone) goes on.
	KillClientConnections(ctx context.Context, spareUsers []string) error
	// KillBinlogReaders kills the connections reading the binary log (Binlog Dump threads:
	// replicas and archivers reading from this server).
	KillBinlogReaders(ctx context.Context) error
	// EnsureAccounts creates or updates the three accounts (host '%') with
	// their passwords and grants, sets root@localhost's password (Accounts.Root),
	// and drops passwordless root accounts other than root@localhost and
	// anonymous accounts left by the installer. It is idempotent, and it is how
	// passwords are rotated: run it as an account that still logs in (with the
	// old password) and every account gets the new one. Accounts dropped may include the one this Instance logged in
	// with (install-time root@127.0.0.1): open a new Instance as the operator
	// afterwards.
	EnsureAccounts(ctx context.Context, a Accounts) error
	// SeedGTIDForRejoin prepares a former primary to replicate: on MariaDB it
	// stops replication and sets gtid_slave_pos to gtid_binlog_pos, so that
	// MASTER_USE_GTID=slave_pos continues after its own last transaction. On
	// MySQL it does nothing (gtid_executed already covers it).
	SeedGTIDForRejoin(ctx context.Context) error
	// GlobalVariable reads SELECT @@GLOBAL.<name> ("" for NULL); name is a variable name
	// (lower case, digits, underscores).
	GlobalVariable(ctx context.Context, name string) (string, error)
	// SetGlobalVariables runs SET GLOBAL name = literal for each entry, in name order:
	// literals as sysvars.SetGlobalValue makes them, or DEFAULT. Every entry is tried;
	// the error names each one the server refused.
	SetGlobalVariables(ctx context.Context, vars map[string]string) error
	// SetRequireSecureTransport turns require_secure_transport on or off: with it on, the
	// server refuses every TCP login that does not use TLS (the Unix socket still works).
	SetRequireSecureTransport(ctx context.Context, on bool) error
	// ReloadTLS makes the server load its certificate files again (FLUSH SSL on MariaDB,
	// ALTER INSTANCE RELOAD TLS on MySQL) without a restart; open sessions keep theirs.
	ReloadTLS(ctx context.Context) error
	// Close closes the connection pool.
	Close() error
}

// Config says how to reach one server.
type Config struct {
	// Flavor selects the SQL dialect.
	Flavor Flavor
	// Addr is host:port.
	Addr string
	// User and Password log in; the account needs the privilege to set
	// sql_log_bin (SUPER, or BINLOG ADMIN on MariaDB, SYSTEM_VARIABLES_ADMIN on
	// MySQL) besides what the operations need.
	User, Password string
	// ConnectTimeout bounds dialing and the handshake (default 3 s).
	ConnectTimeout time.Duration
	// QueryTimeout bounds each statement (default 10 s).
	QueryTimeout time.Duration
	// TLS, when set, is used for the connection.
	TLS *tls.Config
}
