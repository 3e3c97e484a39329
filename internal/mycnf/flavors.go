package mycnf

import (
	"fmt"
	"slices"
	"strconv"
)

// kind says how a default treats a user setting of the same key.
type kind int

const (
	// managed: Dolphin's value always; the key must be reserved.
	managed kind = iota
	// tunable: a user setting replaces Dolphin's value.
	tunable
	// additive: a user setting is written as well, after Dolphin's
	// (plugin_load_add, which the server accumulates).
	additive
)

// setting is one line of the [mysqld] section, with comment lines above it.
type setting struct {
	key     string
	value   string
	kind    kind
	comment []string
}

func m(key, value string, comment ...string) setting {
	return setting{key: key, value: value, kind: managed, comment: comment}
}

func t(key, value string, comment ...string) setting {
	return setting{key: key, value: value, kind: tunable, comment: comment}
}

// semiSyncTimeoutMS is how long a primary waits for a replica's ACK before it
// falls back to asynchronous replication, as a server starts. The topology engine sets
// the value spec.durability asks for (Required: never, Preferred: 30 s) before it turns the
// source side on (topology.Settings.SemiSyncTimeoutMS); my.cnf turns the source side off,
// so this value is never in force on a primary.
const semiSyncTimeoutMS = "30000"

var semiSyncTimeoutWhy = []string{
	"Long on purpose: when it expires, the primary silently falls back to async",
	"replication and writes it has acknowledged can be lost in a failover (in tests",
	"500 ms lost thousands of acked writes, 10 s lost none: writes stalled instead).",
	"It must outlast a failover.",
}

// common returns the settings both flavors share.
func common() []setting {
	return []setting{
		m("bind_address", "0.0.0.0", "Clients reach the pod through its Services, on any interface."),
		t("binlog_expire_logs_seconds", "604800",
			"Purge binary logs after 7 days, or they fill the disk; keep longer than the backup",
			"interval when point-in-time recovery relies on them."),
		t("character_set_server", "utf8mb4"),
		m("datadir", DataDir),
		t("innodb_buffer_pool_size", "128M",
			"Tunable: size it to the container's memory limit in spec.mysqlConfig."),
		// Fixed names instead of host-name based defaults, so that they do not
		// change when a data directory moves to another pod.
		m("log_bin", "binlog"),
		m("log_bin_index", "binlog.index"),
		t("max_connections", "151"),
		m("pid_file", PidFile),
		m("port", strconv.Itoa(Port)),
		m("relay_log", "relay-bin"),
		m("relay_log_index", "relay-bin.index"),
		t("skip_name_resolve", "ON", "Accounts are matched by IP address: no DNS lookup per connection."),
		m("socket", SocketPath),
		m("sync_binlog", "1", "Durable binary log: a crash must not lose acknowledged writes."),
	}
}

func mariadbSettings() []setting {
	return append(common(),
		m("binlog_format", "ROW"),
		m("innodb_flush_log_at_trx_commit", "3",
			"Durable commits, and each commit flushed by InnoDB itself before the client hears",
			"of it. With 1, MariaDB leaves the commit to binary-log recovery, and a server",
			"restarted with --init-rpl-role=SLAVE (every multi-instance pod) truncates what",
			"InnoDB had only prepared: writes clients were told committed. A replica holds",
			"them, unless it was lost too; with 3 the restarted primary keeps them (one more",
			"fsync per group commit, docs/design/0039)."),
		m("gtid_strict_mode", "ON", "Refuse out-of-order GTIDs instead of letting histories diverge."),
		m("log_slave_updates", "ON", "Every replica keeps a full binary log, ready to become primary."),
		m("read_only", "ON",
			"Every server starts read-only; the operator lifts it on the primary only.",
			"MariaDB has no super_read_only: accounts with READ_ONLY ADMIN (root) can still",
			"write, so the operator's own statements on replicas run with sql_log_bin=0."),
		m("rpl_semi_sync_master_enabled", "OFF",
			"The operator turns it on on the primary only: on a replica the applier",
			"would wait for ACKs from nobody."),
		m("rpl_semi_sync_master_timeout", semiSyncTimeoutMS, semiSyncTimeoutWhy...),
		m("rpl_semi_sync_master_wait_point", "AFTER_SYNC",
			"Wait for the ACK before the commit becomes visible (lossless semi-sync)."),
		m("rpl_semi_sync_slave_enabled", "ON"),
		m("skip_slave_start", "ON", "The operator starts replication once it has chosen the primary."),
		t("slave_parallel_mode", "optimistic"),
		t("slave_net_timeout", "4",
			"A replica notices a silent (hung) primary within 4 s: heartbeats come every 1 s.",
			"Dolphin does not fail over while a replica still receives from the primary, so this",
			"bounds how long a hung primary keeps its role."),
		t("slave_parallel_threads", "4",
			"Parallel apply keeps replicas current, so a failover has little to wait for."),
	)
}

func mysqlSettings() []setting {
	return append(common(),
		m("innodb_flush_log_at_trx_commit", "1", "Durable commits: a crash must not lose acknowledged writes."),
		m("enforce_gtid_consistency", "ON"),
		m("gtid_mode", "ON", "Failover and re-pointing replicas rely on GTID auto-positioning."),
		m("log_replica_updates", "ON", "Every replica keeps a full binary log, ready to become primary."),
		setting{key: "plugin_load_add", value: "semisync_source.so", kind: additive, comment: []string{
			"Semi-sync is a plugin in MySQL; the rpl_semi_sync_* settings need both.",
			"A plugin_load_add in spec.mysqlConfig is loaded as well, not instead."}},
		setting{key: "plugin_load_add", value: "semisync_replica.so", kind: additive},
		m("read_only", "ON", "Every server starts read-only; the operator lifts both on the primary only."),
		t("replica_net_timeout", "4",
			"A replica notices a silent (hung) primary within 4 s: heartbeats come every 1 s.",
			"Dolphin does not fail over while a replica still receives from the primary, so this",
			"bounds how long a hung primary keeps its role."),
		t("replica_parallel_workers", "4",
			"Parallel apply keeps replicas current, so a failover has little to wait for."),
		t("replica_preserve_commit_order", "ON"),
		m("rpl_semi_sync_replica_enabled", "ON"),
		m("rpl_semi_sync_source_enabled", "OFF",
			"The operator turns it on on the primary only: on a replica the applier",
			"would wait for ACKs from nobody."),
		m("rpl_semi_sync_source_timeout", semiSyncTimeoutMS, semiSyncTimeoutWhy...),
		m("rpl_semi_sync_source_wait_point", "AFTER_SYNC",
			"Wait for the ACK before the commit becomes visible (lossless semi-sync)."),
		m("skip_replica_start", "ON", "The operator starts replication once it has chosen the primary."),
		m("super_read_only", "ON", "Not even SUPER or CONNECTION_ADMIN accounts can write on a replica."),
	)
}

// flavorDefaults returns a fresh copy of the flavor's settings, in no
// particular order.
func flavorDefaults(flavor string) ([]setting, error) {
	switch flavor {
	case FlavorMariaDB:
		return mariadbSettings(), nil
	case FlavorMySQL:
		return mysqlSettings(), nil
	}
	return nil, fmt.Errorf("mycnf: %w %q: want %q or %q", ErrUnknownFlavor, flavor, FlavorMariaDB, FlavorMySQL)
}

// runTimeMandatory are the managed settings the topology engine also sets with SET GLOBAL:
// a server started with an older my.cnf gets the value without a restart.
var runTimeMandatory = []string{"innodb_flush_log_at_trx_commit"}

// RunTimeMandatory returns, by variable, the flavor's values of the managed settings the
// topology engine enforces at run time (nil for an unknown flavor).
func RunTimeMandatory(flavor string) map[string]string {
	settings, err := flavorDefaults(flavor)
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for _, s := range settings {
		if s.kind == managed && slices.Contains(runTimeMandatory, s.key) {
			out[s.key] = s.value
		}
	}
	return out
}
