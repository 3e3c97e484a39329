package sysvars

import (
	"strings"
	"testing"
)

// Values of the wrong form are refused with the form they must take; values mysqld reads —
// sizes with suffixes, quoted values, booleans in any case — pass, and so do options whose
// type is a string, options the table does not know, and every MySQL value (no MySQL server
// checks a type table here). A type a later series changed follows the version.
func TestCheckValue(t *testing.T) {
	for _, tc := range []struct {
		flavor, option, value, refused string
	}{
		{FlavorMariaDB, "max_connections", "500", ""},
		{FlavorMariaDB, "innodb_buffer_pool_size", "2G", ""},
		{FlavorMariaDB, "innodb_buffer_pool_size", " '512m' ", ""},
		{FlavorMariaDB, "max_connections", "many", "max_connections must be a whole number"},
		{FlavorMariaDB, "max_connections", "1.5", "max_connections must be a whole number"},
		{FlavorMariaDB, "max_connections", "+200", ""},
		{FlavorMariaDB, "innodb_buffer_pool_size", "1GB", ""},
		{FlavorMariaDB, "innodb_buffer_pool_size", "512Mi", ""},
		{FlavorMariaDB, "innodb_buffer_pool_size", "512X", "must be a whole number"},
		{FlavorMariaDB, "long_query_time", "+0.5", ""},
		{FlavorMariaDB, "long_query_time", ".5", ""},
		{FlavorMariaDB, "skip_external_locking", "OFF", ""},
		{FlavorMariaDB, "long_query_time", "0.5", ""},
		{FlavorMariaDB, "long_query_time", "2", ""},
		{FlavorMariaDB, "long_query_time", "half a second", "long_query_time must be a number"},
		{FlavorMariaDB, "performance_schema", "ON", ""},
		{FlavorMariaDB, "performance_schema", "off", ""},
		{FlavorMariaDB, "performance_schema", "1", ""},
		{FlavorMariaDB, "performance_schema", "yes", "performance_schema must be ON or OFF"},
		{FlavorMariaDB, "sql_mode", "STRICT_TRANS_TABLES", ""},
		{FlavorMariaDB, "not_a_setting", "x", ""},
		{FlavorMySQL, "max_connections", "many", ""},
		{FlavorMariaDB, "innodb_doublewrite", "fast", "innodb_doublewrite must be ON or OFF"},
		{FlavorMariaDB + "@11.8", "innodb_doublewrite", "fast", ""},
		{FlavorMariaDB + "@11.4.5", "innodb_doublewrite", "fast", ""},
		{FlavorMariaDB + "@11.8", "max_connections", "many", "must be a whole number"},
	} {
		flavor, version, found := strings.Cut(tc.flavor, "@")
		if !found {
			version = "10.11"
		}
		err := CheckValue(flavor, version, tc.option, tc.value)
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s %s=%q: %v", tc.flavor, tc.option, tc.value, err)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("%s %s=%q: %v; want a refusal containing %q", tc.flavor, tc.option, tc.value, err, tc.refused)
		}
	}
}
