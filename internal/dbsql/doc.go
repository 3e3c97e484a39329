// Package dbsql is Dolphin's one small interface to a MySQL-family server.
//
// An [Instance] is a pooled connection to one server (MariaDB 10.11/11.4 or
// MySQL 8.4). It reads the state the topology engine decides on ([Status]) and
// runs the few administrative operations a failover, switchover or rejoin
// needs. The SQL that differs between the flavors lives in one internal
// dialect table per flavor, so the two flavors share all control flow.
//
// # No errant GTIDs from the operator
//
// Every connection of an Instance's pool runs SET SESSION sql_log_bin=0 before
// it is used (a connection that cannot do so is discarded, so the operator
// never runs a statement that could be written to the binary log). Accounts
// are therefore created on every server independently, and nothing the
// operator does shows up as a transaction of its own in a GTID set.
//
// # Which position is "executed"
//
// On MariaDB, [Status.Executed] is @@gtid_binlog_pos, not @@gtid_current_pos or
// @@gtid_slave_pos. With log_slave_updates=ON (required by Dolphin's my.cnf) the
// binary log holds both the transactions the server replicated and any it wrote
// itself, so it is the one position that exposes errant local writes (a write
// on a replica shows up there but never in gtid_slave_pos) and the right one to
// compare when choosing the most advanced server. On MySQL it is
// @@gtid_executed.
//
// MariaDB GTID positions keep one sequence number per replication domain, so a
// MariaDB [GTIDSet] compares per domain by sequence number, as MariaDB itself
// does in gtid_strict_mode. Two servers that diverged with the same sequence
// numbers in a domain cannot be told apart from positions alone; the server
// detects that case itself when it replicates (error 1236 in strict mode).
package dbsql
