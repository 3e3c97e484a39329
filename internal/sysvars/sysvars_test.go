package sysvars

import (
	"bufio"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/dolphin-operator/dolphin/internal/mycnf"
)

// TestTables checks the tables' shape: names, kinds, nothing Dolphin
// manages, enough coverage, and every setting Dolphin's own my.cnf writes.
func TestTables(t *testing.T) {
	for flavor, rs := range releases {
		for _, r := range rs {
			name := fmt.Sprintf("%s %d.%d", flavor, r.major, r.minor)
			if len(r.vars) < 80 {
				t.Errorf("%s: %d entries, want at least 80", name, len(r.vars))
			}
			vars := map[string]string{}
			for opt, in := range r.vars {
				if opt != in.Option || !namePattern.MatchString(in.Option) || !namePattern.MatchString(in.Variable) {
					t.Errorf("%s: bad names in %+v (key %q)", name, in, opt)
				}
				if in.Kind != Dynamic && in.Kind != Static {
					t.Errorf("%s: %s: kind %v", name, opt, in.Kind)
				}
				if in.RuntimeSettable && (in.Kind != Static || in.Note == "") {
					t.Errorf("%s: %s: RuntimeSettable wants Static and a note, got %+v", name, opt, in)
				}
				if mycnf.IsReserved(in.Option) || mycnf.IsReserved(in.Variable) {
					t.Errorf("%s: %s: Dolphin manages it (mycnf.IsReserved): it must not be in the table", name, opt)
				}
				if other, dup := vars[in.Variable]; dup {
					t.Errorf("%s: options %s and %s both set variable %s", name, other, opt, in.Variable)
				}
				vars[in.Variable] = opt
			}
			// Diff of effective settings (Dolphin's defaults plus the user's)
			// must never call one of Dolphin's own settings unknown.
			for _, key := range generatedKeys(t, flavor) {
				if mycnf.IsReserved(key) || key == "plugin_load_add" {
					continue
				}
				if _, ok := r.vars[key]; !ok {
					t.Errorf("%s: Dolphin's my.cnf sets %s, which the table does not know", name, key)
				}
			}
		}
	}
}

// generatedKeys returns the [mysqld] keys of Dolphin's my.cnf for flavor.
func generatedKeys(t *testing.T, flavor string) []string {
	t.Helper()
	cnf, err := mycnf.Generate(mycnf.Input{Flavor: flavor})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	inMysqld := false
	sc := bufio.NewScanner(strings.NewReader(cnf))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "!"):
		case strings.HasPrefix(line, "["):
			inMysqld = line == "[mysqld]"
		case inMysqld:
			k, _, _ := strings.Cut(line, "=")
			keys = append(keys, strings.TrimSpace(k))
		}
	}
	if len(keys) < 5 {
		t.Fatalf("%s: found only %v in the generated my.cnf:\n%s", flavor, keys, cnf)
	}
	return keys
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		flavor, version, name string
		want                  Kind
	}{
		// Commonly tuned, same in every table.
		{"mariadb", "10.11", "innodb_buffer_pool_size", Dynamic},
		{"mysql", "8.4", "innodb_buffer_pool_size", Dynamic},
		{"mariadb", "11.4", "max_connections", Dynamic},
		{"mysql", "8.4.3", "max_connections", Dynamic},
		{"mariadb", "10.11", "innodb_page_size", Static},
		{"mysql", "8.4", "innodb_page_size", Static},
		{"mariadb", "10.11", "skip_name_resolve", Static},
		{"mysql", "8.4", "performance_schema", Static},
		{"mariadb", "10.11", "lower_case_table_names", Static},
		{"mariadb", "10.11", "sql_mode", Dynamic},
		{"mysql", "8.4", "long_query_time", Dynamic},

		// Where flavors differ.
		{"mariadb", "10.11", "innodb_log_file_size", Dynamic}, // since 10.9
		{"mysql", "8.4", "innodb_log_file_size", Static},      // use innodb_redo_log_capacity
		{"mysql", "8.4", "innodb_redo_log_capacity", Dynamic},
		{"mariadb", "10.11", "innodb_redo_log_capacity", Unknown},
		{"mariadb", "10.11", "innodb_read_io_threads", Dynamic}, // since 10.11
		{"mysql", "8.4", "innodb_read_io_threads", Static},
		{"mariadb", "10.11", "innodb_purge_threads", Dynamic},
		{"mysql", "8.4", "innodb_purge_threads", Static},
		{"mariadb", "10.11", "innodb_log_buffer_size", Static},
		{"mysql", "8.4", "innodb_log_buffer_size", Dynamic},
		{"mariadb", "10.11", "expire_logs_days", Dynamic},
		{"mysql", "8.4", "expire_logs_days", Unknown}, // removed in 8.2
		{"mysql", "8.4", "binlog_expire_logs_seconds", Dynamic},
		{"mariadb", "11.4", "query_cache_size", Dynamic},
		{"mysql", "8.4", "query_cache_size", Unknown}, // removed in 8.0
		{"mariadb", "10.11", "aria_pagecache_buffer_size", Static},
		{"mysql", "8.4", "aria_pagecache_buffer_size", Unknown},
		{"mariadb", "10.11", "thread_pool_size", Dynamic},
		{"mysql", "8.4", "thread_pool_size", Unknown}, // Enterprise only

		// Version differences within MariaDB.
		{"mariadb", "10.11", "innodb_change_buffering", Dynamic},
		{"mariadb", "11.4", "innodb_change_buffering", Unknown}, // removed in 11.0
		{"mariadb", "10.11.6", "innodb_change_buffer_max_size", Dynamic},
		{"mariadb", "11.4.5", "innodb_change_buffer_max_size", Unknown},

		// Versions: patch levels, suffixes, fallbacks to the nearest series.
		{"mariadb", "10.11.6-MariaDB-log", "innodb_change_buffering", Dynamic},
		{"mariadb", "10.6", "innodb_change_buffering", Dynamic}, // nearest: 10.11
		{"mariadb", "11.0", "innodb_change_buffering", Unknown}, // nearest: 11.4
		{"mariadb", "11.8.2", "innodb_change_buffering", Unknown},
		{"mariadb", "", "innodb_change_buffering", Dynamic}, // oldest: 10.11
		{"mariadb", "latest", "innodb_change_buffering", Dynamic},
		{"mysql", "8.0.36", "innodb_redo_log_capacity", Dynamic},
		{"mysql", "9.1", "innodb_redo_log_capacity", Dynamic},

		// my.cnf option names, not variable names.
		{"mariadb", "10.11", "default_time_zone", Dynamic},
		{"mariadb", "10.11", "time_zone", Unknown}, // mariadbd rejects time_zone in my.cnf
		{"mysql", "8.4", "default_time_zone", Dynamic},
		{"mariadb", "10.11", "transaction_isolation", Dynamic},
		{"mariadb", "10.11", "tx_isolation", Unknown},

		// Replication settings that only take effect when replication restarts.
		{"mariadb", "10.11", "slave_parallel_threads", Static},
		{"mariadb", "10.11", "slave_net_timeout", Static},
		{"mysql", "8.4", "replica_parallel_workers", Static},

		// my.cnf spellings.
		{"mariadb", "10.11", "loose_max_connections", Dynamic},
		{"mariadb", "10.11", "max-connections", Dynamic},
		{"mariadb", "10.11", "Max_Connections", Dynamic},

		// Not in any table.
		{"mariadb", "10.11", "server_id", Unknown},
		{"mariadb", "10.11", "innodb_flush_log_at_trx_commit", Unknown},
		{"mysql", "8.4", "rpl_semi_sync_source_timeout", Unknown},
		{"mariadb", "10.11", "max_conections", Unknown},
		{"mariadb", "10.11", "", Unknown},
		{"postgres", "16", "max_connections", Unknown},
		{"", "", "max_connections", Unknown},
	} {
		if got := Classify(c.flavor, c.version, c.name); got != c.want {
			t.Errorf("Classify(%q, %q, %q) = %v, want %v", c.flavor, c.version, c.name, got, c.want)
		}
	}
}

func TestLookup(t *testing.T) {
	for _, c := range []struct {
		flavor, version, name string
		want                  Info
	}{
		{"mariadb", "10.11", "default_time_zone", Info{Option: "default_time_zone", Variable: "time_zone", Kind: Dynamic, Note: noteTimeZone}},
		{"mysql", "8.4", "default_time_zone", Info{Option: "default_time_zone", Variable: "time_zone", Kind: Dynamic, Note: noteTimeZone}},
		{"mariadb", "10.11", "transaction_isolation", Info{Option: "transaction_isolation", Variable: "tx_isolation", Kind: Dynamic,
			Note: "my.cnf option transaction_isolation sets the variable tx_isolation in MariaDB before 11.1"}},
		{"mariadb", "11.4", "transaction_isolation", Info{Option: "transaction_isolation", Variable: "transaction_isolation", Kind: Dynamic}},
		{"mysql", "8.4", "transaction_read_only", Info{Option: "transaction_read_only", Variable: "transaction_read_only", Kind: Dynamic}},
		{"mariadb", "10.11", "max_connections", Info{Option: "max_connections", Variable: "max_connections", Kind: Dynamic}},
		{"mariadb", "10.11", "slave_parallel_threads", Info{Option: "slave_parallel_threads", Variable: "slave_parallel_threads",
			Kind: Static, RuntimeSettable: true, Note: noteReplication}},
	} {
		got, ok := Lookup(c.flavor, c.version, c.name)
		if !ok || got != c.want {
			t.Errorf("Lookup(%q, %q, %q) = %+v, %v; want %+v, true", c.flavor, c.version, c.name, got, ok, c.want)
		}
	}
	if in, ok := Lookup("mariadb", "10.11", "time_zone"); ok {
		t.Errorf("Lookup(time_zone) = %+v, want not found", in)
	}
}

func TestVariables(t *testing.T) {
	vs := Variables("mariadb", "10.11.6")
	if len(vs) != len(mariadb1011) {
		t.Fatalf("Variables(mariadb, 10.11.6): %d entries, want %d", len(vs), len(mariadb1011))
	}
	for i := 1; i < len(vs); i++ {
		if vs[i-1].Option >= vs[i].Option {
			t.Fatalf("not sorted: %s before %s", vs[i-1].Option, vs[i].Option)
		}
	}
	if vs := Variables("postgres", "16"); vs != nil {
		t.Errorf("Variables(postgres) = %d entries, want nil", len(vs))
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{Dynamic: "dynamic", Static: "static", Unknown: "unknown", Kind(9): "unknown"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", int(k), got, want)
		}
	}
}

func TestDiff(t *testing.T) {
	for _, c := range []struct {
		name            string
		flavor, version string
		old, new        map[string]string
		want            Change
	}{
		{
			name: "nothing changed",
			old:  map[string]string{"max_connections": "200", "innodb_page_size": "16K"},
			new:  map[string]string{"max_connections": "200", "innodb_page_size": "16K"},
			want: Change{Dynamic: map[string]string{}},
		},
		{
			name: "dynamic changes only",
			old:  map[string]string{"max_connections": "151", "innodb_buffer_pool_size": "1G"},
			new: map[string]string{"max_connections": "200", "innodb_buffer_pool_size": "512M",
				"sql_mode": "STRICT_TRANS_TABLES,NO_ZERO_DATE", "slow_query_log": "on", "long_query_time": "0.5"},
			want: Change{Dynamic: map[string]string{
				"max_connections": "200", "innodb_buffer_pool_size": "536870912",
				"sql_mode": "'STRICT_TRANS_TABLES,NO_ZERO_DATE'", "slow_query_log": "ON", "long_query_time": "0.5",
			}},
		},
		{
			name: "MariaDB buffer pool: lowering is dynamic, raising restarts",
			old:  map[string]string{"innodb_buffer_pool_size": "128M"},
			new:  map[string]string{"innodb_buffer_pool_size": "134217729"},
			want: Change{Dynamic: map[string]string{}, Restart: []string{"innodb_buffer_pool_size"}},
		},
		{
			name: "MariaDB buffer pool: same size written differently",
			old:  map[string]string{"innodb_buffer_pool_size": "128M"},
			new:  map[string]string{"innodb_buffer_pool_size": "134217728"},
			want: Change{Dynamic: map[string]string{"innodb_buffer_pool_size": "134217728"}},
		},
		{
			name: "MariaDB buffer pool: added, removed or not a size restarts",
			old:  map[string]string{"innodb_buffer_pool_size": "1G", "key_buffer_size": "8M"},
			new:  map[string]string{"key_buffer_size": "lots"},
			want: Change{
				Dynamic: map[string]string{"key_buffer_size": "'lots'"},
				Restart: []string{"innodb_buffer_pool_size"},
			},
		},
		{
			name: "MariaDB buffer pool: new key restarts",
			old:  map[string]string{},
			new:  map[string]string{"innodb_buffer_pool_size": "64M"},
			want: Change{Dynamic: map[string]string{}, Restart: []string{"innodb_buffer_pool_size"}},
		},
		{
			name: "static change needs a restart, dynamic ones still listed",
			old:  map[string]string{"max_connections": "151", "innodb_log_buffer_size": "16M"},
			new:  map[string]string{"max_connections": "300", "innodb_log_buffer_size": "64M", "performance_schema": "ON"},
			want: Change{
				Dynamic: map[string]string{"max_connections": "300"},
				Restart: []string{"innodb_log_buffer_size", "performance_schema"},
			},
		},
		{
			name: "removed: dynamic back to DEFAULT, static and unknown restart",
			old: map[string]string{"wait_timeout": "60", "thread_handling": "pool-of-threads",
				"no_such_option": "1", "max_connections": "151"},
			new: map[string]string{"max_connections": "151"},
			want: Change{
				Dynamic: map[string]string{"wait_timeout": "DEFAULT"},
				Restart: []string{"no_such_option", "thread_handling"},
			},
		},
		{
			name: "unknown keys reported, sorted",
			old:  map[string]string{},
			new:  map[string]string{"time_zone": "+00:00", "max_conections": "200", "tmp_table_size": "64M"},
			want: Change{
				Dynamic: map[string]string{"tmp_table_size": "67108864"},
				Unknown: []string{"max_conections", "time_zone"},
			},
		},
		{
			name: "option and variable names differ",
			old:  map[string]string{"default_time_zone": "SYSTEM", "transaction_isolation": "REPEATABLE-READ"},
			new:  map[string]string{"default_time_zone": "+00:00"},
			want: Change{Dynamic: map[string]string{"time_zone": "'+00:00'", "tx_isolation": "DEFAULT"}},
		},
		{
			name:    "variable names follow the version",
			version: "11.4.5",
			old:     map[string]string{},
			new:     map[string]string{"transaction_isolation": "READ-COMMITTED", "innodb_change_buffering": "none"},
			want: Change{
				Dynamic: map[string]string{"transaction_isolation": "'READ-COMMITTED'"},
				Unknown: []string{"innodb_change_buffering"},
			},
		},
		{
			name: "a value SET GLOBAL cannot take goes through a restart",
			old:  map[string]string{},
			new:  map[string]string{"init_connect": "SET NAMES utf8mb4\x00", "max_connections": "99999999999999999999T"},
			want: Change{Dynamic: map[string]string{}, Restart: []string{"init_connect", "max_connections"}},
		},
		{
			name: "replication settings restart",
			old:  map[string]string{"slave_parallel_threads": "4", "slave_net_timeout": "4"},
			new:  map[string]string{"slave_parallel_threads": "8", "slave_net_timeout": "10"},
			want: Change{Dynamic: map[string]string{}, Restart: []string{"slave_net_timeout", "slave_parallel_threads"}},
		},
		{
			name:    "mysql",
			flavor:  "mysql",
			version: "8.4.3",
			old: map[string]string{"innodb_redo_log_capacity": "100M", "replica_parallel_workers": "4",
				"innodb_buffer_pool_size": "128M"},
			new: map[string]string{"innodb_redo_log_capacity": "1G", "replica_parallel_workers": "8",
				"query_cache_size": "0", "innodb_read_io_threads": "8", "innodb_buffer_pool_size": "2G"},
			want: Change{
				Dynamic: map[string]string{"innodb_redo_log_capacity": "1073741824", "innodb_buffer_pool_size": "2147483648"},
				Restart: []string{"innodb_read_io_threads", "replica_parallel_workers"},
				Unknown: []string{"query_cache_size"},
			},
		},
		{
			name:   "unknown flavor: everything new is unknown",
			flavor: "postgres",
			old:    map[string]string{"work_mem": "4MB"},
			new:    map[string]string{"max_connections": "200"},
			want:   Change{Dynamic: map[string]string{}, Restart: []string{"work_mem"}, Unknown: []string{"max_connections"}},
		},
		{
			name: "nil maps",
			want: Change{Dynamic: map[string]string{}},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			flavor, version := c.flavor, c.version
			if flavor == "" {
				flavor = "mariadb"
			}
			if version == "" && flavor == "mariadb" {
				version = "10.11"
			}
			got := Diff(flavor, version, c.old, c.new)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("Diff:\n got %#v\nwant %#v", got, c.want)
			}
			if got.NeedsRestart() != (len(c.want.Restart) > 0) {
				t.Errorf("NeedsRestart() = %v", got.NeedsRestart())
			}
			if got.Empty() != (len(c.want.Dynamic)+len(c.want.Restart)+len(c.want.Unknown) == 0) {
				t.Errorf("Empty() = %v", got.Empty())
			}
			// Every dynamic change makes a valid statement.
			for name, lit := range got.Dynamic {
				if _, err := Statement(name, lit); err != nil {
					t.Errorf("Statement(%q, %q): %v", name, lit, err)
				}
			}
		})
	}
}
