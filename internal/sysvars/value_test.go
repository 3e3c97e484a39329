package sysvars

import (
	"errors"
	"testing"
)

func TestSetGlobalValue(t *testing.T) {
	for _, c := range []struct{ value, want string }{
		// Sizes: my.cnf suffixes become bytes.
		{"512M", "536870912"},
		{"512m", "536870912"},
		{"1K", "1024"},
		{"2G", "2147483648"},
		{"1t", "1099511627776"},
		{"1P", "1125899906842624"},
		{"1E", "1152921504606846976"},
		{"15E", "17293822569102704640"},
		{"0M", "0"},
		{" 64M ", "67108864"},
		{`"64M"`, "67108864"},

		// Keywords and numbers.
		{"ON", "ON"},
		{"on", "ON"},
		{"Off", "OFF"},
		{"true", "TRUE"},
		{"FALSE", "FALSE"},
		{"1", "1"},
		{"0", "0"},
		{"200", "200"},
		{"0.5", "0.5"},
		{".5", ".5"},
		{"-1", "-1"},
		{"1e3", "1e3"},
		{"18446744073709551615", "18446744073709551615"},

		// Strings.
		{"utf8mb4", "'utf8mb4'"},
		{"STRICT_TRANS_TABLES,NO_ZERO_DATE", "'STRICT_TRANS_TABLES,NO_ZERO_DATE'"},
		{"+00:00", "'+00:00'"},
		{"SYSTEM", "'SYSTEM'"},
		{"index_merge=off,mrr=on", "'index_merge=off,mrr=on'"},
		{"/var/log/mysql/slow.log", "'/var/log/mysql/slow.log'"},
		{"", "''"},
		{"   ", "''"},
		{"1.5G", "'1.5G'"},       // not a size my_getopt reads: the server says so
		{"64MB", "'64MB'"},       // likewise
		{"yes", "'yes'"},         // SET GLOBAL takes ON/OFF/1/0, not yes/no
		{"DEFAULT", "'DEFAULT'"}, // a value, not the keyword
		{"it's", "'it''s'"},
		{`'quoted'`, "'quoted'"}, // my.cnf strips one pair of quotes
		{`"it's"`, "'it''s'"},    // …of either kind
		{`'a"`, `'''a"'`},        // unmatched quotes stay
		{`'`, `''''`},            // a single quote is not a pair
		{`''`, "''"},             // an empty quoted value
		{"SET NAMES utf8mb4; SELECT 1", "'SET NAMES utf8mb4; SELECT 1'"},
		{"x'; DROP TABLE t; --", "'x''; DROP TABLE t; --'"},
		{"héllo", "'héllo'"},

		// Backslashes: my.cnf escapes decoded, the result hex-encoded so that
		// NO_BACKSLASH_ESCAPES cannot change it.
		{`a\\b`, "X'615C62'"},   // \\ is one backslash
		{`a\qb`, "X'615C7162'"}, // unknown escape: kept
		{`ab\`, "X'61625C'"},    // trailing backslash: kept
		{`a\sb`, "'a b'"},       // \s is a space
		{`a\'b`, "'a''b'"},      // \' is a quote
		{`a\"b`, `'a"b'`},
		{`\tx`, "'\tx'"}, // decoded to a tab: no backslash left
	} {
		got, err := SetGlobalValue("some_var", c.value)
		if err != nil || got != c.want {
			t.Errorf("SetGlobalValue(%q) = %q, %v; want %q", c.value, got, err, c.want)
		}
	}
}

func TestSetGlobalValueErrors(t *testing.T) {
	for _, c := range []struct {
		name, value string
		want        error
	}{
		{"init_connect", "a\nb", ErrInvalidValue},
		{"init_connect", "a\rb", ErrInvalidValue},
		{"init_connect", "a\x00b", ErrInvalidValue},
		{"init_connect", `a\nb`, ErrInvalidValue}, // my.cnf's \n is a line break too
		{"init_connect", `a\rb`, ErrInvalidValue},
		{"init_connect", "\xff\xfe", ErrInvalidValue},
		{"max_connections", "16E", ErrInvalidValue},
		{"max_connections", "99999999999999999999K", ErrInvalidValue},
		{"Max_connections", "1", ErrInvalidName},
		{"max-connections", "1", ErrInvalidName},
		{"", "1", ErrInvalidName},
		{"x; DROP TABLE t", "1", ErrInvalidName},
		{"a2345678901234567890123456789012345678901234567890123456789012345", "1", ErrInvalidName}, // 65 characters
	} {
		got, err := SetGlobalValue(c.name, c.value)
		if !errors.Is(err, c.want) {
			t.Errorf("SetGlobalValue(%q, %q) = %q, %v; want %v", c.name, c.value, got, err, c.want)
		}
	}
}

func TestStatement(t *testing.T) {
	for _, c := range []struct{ name, literal, want string }{
		{"max_connections", "200", "SET GLOBAL max_connections = 200"},
		{"innodb_buffer_pool_size", "536870912", "SET GLOBAL innodb_buffer_pool_size = 536870912"},
		{"wait_timeout", "DEFAULT", "SET GLOBAL wait_timeout = DEFAULT"},
		{"slow_query_log", "ON", "SET GLOBAL slow_query_log = ON"},
		{"sql_mode", "'STRICT_TRANS_TABLES'", "SET GLOBAL sql_mode = 'STRICT_TRANS_TABLES'"},
		{"init_connect", "'it''s'", "SET GLOBAL init_connect = 'it''s'"},
		{"init_connect", "''", "SET GLOBAL init_connect = ''"},
		{"init_connect", "X'615C62'", "SET GLOBAL init_connect = X'615C62'"},
		{"long_query_time", "0.5", "SET GLOBAL long_query_time = 0.5"},
	} {
		got, err := Statement(c.name, c.literal)
		if err != nil || got != c.want {
			t.Errorf("Statement(%q, %q) = %q, %v; want %q", c.name, c.literal, got, err, c.want)
		}
	}
	for _, c := range []struct {
		name, literal string
		want          error
	}{
		{"max_connections; DROP TABLE t", "1", ErrInvalidName},
		{"MAX_CONNECTIONS", "1", ErrInvalidName},
		{"max_connections", "", ErrInvalidValue},
		{"max_connections", "512M", ErrInvalidValue},
		{"max_connections", "1; DROP TABLE t", ErrInvalidValue},
		{"init_connect", "'a'; DROP TABLE t; --'", ErrInvalidValue},
		{"init_connect", `'a\'`, ErrInvalidValue},
		{"init_connect", "'unterminated", ErrInvalidValue},
		{"init_connect", "X'6'", ErrInvalidValue},
		{"init_connect", "x'61'", ErrInvalidValue},
		{"sql_mode", "STRICT_TRANS_TABLES", ErrInvalidValue},
		{"init_connect", "'a\nb'", ErrInvalidValue},
	} {
		got, err := Statement(c.name, c.literal)
		if !errors.Is(err, c.want) {
			t.Errorf("Statement(%q, %q) = %q, %v; want %v", c.name, c.literal, got, err, c.want)
		}
	}
}

// TestSetGlobalValueMakesStatements checks that every literal SetGlobalValue
// returns is one Statement accepts.
func TestSetGlobalValueMakesStatements(t *testing.T) {
	for _, v := range []string{"512M", "on", "0.5", "-3", "1e3", "utf8mb4", "it's", `a\\b`, "", "héllo", "+01:00", `x'"y`} {
		lit, err := SetGlobalValue("some_var", v)
		if err != nil {
			t.Fatalf("SetGlobalValue(%q): %v", v, err)
		}
		if _, err := Statement("some_var", lit); err != nil {
			t.Errorf("SetGlobalValue(%q) = %q, which Statement rejects: %v", v, lit, err)
		}
	}
}
