package sysvars

import (
	"fmt"
	"regexp"
	"strings"
)

// ValueType is the form a setting's value takes: what mysqld reads from my.cnf for it.
type ValueType int

const (
	// ValueAny is a string, an enumeration or a set: the server judges the value.
	ValueAny ValueType = iota
	// ValueInteger is a whole number, in my.cnf optionally with a size suffix (K, M, G, T,
	// P, E: powers of 1024; mysqld reads only the suffix's first letter, so 1GB is 1G). mysqld
	// refuses to start with anything else.
	ValueInteger
	// ValueDecimal is a number with an optional fraction (0.5); mysqld refuses to start with
	// anything else.
	ValueDecimal
	// ValueBoolean is ON, OFF, TRUE, FALSE, 1 or 0 (any case): mysqld reads anything else as
	// OFF, with a warning only.
	ValueBoolean
)

// String says which form a value of the type takes.
func (v ValueType) String() string {
	switch v {
	case ValueInteger:
		return "a whole number (a size may end in K, M, G, T, P or E)"
	case ValueDecimal:
		return "a number"
	case ValueBoolean:
		return "ON or OFF (also TRUE, FALSE, 1, 0)"
	default:
		return "a string"
	}
}

// The MariaDB variables of the tables by type (information_schema.SYSTEM_VARIABLES'
// VARIABLE_TYPE: INT, BIGINT and their UNSIGNED forms; BOOLEAN; DOUBLE), keyed by variable
// name, as MariaDB 10.11 has them (later changes: mariadbTypeChanges). The other entries are
// ValueAny. sysvarstest.Check compares every entry with the server it runs against (10.11 on
// the host, 11.8 in the end-to-end suite).
var (
	mariadbIntegers = strings.Fields(`
	aria_block_size aria_checkpoint_interval aria_checkpoint_log_activity
	aria_group_commit_interval aria_log_file_size aria_max_sort_file_size
	aria_pagecache_age_threshold aria_pagecache_buffer_size aria_pagecache_division_limit
	aria_pagecache_file_hash_size aria_repair_threads aria_sort_buffer_size
	auto_increment_increment auto_increment_offset back_log binlog_cache_size
	binlog_expire_logs_seconds binlog_stmt_cache_size bulk_insert_buffer_size connect_timeout
	default_week_format div_precision_increment extra_max_connections flush_time ft_max_word_len
	ft_min_word_len group_concat_max_len host_cache_size idle_readonly_transaction_timeout
	idle_transaction_timeout idle_write_transaction_timeout innodb_adaptive_hash_index_parts
	innodb_autoextend_increment innodb_autoinc_lock_mode innodb_buffer_pool_chunk_size
	innodb_buffer_pool_dump_pct innodb_buffer_pool_size innodb_change_buffer_max_size
	innodb_compression_level innodb_fast_shutdown innodb_fill_factor innodb_flush_log_at_timeout
	innodb_flush_neighbors innodb_flushing_avg_loops innodb_force_recovery
	innodb_ft_max_token_size innodb_ft_min_token_size innodb_io_capacity innodb_io_capacity_max
	innodb_lock_wait_timeout innodb_log_buffer_size innodb_log_file_size innodb_lru_scan_depth
	innodb_max_purge_lag innodb_max_purge_lag_delay innodb_max_undo_log_size innodb_old_blocks_pct
	innodb_old_blocks_time innodb_online_alter_log_max_size innodb_open_files innodb_page_size
	innodb_purge_batch_size innodb_purge_threads innodb_read_ahead_threshold
	innodb_read_io_threads innodb_sort_buffer_size innodb_spin_wait_delay
	innodb_stats_persistent_sample_pages innodb_stats_transient_sample_pages
	innodb_sync_spin_loops innodb_undo_tablespaces innodb_write_io_threads interactive_timeout
	join_buffer_size join_buffer_space_limit join_cache_level key_buffer_size
	key_cache_age_threshold key_cache_block_size key_cache_division_limit lock_wait_timeout
	log_slow_rate_limit log_warnings lower_case_table_names max_allowed_packet
	max_binlog_cache_size max_binlog_size max_binlog_stmt_cache_size max_connect_errors
	max_connections max_digest_length max_error_count max_heap_table_size max_prepared_stmt_count
	max_sort_length max_sp_recursion_depth max_user_connections max_write_lock_count
	min_examined_row_limit myisam_max_sort_file_size myisam_sort_buffer_size net_buffer_length
	net_read_timeout net_retry_count net_write_timeout open_files_limit optimizer_prune_level
	optimizer_search_depth optimizer_use_condition_selectivity performance_schema_digests_size
	performance_schema_max_digest_length performance_schema_max_sql_text_length
	query_alloc_block_size query_cache_limit query_cache_min_res_unit query_cache_size
	query_prealloc_size read_buffer_size read_rnd_buffer_size slave_net_timeout
	slave_parallel_threads slow_launch_time sort_buffer_size stored_program_cache
	table_definition_cache table_open_cache table_open_cache_instances tcp_keepalive_interval
	tcp_keepalive_probes tcp_keepalive_time thread_cache_size thread_pool_idle_timeout
	thread_pool_max_threads thread_pool_oversubscribe thread_pool_size thread_pool_stall_limit
	thread_stack tmp_disk_table_size tmp_memory_table_size tmp_table_size
	transaction_alloc_block_size transaction_prealloc_size wait_timeout`)
	mariadbBooleans = strings.Fields(`
	aria_page_checksum automatic_sp_privileges explicit_defaults_for_timestamp general_log
	innodb_adaptive_flushing innodb_adaptive_hash_index innodb_buffer_pool_dump_at_shutdown
	innodb_buffer_pool_load_at_startup innodb_compression_default innodb_deadlock_detect
	innodb_doublewrite innodb_file_per_table innodb_flush_sync innodb_print_all_deadlocks
	innodb_random_read_ahead innodb_read_only innodb_rollback_on_timeout innodb_stats_auto_recalc
	innodb_stats_include_delete_marked innodb_stats_on_metadata innodb_stats_persistent
	innodb_status_output innodb_status_output_locks innodb_strict_mode innodb_undo_log_truncate
	innodb_use_native_aio large_pages local_infile log_bin_trust_function_creators
	log_queries_not_using_indexes log_slow_admin_statements log_slow_query low_priority_updates
	performance_schema query_cache_wlock_invalidate skip_external_locking skip_name_resolve
	skip_show_database slow_query_log transaction_read_only tx_read_only userstat`)
	mariadbDecimals = strings.Fields(`
	expire_logs_days innodb_adaptive_flushing_lwm innodb_max_dirty_pages_pct
	innodb_max_dirty_pages_pct_lwm log_slow_query_time long_query_time max_statement_time`)
)

var mariadbValueTypes = func() map[string]ValueType {
	m := map[string]ValueType{}
	for t, names := range map[ValueType][]string{ValueInteger: mariadbIntegers, ValueBoolean: mariadbBooleans, ValueDecimal: mariadbDecimals} {
		for _, n := range names {
			if _, dup := m[n]; dup {
				panic("sysvars: " + n + " has two value types")
			}
			m[n] = t
		}
	}
	return m
}()

// mariadbTypeChanges are the variables whose type a later series changed, with the first
// series (seriesIndex) that has the new one. innodb_doublewrite is an ENUM (OFF, ON, fast) on
// 11.8; 11.4, which no server here checks, takes the looser type.
var mariadbTypeChanges = map[string]struct {
	since int
	typ   ValueType
}{
	"innodb_doublewrite": {seriesIndex(11, 4), ValueAny},
}

// mariadbUnchecked are boolean variables whose values are not checked, with the reason.
var mariadbUnchecked = map[string]string{
	// The option is external-locking with skip_ in front: mysqld reads any value but 0 as
	// "skip", so OFF would turn skipping on; that is not a form a check can express.
	"skip_external_locking": "any value but 0 means skip",
}

// Unchecked says why the value of a MariaDB variable the server types as a boolean is not
// checked (TypeOf gives ValueAny), or "" when it is.
func Unchecked(variable string) string { return mariadbUnchecked[variable] }

// TypeOf returns the value type of a server variable (Info.Variable) of flavor and version
// (read as Lookup reads it). MySQL's variables are ValueAny: no MySQL server here checks a
// table of their types.
func TypeOf(flavor, version, variable string) ValueType {
	if flavor != FlavorMariaDB {
		return ValueAny
	}
	if _, ok := mariadbUnchecked[variable]; ok {
		return ValueAny
	}
	if ch, ok := mariadbTypeChanges[variable]; ok {
		if major, minor, ok := parseVersion(version); ok && seriesIndex(major, minor) >= ch.since {
			return ch.typ
		}
	}
	return mariadbValueTypes[variable]
}

// StopsTheServer reports whether mysqld refuses to start with a value of the wrong form for
// the type (integers and decimals), rather than reading it otherwise than written (a boolean
// it takes as OFF).
func (v ValueType) StopsTheServer() bool { return v == ValueInteger || v == ValueDecimal }

var valueForms = map[ValueType]*regexp.Regexp{
	ValueInteger: regexp.MustCompile(`^[-+]?[0-9]+([kKmMgGtTpPeE].*)?$`),
	ValueDecimal: regexp.MustCompile(`^[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?$`),
	ValueBoolean: regexp.MustCompile(`^(?i:on|off|true|false|1|0)$`),
}

// CheckValue returns an error saying which form the value of the my.cnf option (written as
// in my.cnf) must take, when the table for flavor and version knows the option's type and
// the value does not have it; nil otherwise (an unknown option included: see Lookup).
func CheckValue(flavor, version, option, value string) error {
	_, err := CheckValueType(flavor, version, option, value)
	return err
}

// CheckValueType is CheckValue that also returns the setting's type, so that a caller can
// tell a value mysqld would refuse to start with from one it would misread
// (ValueType.StopsTheServer).
func CheckValueType(flavor, version, option, value string) (ValueType, error) {
	in, ok := Lookup(flavor, version, option)
	if !ok {
		return ValueAny, nil
	}
	t := TypeOf(flavor, version, in.Variable)
	form, ok := valueForms[t]
	if !ok || form.MatchString(cnfValue(value)) {
		return t, nil
	}
	return t, fmt.Errorf("%s must be %s, not %q", option, t, value)
}
