package mycnf

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/mycnf -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from generated output (run with -update if intended); got:\n%s", path, got)
	}
}

func TestGenerateGolden(t *testing.T) {
	tests := []struct {
		file string
		in   Input
	}{
		{"mariadb-default.cnf", Input{Flavor: "mariadb"}},
		{"mariadb-overrides.cnf", Input{Flavor: "mariadb", Overrides: map[string]string{
			"innodb_buffer_pool_size": "2G",    // overrides a default
			"max_connections":         "500",   // overrides a default
			"slave_parallel_threads":  "8",     // overrides a default
			"long_query_time":         "2",     // new key
			"slow_query_log":          "ON",    // new key
			"sql_mode":                "",      // empty value is written as given
			"plugin_load_add":         "disks", // nothing to add to in MariaDB
			"innodb_log_file_size":    "512M",  // new key
			"transaction_isolation":   "READ-COMMITTED",
		}}},
		{"mysql-default.cnf", Input{Flavor: "mysql"}},
		{"mysql-overrides.cnf", Input{Flavor: "mysql", Overrides: map[string]string{
			"innodb_buffer_pool_size":    "4G",
			"innodb_redo_log_capacity":   "2G",
			"plugin_load_add":            "connection_control.so", // added after semi-sync
			"replica_parallel_workers":   "16",
			"sql_mode":                   "STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION",
			"character_set_server":       "latin1",
			"binlog_expire_logs_seconds": "604800",
		}}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			got, err := Generate(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.file, got)
			for i := 0; i < 20; i++ { // map iteration order must not leak into the output
				again, err := Generate(tc.in)
				if err != nil || again != got {
					t.Fatalf("output not deterministic (err %v)", err)
				}
			}
		})
	}
}

func TestInstanceConfigGolden(t *testing.T) {
	golden(t, "instance.cnf", InstanceConfig(101, "db-1.db-hosts.shop.svc.cluster.local"))
}

func TestGenerateStructure(t *testing.T) {
	for _, flavor := range []string{"mariadb", "mysql"} {
		got, err := Generate(Input{Flavor: flavor, Overrides: map[string]string{"plugin_load_add": "x.so"}})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(got, "# ") || !strings.Contains(strings.SplitN(got, "\n", 2)[0], "DO NOT EDIT") {
			t.Errorf("%s: no generated-file header", flavor)
		}
		if !strings.HasSuffix(got, "\n!include "+InstanceConfigFile+"\n") {
			t.Errorf("%s: does not end with the instance include", flavor)
		}
		// Keys in [mysqld] are sorted, and repeated keys keep Dolphin's first.
		var keys, plugins []string
		inMysqld := false
		for _, line := range strings.Split(got, "\n") {
			switch {
			case line == "[mysqld]":
				inMysqld = true
			case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "!"):
			case strings.HasPrefix(line, "["):
				inMysqld = false
			case inMysqld:
				k, v, _ := strings.Cut(line, "=")
				keys = append(keys, k)
				if k == "plugin_load_add" {
					plugins = append(plugins, v)
				}
			}
		}
		if !slices.IsSorted(keys) {
			t.Errorf("%s: [mysqld] keys not sorted: %v", flavor, keys)
		}
		if plugins[len(plugins)-1] != "x.so" {
			t.Errorf("%s: user plugin_load_add not last: %v", flavor, plugins)
		}
	}
}

func TestGenerateErrors(t *testing.T) {
	tests := []struct {
		name   string
		in     Input
		target error
		want   []string // substrings of the error message
	}{
		{"reserved explicit", Input{Flavor: "mariadb", Overrides: map[string]string{"server_id": "7"}},
			ErrReservedKey, []string{`"server_id"`, "per pod"}},
		{"reserved durability", Input{Flavor: "mysql", Overrides: map[string]string{"sync_binlog": "0"}},
			ErrReservedKey, []string{`"sync_binlog"`, "crash"}},
		{"reserved prefix mariadb name", Input{Flavor: "mariadb", Overrides: map[string]string{"rpl_semi_sync_master_timeout": "500"}},
			ErrReservedKey, []string{`"rpl_semi_sync_master_timeout"`, "semi-synchronous"}},
		{"reserved prefix mysql name", Input{Flavor: "mysql", Overrides: map[string]string{"rpl_semi_sync_source_wait_for_replica_count": "2"}},
			ErrReservedKey, []string{`"rpl_semi_sync_source_wait_for_replica_count"`}},
		{"hyphen", Input{Flavor: "mariadb", Overrides: map[string]string{"innodb-buffer-pool-size": "1G"}},
			ErrInvalidKey, []string{`"innodb-buffer-pool-size"`}},
		{"upper case", Input{Flavor: "mysql", Overrides: map[string]string{"Max_Connections": "10"}},
			ErrInvalidKey, []string{`"Max_Connections"`}},
		{"too long", Input{Flavor: "mysql", Overrides: map[string]string{"a" + strings.Repeat("b", 64): "1"}},
			ErrInvalidKey, []string{"a" + strings.Repeat("b", 64)}},
		{"empty key", Input{Flavor: "mysql", Overrides: map[string]string{"": "1"}}, ErrInvalidKey, []string{`""`}},
		{"newline value", Input{Flavor: "mariadb", Overrides: map[string]string{"init_connect": "SET x=1\nserver_id=9"}},
			ErrInvalidValue, []string{`"init_connect"`, "single line"}},
		{"carriage return value", Input{Flavor: "mysql", Overrides: map[string]string{"sql_mode": "A\rB"}},
			ErrInvalidValue, []string{`"sql_mode"`, "single line"}},
		{"control character value", Input{Flavor: "mysql", Overrides: map[string]string{"sql_mode": "A\x00B"}},
			ErrInvalidValue, []string{`"sql_mode"`, "control character"}},
		{"comment value", Input{Flavor: "mariadb", Overrides: map[string]string{"init_connect": "SELECT 1 # hi"}},
			ErrInvalidValue, []string{`"init_connect"`, "comment"}},
		{"unknown flavor", Input{Flavor: "postgres"}, ErrUnknownFlavor, []string{`"postgres"`}},
		{"empty flavor", Input{Flavor: ""}, ErrUnknownFlavor, []string{`""`}},
		{"flavor is case sensitive", Input{Flavor: "MySQL"}, ErrUnknownFlavor, []string{`"MySQL"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Generate(tc.in)
			if err == nil {
				t.Fatalf("no error; output:\n%s", got)
			}
			if got != "" {
				t.Errorf("output returned with error")
			}
			if !errors.Is(err, tc.target) {
				t.Errorf("error %q is not %v", err, tc.target)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %s", err, w)
				}
			}
		})
	}
}

func TestGenerateReportsEveryBadKey(t *testing.T) {
	_, err := Generate(Input{Flavor: "mysql", Overrides: map[string]string{
		"port": "3307", "Bad-Key": "1", "max_connections": "300", "rpl_semi_sync_x": "1",
	}})
	if !errors.Is(err, ErrReservedKey) || !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("want both reserved and invalid key errors, got %v", err)
	}
	for _, k := range []string{`"port"`, `"Bad-Key"`, `"rpl_semi_sync_x"`} {
		if !strings.Contains(err.Error(), k) {
			t.Errorf("error %q does not name %s", err, k)
		}
	}
	if strings.Contains(err.Error(), "max_connections") {
		t.Errorf("error %q names a valid key", err)
	}
}

func TestGenerateDoesNotModifyInput(t *testing.T) {
	in := Input{Flavor: "mysql", Overrides: map[string]string{"max_connections": "300"}}
	if _, err := Generate(in); err != nil {
		t.Fatal(err)
	}
	if len(in.Overrides) != 1 || in.Overrides["max_connections"] != "300" {
		t.Errorf("overrides modified: %v", in.Overrides)
	}
}

func TestReservedKeys(t *testing.T) {
	keys := ReservedKeys()
	want := []string{
		"server_id", "log_bin", "log_bin_index", "skip_log_bin", "disable_log_bin", "log_slave_updates", "log_replica_updates",
		"binlog_format", "gtid_mode", "gtid_strict_mode", "enforce_gtid_consistency",
		"gtid_domain_id", "read_only", "super_read_only", "skip_slave_start", "skip_replica_start",
		"init_rpl_role", "relay_log", "relay_log_index", "datadir", "socket", "port",
		"bind_address", "user", "pid_file", "log_error", "sync_binlog",
		"innodb_flush_log_at_trx_commit",
	}
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Errorf("ReservedKeys() = %v, want %v (keep in step with the CEL rule)", keys, want)
	}
	if !slices.IsSorted(keys) {
		t.Errorf("ReservedKeys() not sorted: %v", keys)
	}
	for _, k := range keys {
		if !IsReserved(k) {
			t.Errorf("IsReserved(%q) = false for a key in ReservedKeys()", k)
		}
		if _, err := Generate(Input{Flavor: "mysql", Overrides: map[string]string{k: "1"}}); !errors.Is(err, ErrReservedKey) {
			t.Errorf("Generate accepted reserved key %q: %v", k, err)
		}
	}
	keys[0] = "changed" // callers get a copy
	if ReservedKeys()[0] == "changed" {
		t.Error("ReservedKeys() returns shared state")
	}
	for k, want := range map[string]bool{
		"rpl_semi_sync_master_enabled": true, "rpl_semi_sync_": true,
		"max_connections": false, "rpl_semi_syn": false, "server_id_x": false, "": false,
	} {
		if got := IsReserved(k); got != want {
			t.Errorf("IsReserved(%q) = %v, want %v", k, got, want)
		}
	}
}

// Dolphin's managed defaults must be reserved (else a user could silently
// replace them), and its tunable ones must not be (else users could not).
func TestDefaultsAgreeWithReservedKeys(t *testing.T) {
	for _, flavor := range []string{"mariadb", "mysql"} {
		settings, err := flavorDefaults(flavor)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range settings {
			if (s.kind == managed) != IsReserved(s.key) {
				t.Errorf("%s: %s is kind %d but IsReserved = %v", flavor, s.key, s.kind, IsReserved(s.key))
			}
		}
	}
}
