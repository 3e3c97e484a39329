// Package sqlobjects applies declared application users, grants and databases to a
// MySQL-family server.
//
// It is split like the topology engine: Plan* functions are pure (what the server has, as
// observed, and what was declared, in; the statements that close the gap, out) and are
// table-tested statement by statement; Server observes and applies, and is tested against
// real servers. The statements are written to the binary log on purpose: application
// accounts and databases are data, and replicate from the primary to every instance (unlike
// Dolphin's own accounts, which each server keeps with sql_log_bin=0).
//
// Statements run as Dolphin's schema account, which holds every privilege except the one
// that bypasses read_only (READ_ONLY ADMIN on MariaDB): a server that is not the writable
// primary refuses them (ErrReadOnly), so they can never create errant transactions on a
// fenced instance.
package sqlobjects
