package sysvars

import (
	"maps"
	"strings"
)

// The tables. Each is keyed by my.cnf option name. Lists of plain entries
// (option name = variable name, no note) are written as whitespace-separated
// words; entries that need more are written out.
//
// Left out on purpose, for every flavor:
//   - everything Dolphin manages for replication and durability (mycnf's
//     reserved keys: server_id, log_bin, gtid_*, read_only, rpl_semi_sync_*,
//     sync_binlog, innodb_flush_log_at_trx_commit, datadir, port, …): the API
//     rejects them before they get here;
//   - variables that trigger an action when set (innodb_buffer_pool_dump_now,
//     innodb_log_checkpoint_now, …): they are not settings;
//   - variables that only some patch releases of a series have (MariaDB
//     10.11.12's innodb_buffer_pool_size_max, …): a table holds for the whole
//     series.

// Notes shared by several entries.
const (
	noteReplication = "the server accepts SET GLOBAL, but the running replication threads keep the old " +
		"value until replication is restarted (some only while it is stopped); Dolphin restarts instead"
	noteTimeZone  = "my.cnf option default_time_zone sets the variable time_zone (time_zone is not a my.cnf option)"
	noteTxOption  = "my.cnf option transaction_%s sets the variable tx_%s in MariaDB before 11.1"
	noteBufResize = "resizing runs in the background after SET GLOBAL returns"
	// Seen on 10.11.14: SET GLOBAL to a larger value leaves the size as it was
	// (warning 1292, truncated), and SET GLOBAL … = DEFAULT above the cap
	// crashed the server (segfault). Seen on 10.11.19: the cap defaults to
	// 8 TiB, SET GLOBAL raises the size up to the cap at run time and
	// truncates a larger value to the cap (warning 1292), and DEFAULT goes
	// past an explicit cap. Dolphin restarts for any raise, which is right on
	// every patch level.
	noteBufCap = "SET GLOBAL lowers it; raising it above innodb_buffer_pool_size_max (10.11.12 and later " +
		"have it; its default is the size the server started with on 10.11.14 and 8 TiB on 10.11.19) does " +
		"not take effect at run time, so Dolphin restarts for a raise; SET GLOBAL " +
		"innodb_buffer_pool_size = DEFAULT above that cap crashed MariaDB 10.11.14"
)

// mariadb1011 is MariaDB 10.11 (every entry checked against a real 10.11
// server by TestSysvarsServerMariaDB; see the package comment). The
// thread_pool_* settings change at run time, but only matter, and only keep a
// value set with SET GLOBAL, with thread_handling=pool-of-threads (static).
var mariadb1011 = newTable(`
	aria_checkpoint_interval aria_checkpoint_log_activity aria_group_commit
	aria_group_commit_interval aria_log_file_size aria_log_purge_type
	aria_max_sort_file_size aria_page_checksum aria_pagecache_age_threshold
	aria_pagecache_division_limit aria_recover_options aria_repair_threads
	aria_sort_buffer_size aria_stats_method aria_sync_log_dir

	auto_increment_increment auto_increment_offset automatic_sp_privileges
	binlog_cache_size binlog_expire_logs_seconds binlog_row_image
	binlog_stmt_cache_size bulk_insert_buffer_size character_set_filesystem
	character_set_server collation_server concurrent_insert connect_timeout
	default_storage_engine default_tmp_storage_engine default_week_format
	delay_key_write div_precision_increment event_scheduler expire_logs_days
	explicit_defaults_for_timestamp extra_max_connections flush_time
	general_log general_log_file group_concat_max_len host_cache_size
	idle_readonly_transaction_timeout idle_transaction_timeout
	idle_write_transaction_timeout init_connect interactive_timeout
	join_buffer_size join_buffer_space_limit join_cache_level
	key_buffer_size key_cache_age_threshold key_cache_block_size
	key_cache_division_limit local_infile lock_wait_timeout
	log_bin_trust_function_creators log_output log_queries_not_using_indexes
	log_slow_admin_statements log_slow_query log_slow_query_file
	log_slow_query_time log_slow_rate_limit log_slow_verbosity log_warnings
	long_query_time low_priority_updates max_allowed_packet
	max_binlog_cache_size max_binlog_size max_binlog_stmt_cache_size
	max_connect_errors max_connections max_error_count max_heap_table_size
	max_prepared_stmt_count max_sort_length max_sp_recursion_depth
	max_statement_time max_write_lock_count
	min_examined_row_limit myisam_max_sort_file_size myisam_sort_buffer_size
	net_buffer_length net_read_timeout net_retry_count net_write_timeout
	optimizer_prune_level optimizer_search_depth optimizer_switch
	optimizer_use_condition_selectivity query_alloc_block_size
	query_cache_limit query_cache_min_res_unit query_cache_size
	query_cache_type query_cache_wlock_invalidate query_prealloc_size
	read_buffer_size read_rnd_buffer_size slow_launch_time slow_query_log
	slow_query_log_file sort_buffer_size sql_mode stored_program_cache
	table_definition_cache table_open_cache tcp_keepalive_interval
	tcp_keepalive_probes tcp_keepalive_time thread_cache_size
	thread_pool_idle_timeout thread_pool_max_threads thread_pool_oversubscribe
	thread_pool_size thread_pool_stall_limit tmp_disk_table_size
	tmp_memory_table_size tmp_table_size transaction_alloc_block_size
	transaction_prealloc_size userstat wait_timeout

	innodb_adaptive_flushing innodb_adaptive_flushing_lwm
	innodb_adaptive_hash_index innodb_autoextend_increment
	innodb_buffer_pool_dump_at_shutdown innodb_buffer_pool_dump_pct
	innodb_change_buffer_max_size innodb_change_buffering
	innodb_compression_algorithm innodb_compression_default
	innodb_compression_level innodb_deadlock_detect innodb_deadlock_report
	innodb_default_row_format innodb_fast_shutdown innodb_file_per_table
	innodb_fill_factor innodb_flush_log_at_timeout innodb_flush_neighbors
	innodb_flush_sync innodb_flushing_avg_loops innodb_io_capacity
	innodb_io_capacity_max innodb_lock_wait_timeout innodb_log_file_size
	innodb_lru_scan_depth innodb_max_dirty_pages_pct
	innodb_max_dirty_pages_pct_lwm innodb_max_purge_lag
	innodb_max_purge_lag_delay innodb_max_undo_log_size innodb_old_blocks_pct
	innodb_old_blocks_time innodb_online_alter_log_max_size
	innodb_print_all_deadlocks innodb_purge_batch_size innodb_purge_threads
	innodb_random_read_ahead innodb_read_ahead_threshold
	innodb_read_io_threads innodb_spin_wait_delay innodb_stats_auto_recalc
	innodb_stats_include_delete_marked innodb_stats_method
	innodb_stats_on_metadata innodb_stats_persistent
	innodb_stats_persistent_sample_pages innodb_stats_transient_sample_pages
	innodb_status_output innodb_status_output_locks innodb_strict_mode
	innodb_sync_spin_loops innodb_undo_log_truncate innodb_write_io_threads
`, `
	aria_block_size aria_log_dir_path aria_pagecache_buffer_size
	aria_pagecache_file_hash_size back_log ft_max_word_len ft_min_word_len
	ft_stopword_file large_pages lower_case_table_names max_digest_length
	myisam_recover_options open_files_limit performance_schema
	performance_schema_digests_size performance_schema_max_digest_length
	performance_schema_max_sql_text_length plugin_dir secure_file_priv
	skip_external_locking skip_name_resolve skip_show_database
	table_open_cache_instances thread_handling thread_stack tmpdir

	innodb_adaptive_hash_index_parts innodb_autoinc_lock_mode
	innodb_buffer_pool_chunk_size innodb_buffer_pool_filename
	innodb_buffer_pool_load_at_startup innodb_data_file_path
	innodb_data_home_dir innodb_doublewrite innodb_flush_method
	innodb_force_recovery innodb_ft_max_token_size innodb_ft_min_token_size
	innodb_log_buffer_size innodb_log_group_home_dir innodb_open_files
	innodb_page_size innodb_read_only innodb_rollback_on_timeout
	innodb_sort_buffer_size innodb_temp_data_file_path innodb_undo_directory
	innodb_undo_tablespaces innodb_use_native_aio
`,
	Info{Option: "innodb_buffer_pool_size", Kind: Dynamic, RaiseNeedsRestart: true, Note: noteBufCap},
	Info{Option: "default_time_zone", Variable: "time_zone", Kind: Dynamic, Note: noteTimeZone},
	Info{Option: "transaction_isolation", Variable: "tx_isolation", Kind: Dynamic,
		Note: strings.ReplaceAll(noteTxOption, "%s", "isolation")},
	Info{Option: "transaction_read_only", Variable: "tx_read_only", Kind: Dynamic,
		Note: strings.ReplaceAll(noteTxOption, "%s", "read_only")},
	Info{Option: "max_user_connections", Kind: Static,
		Note: "SET GLOBAL refuses it (ERROR 1290) on a server started with 0, the default; Dolphin restarts"},
	Info{Option: "slave_net_timeout", Kind: Static, RuntimeSettable: true, Note: noteReplication},
	Info{Option: "slave_parallel_mode", Kind: Static, RuntimeSettable: true, Note: noteReplication},
	Info{Option: "slave_parallel_threads", Kind: Static, RuntimeSettable: true, Note: noteReplication},
)

// mariadb114 is MariaDB 11.4: 10.11 with what changed in 11.0–11.4, from the
// MariaDB documentation (not checked against a server here).
var mariadb114 = mariadb1011.
	// The InnoDB change buffer was removed in 11.0 (MDEV-29694).
	without("innodb_change_buffering", "innodb_change_buffer_max_size").
	// 11.1 added the variables transaction_isolation and transaction_read_only,
	// named like the options (tx_* are deprecated aliases).
	with(
		Info{Option: "transaction_isolation", Kind: Dynamic},
		Info{Option: "transaction_read_only", Kind: Dynamic},
	)

// mariadb118 is MariaDB 11.8: 11.4 with what changed in 11.5–11.8. Checked entry by entry
// against a real 11.8 server (Debian trixie's 11.8.9, in the image make images builds) by the
// end-to-end suite on the real node (TestRealNodeEngineUpgrade): the 11.4 entries all hold
// there except innodb_doublewrite, which 11.8 changes with SET GLOBAL (it is an enumeration
// there: OFF, ON, fast). It was first checked by hand against the same server started from
// the image's root file system with chroot.
var mariadb118 = mariadb114.with(
	Info{Option: "innodb_doublewrite", Kind: Dynamic},
)

// mysql84 is MySQL 8.4 LTS, from the MySQL 8.4 Reference Manual ("Dynamic"
// in each variable's table); no MySQL server is available here to check it.
// MySQL has no Aria, no query cache, no thread pool in the community
// server, and removed expire_logs_days in 8.2 (use
// binlog_expire_logs_seconds).
var mysql84 = newTable(`
	auto_increment_increment auto_increment_offset automatic_sp_privileges
	binlog_cache_size binlog_expire_logs_seconds binlog_row_image
	binlog_stmt_cache_size bulk_insert_buffer_size character_set_filesystem
	character_set_server collation_server concurrent_insert connect_timeout
	cte_max_recursion_depth default_storage_engine default_tmp_storage_engine
	default_week_format delay_key_write div_precision_increment
	event_scheduler explicit_defaults_for_timestamp flush_time general_log
	general_log_file group_concat_max_len host_cache_size init_connect
	interactive_timeout internal_tmp_mem_storage_engine join_buffer_size
	key_buffer_size key_cache_age_threshold key_cache_block_size
	key_cache_division_limit local_infile lock_wait_timeout
	log_bin_trust_function_creators log_error_verbosity log_output
	log_queries_not_using_indexes log_slow_admin_statements log_slow_extra
	log_throttle_queries_not_using_indexes log_timestamps long_query_time
	low_priority_updates max_allowed_packet max_binlog_cache_size
	max_binlog_size max_binlog_stmt_cache_size max_connect_errors
	max_connections max_error_count max_execution_time max_heap_table_size
	max_prepared_stmt_count max_sort_length max_sp_recursion_depth
	max_user_connections max_write_lock_count min_examined_row_limit
	myisam_max_sort_file_size myisam_sort_buffer_size net_buffer_length
	net_read_timeout net_retry_count net_write_timeout optimizer_prune_level
	optimizer_search_depth optimizer_switch range_optimizer_max_mem_size
	read_buffer_size read_rnd_buffer_size slow_launch_time slow_query_log
	slow_query_log_file sort_buffer_size sql_mode sql_require_primary_key
	stored_program_cache table_definition_cache table_open_cache
	temptable_max_mmap temptable_max_ram thread_cache_size tmp_table_size
	transaction_alloc_block_size transaction_isolation
	transaction_prealloc_size transaction_read_only wait_timeout

	innodb_adaptive_flushing innodb_adaptive_flushing_lwm
	innodb_adaptive_hash_index innodb_autoextend_increment
	innodb_buffer_pool_dump_at_shutdown innodb_buffer_pool_dump_pct
	innodb_buffer_pool_in_core_file innodb_change_buffer_max_size
	innodb_change_buffering innodb_compression_level innodb_ddl_buffer_size
	innodb_ddl_threads innodb_deadlock_detect innodb_default_row_format
	innodb_fast_shutdown innodb_file_per_table innodb_fill_factor
	innodb_flush_log_at_timeout innodb_flush_neighbors innodb_flush_sync
	innodb_flushing_avg_loops innodb_io_capacity innodb_io_capacity_max
	innodb_lock_wait_timeout innodb_log_buffer_size innodb_log_writer_threads
	innodb_lru_scan_depth innodb_max_dirty_pages_pct
	innodb_max_dirty_pages_pct_lwm innodb_max_purge_lag
	innodb_max_purge_lag_delay innodb_max_undo_log_size innodb_old_blocks_pct
	innodb_old_blocks_time innodb_online_alter_log_max_size
	innodb_parallel_read_threads innodb_print_all_deadlocks
	innodb_purge_batch_size innodb_random_read_ahead
	innodb_read_ahead_threshold innodb_redo_log_capacity
	innodb_spin_wait_delay innodb_stats_auto_recalc
	innodb_stats_include_delete_marked innodb_stats_method
	innodb_stats_on_metadata innodb_stats_persistent
	innodb_stats_persistent_sample_pages innodb_stats_transient_sample_pages
	innodb_status_output innodb_status_output_locks innodb_strict_mode
	innodb_sync_spin_loops innodb_thread_concurrency innodb_undo_log_truncate
	innodb_use_fdatasync
`, `
	back_log ft_max_word_len ft_min_word_len ft_stopword_file large_pages
	lower_case_table_names max_digest_length open_files_limit
	performance_schema performance_schema_digests_size
	performance_schema_max_digest_length performance_schema_max_sql_text_length
	plugin_dir secure_file_priv skip_external_locking skip_name_resolve
	table_open_cache_instances thread_handling thread_stack tmpdir

	innodb_adaptive_hash_index_parts innodb_autoinc_lock_mode
	innodb_buffer_pool_chunk_size innodb_buffer_pool_instances
	innodb_buffer_pool_load_at_startup innodb_data_file_path
	innodb_data_home_dir innodb_dedicated_server innodb_flush_method
	innodb_force_recovery innodb_ft_max_token_size innodb_ft_min_token_size
	innodb_log_group_home_dir innodb_numa_interleave innodb_page_cleaners
	innodb_page_size innodb_purge_threads innodb_read_io_threads
	innodb_read_only innodb_rollback_on_timeout innodb_sort_buffer_size
	innodb_temp_data_file_path innodb_undo_directory innodb_use_native_aio
	innodb_write_io_threads
`,
	Info{Option: "innodb_buffer_pool_size", Kind: Dynamic, Note: noteBufResize},
	Info{Option: "default_time_zone", Variable: "time_zone", Kind: Dynamic, Note: noteTimeZone},
	Info{Option: "innodb_log_file_size", Kind: Static,
		Note: "deprecated since 8.0.30: set innodb_redo_log_capacity, which is dynamic"},
	Info{Option: "innodb_open_files", Kind: Static,
		Note: "SET GLOBAL refuses it; only SELECT innodb_set_open_files_limit(N) changes it at run time"},
	Info{Option: "innodb_doublewrite", Kind: Static,
		Note: "8.0.30+ can switch between some modes at run time, not all; Dolphin restarts"},
	Info{Option: "replica_net_timeout", Kind: Static, RuntimeSettable: true, Note: noteReplication},
	Info{Option: "replica_parallel_workers", Kind: Static, RuntimeSettable: true, Note: noteReplication},
	Info{Option: "replica_preserve_commit_order", Kind: Static, RuntimeSettable: true, Note: noteReplication},
)

// release is one table and the server series it describes.
type release struct {
	major, minor int
	vars         table
}

// releases lists the known series per flavor, oldest first; the first is the
// one used when a version cannot be parsed.
var releases = map[string][]release{
	FlavorMariaDB: {{10, 11, mariadb1011}, {11, 4, mariadb114}, {11, 8, mariadb118}},
	FlavorMySQL:   {{8, 4, mysql84}},
}

// table maps my.cnf option names to their entries.
type table map[string]Info

// newTable builds a table from whitespace-separated lists of dynamic and
// static option names (variable = option, no note) and fully written
// entries. A name given twice panics: the tables are package data, and a
// test builds them all.
func newTable(dynamic, static string, special ...Info) table {
	t := table{}
	add := func(in Info) {
		if in.Variable == "" {
			in.Variable = in.Option
		}
		if _, dup := t[in.Option]; dup {
			panic("sysvars: " + in.Option + " listed twice")
		}
		t[in.Option] = in
	}
	for _, o := range strings.Fields(dynamic) {
		add(Info{Option: o, Kind: Dynamic})
	}
	for _, o := range strings.Fields(static) {
		add(Info{Option: o, Kind: Static})
	}
	for _, in := range special {
		add(in)
	}
	return t
}

// without returns a copy of t without the given options; each must exist.
func (t table) without(options ...string) table {
	c := maps.Clone(t)
	for _, o := range options {
		if _, ok := c[o]; !ok {
			panic("sysvars: without " + o + ": not in the table")
		}
		delete(c, o)
	}
	return c
}

// with returns a copy of t with the given entries added or replaced.
func (t table) with(entries ...Info) table {
	c := maps.Clone(t)
	for _, in := range entries {
		if in.Variable == "" {
			in.Variable = in.Option
		}
		c[in.Option] = in
	}
	return c
}
