// Package mycnf generates the my.cnf that Dolphin mounts into every MySQL or
// MariaDB pod of a cluster.
//
// Generation is pure and deterministic: the same Input always yields the same
// bytes, so the file's hash can drive rolling restarts. The file holds the
// settings that replication and failover depend on (see ReservedKeys), a few
// tunable defaults, and the user's spec.mysqlConfig. Per-pod settings live in a
// second file, written at pod start (see InstanceConfig) and pulled in with
// !include.
package mycnf

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Flavors accepted in Input.Flavor.
const (
	// FlavorMariaDB selects MariaDB (10.11 and later) option names.
	FlavorMariaDB = "mariadb"
	// FlavorMySQL selects MySQL 8.4 option names.
	FlavorMySQL = "mysql"
)

// Paths and port written into the generated file. The pod spec must mount and
// probe the same ones.
const (
	// DataDir is the server's data directory (datadir).
	DataDir = "/var/lib/mysql"
	// SocketPath is the server's Unix socket, also used by local clients.
	SocketPath = "/run/mysqld/mysqld.sock"
	// PidFile is where the server writes its process id.
	PidFile = "/run/mysqld/mysqld.pid"
	// Port is the TCP port the server listens on.
	Port = 3306
	// ConfigDir is the directory the generated my.cnf is mounted in.
	ConfigDir = "/etc/mysql/dolphin"
	// InstanceConfigFile is the per-pod file written at pod start (server_id,
	// report_host, see InstanceConfig); the generated my.cnf ends by including it.
	InstanceConfigFile = "/etc/mysql/dolphin-instance/instance.cnf"
)

// Input is everything Generate needs for one cluster.
type Input struct {
	// Flavor is "mariadb" or "mysql".
	Flavor string
	// Overrides are the user's settings from spec.mysqlConfig, keys written
	// lower_case_with_underscores. They win over Dolphin's tunable defaults; a
	// key for which IsReserved is true is an error.
	Overrides map[string]string
	// Comments replace the "From spec.mysqlConfig" comment of an override Dolphin derived
	// itself (the buffer pool from the memory limit), saying where it comes from.
	Comments map[string]string
}

// Errors returned (wrapped, naming the key or flavor) by Generate.
var (
	// ErrUnknownFlavor means Input.Flavor is neither "mariadb" nor "mysql".
	ErrUnknownFlavor = errors.New("unknown flavor")
	// ErrReservedKey means an override sets a key that Dolphin manages.
	ErrReservedKey = errors.New("reserved key")
	// ErrInvalidKey means an override key is not a lower-case option name.
	ErrInvalidKey = errors.New("invalid key")
	// ErrInvalidValue means an override value cannot be written safely.
	ErrInvalidValue = errors.New("invalid value")
)

// reservedPrefix covers every semi-sync setting, MariaDB's and MySQL's.
const reservedPrefix = "rpl_semi_sync_"

// reserved maps each key Dolphin manages to the reason given when a user sets
// it. It must stay in step with the CEL rule on spec.mysqlConfig in the CRD.
var reserved = map[string]string{
	"server_id":                      "Dolphin sets it per pod (instance.cnf)",
	"log_bin":                        "replication needs the binary log",
	"log_bin_index":                  "replication needs the binary log",
	"skip_log_bin":                   "replication needs the binary log",
	"disable_log_bin":                "replication needs the binary log",
	"log_slave_updates":              "every replica must be able to become primary",
	"log_replica_updates":            "every replica must be able to become primary",
	"binlog_format":                  "replication is row-based",
	"gtid_mode":                      "failover relies on GTIDs",
	"gtid_strict_mode":               "failover relies on GTIDs",
	"enforce_gtid_consistency":       "failover relies on GTIDs",
	"gtid_domain_id":                 "failover relies on GTIDs",
	"read_only":                      "Dolphin makes only the primary writable",
	"super_read_only":                "Dolphin makes only the primary writable",
	"skip_slave_start":               "Dolphin starts replication itself",
	"skip_replica_start":             "Dolphin starts replication itself",
	"init_rpl_role":                  "Dolphin sets it when a failed primary rejoins",
	"relay_log":                      "Dolphin fixes the relay log names",
	"relay_log_index":                "Dolphin fixes the relay log names",
	"datadir":                        "the pod's volumes and probes use fixed paths",
	"socket":                         "the pod's volumes and probes use fixed paths",
	"port":                           "the pod's Services and probes use a fixed port",
	"bind_address":                   "the pod must be reachable through its Services",
	"user":                           "the container chooses the user mysqld runs as",
	"pid_file":                       "the pod's volumes and probes use fixed paths",
	"log_error":                      "the error log goes to stderr, collected by the container runtime",
	"sync_binlog":                    "acknowledged writes must survive a crash",
	"innodb_flush_log_at_trx_commit": "acknowledged writes must survive a crash",
}

// ReservedKeys returns the sorted keys Dolphin manages and users may not
// override. Every key starting with "rpl_semi_sync_" is reserved too; use
// IsReserved to test a key.
func ReservedKeys() []string {
	keys := make([]string, 0, len(reserved))
	for k := range reserved {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// IsReserved reports whether key is one Dolphin manages: one of ReservedKeys or
// any key starting with "rpl_semi_sync_".
func IsReserved(key string) bool {
	_, ok := reserved[key]
	return ok || strings.HasPrefix(key, reservedPrefix)
}

func reservedReason(key string) string {
	if r, ok := reserved[key]; ok {
		return r
	}
	return "Dolphin manages semi-synchronous replication"
}

var keyPattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// checkOverride validates one user setting. Nothing is normalised: a key or
// value that would not reach the server exactly as written is an error.
func checkOverride(key, value string) error {
	if !keyPattern.MatchString(key) {
		return fmt.Errorf("%w %q: must match %s (lower case, underscores instead of hyphens)",
			ErrInvalidKey, key, keyPattern)
	}
	if IsReserved(key) {
		return fmt.Errorf("%w %q: %s", ErrReservedKey, key, reservedReason(key))
	}
	for _, r := range value {
		switch {
		case r == '\n' || r == '\r':
			return fmt.Errorf("%w for key %q: must be a single line", ErrInvalidValue, key)
		case r < 0x20 || r == 0x7f:
			return fmt.Errorf("%w for key %q: contains control character %U", ErrInvalidValue, key, r)
		case r == '#':
			return fmt.Errorf("%w for key %q: '#' starts a comment in my.cnf and would cut the value short",
				ErrInvalidValue, key)
		}
	}
	return nil
}

// Generate returns the my.cnf for in.Flavor with in.Overrides merged in. An
// unknown flavor, or any override that is reserved, malformed or unsafe to
// write, is an error naming the key; all bad keys are reported at once.
func Generate(in Input) (string, error) {
	settings, err := flavorDefaults(in.Flavor)
	if err != nil {
		return "", err
	}

	keys := make([]string, 0, len(in.Overrides))
	for k := range in.Overrides {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var errs []error
	for _, k := range keys {
		if err := checkOverride(k, in.Overrides[k]); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return "", fmt.Errorf("mycnf: spec.mysqlConfig: %w", errors.Join(errs...))
	}

	for _, k := range keys {
		settings = merge(settings, k, in.Overrides[k])
		if why, ok := in.Comments[k]; ok {
			for i := range settings {
				if settings[i].key == k {
					settings[i].comment = []string{why}
				}
			}
		}
	}
	// Stable: repeated keys (plugin_load_add) keep Dolphin's entries first.
	sort.SliceStable(settings, func(i, j int) bool { return settings[i].key < settings[j].key })
	return render(in.Flavor, settings), nil
}

// merge applies one user setting to the defaults.
func merge(settings []setting, key, value string) []setting {
	user := setting{key: key, value: value, kind: tunable, comment: []string{"From spec.mysqlConfig."}}
	for i, s := range settings {
		if s.key != key {
			continue
		}
		if s.kind == additive {
			user.comment = []string{"From spec.mysqlConfig, loaded in addition to the plugins above."}
			return append(settings, user)
		}
		// Only tunable defaults get here: reserved keys were rejected.
		user.comment = []string{fmt.Sprintf("From spec.mysqlConfig (Dolphin default: %s).", s.value)}
		settings[i] = user
		return settings
	}
	return append(settings, user)
}

func render(flavor string, settings []setting) string {
	var b strings.Builder
	b.WriteString("# my.cnf for " + flavor + ", generated by the Dolphin operator. DO NOT EDIT.\n")
	b.WriteString("# Dolphin rewrites this file from the cluster spec: put your own settings in\n")
	b.WriteString("# spec.mysqlConfig. Per-pod settings (server_id, report_host) come from the\n")
	b.WriteString("# file included at the end.\n#\n")
	b.WriteString("# Left unset on purpose:\n")
	b.WriteString("# - log_error: without it the server logs to stderr, which the container\n")
	b.WriteString("#   runtime collects (kubectl logs); a file would fill the volume unseen.\n")
	b.WriteString("# - user: the pod runs mysqld as an unprivileged user already; started as\n")
	b.WriteString("#   root without user=, mysqld refuses to start instead of running as root.\n")
	if flavor == FlavorMySQL {
		b.WriteString("# - binlog_format: deprecated since MySQL 8.0.34 (setting it logs a warning);\n")
		b.WriteString("#   the default, ROW, is the format Dolphin needs.\n")
	}
	b.WriteString("\n[client]\n")
	b.WriteString("port=" + strconv.Itoa(Port) + "\n")
	b.WriteString("socket=" + SocketPath + "\n")
	b.WriteString("\n[mysqld]\n")
	for _, s := range settings {
		for _, c := range s.comment {
			b.WriteString("# " + c + "\n")
		}
		b.WriteString(s.key + "=" + s.value + "\n")
	}
	b.WriteString("\n# Per-pod settings, written at pod start.\n")
	b.WriteString("!include " + InstanceConfigFile + "\n")
	return b.String()
}

// InstanceConfig returns the per-pod file mounted at InstanceConfigFile: a
// [mysqld] section with server_id and report_host. serverID must be non-zero
// (MySQL and MariaDB refuse to replicate with server_id 0) and unique in the
// cluster; reportHost must be the pod's DNS name. Neither is checked here.
func InstanceConfig(serverID uint32, reportHost string) string {
	var b strings.Builder
	b.WriteString("# Per-pod settings, generated by the Dolphin operator. DO NOT EDIT.\n")
	b.WriteString("\n[mysqld]\n")
	b.WriteString("report_host=" + reportHost + "\n")
	b.WriteString("server_id=" + strconv.FormatUint(uint64(serverID), 10) + "\n")
	return b.String()
}

// Effective returns the settings a user may change as the server gets them: Dolphin's
// tunable defaults for flavor with the overrides merged in (key -> value as in my.cnf).
// Settings Dolphin manages itself are left out (they never change with the spec).
func Effective(flavor string, overrides map[string]string) (map[string]string, error) {
	settings, err := flavorDefaults(flavor)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, s := range settings {
		if s.kind == tunable {
			out[s.key] = s.value
		}
	}
	for k, v := range overrides {
		out[k] = v
	}
	return out, nil
}
