package sysvars

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

var (
	// ErrInvalidName means a variable name is not a lower-case mysqld name
	// (^[a-z][a-z0-9_]{0,63}$).
	ErrInvalidName = errors.New("invalid variable name")
	// ErrInvalidValue means a value cannot be written as a SET GLOBAL literal,
	// or a literal is not one SetGlobalValue makes.
	ErrInvalidValue = errors.New("invalid value")
)

var (
	namePattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)
	// numberPattern matches what SQL reads as a numeric literal.
	numberPattern = regexp.MustCompile(`^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$`)
	// sizePattern matches a my.cnf size: digits and one of my_getopt's
	// suffixes (k, m, g, t, p, e; either case).
	sizePattern = regexp.MustCompile(`^([0-9]+)([kKmMgGtTpPeE])$`)
	// literalPattern matches every literal SetGlobalValue returns, and
	// DEFAULT: a keyword, a number, a quoted string without backslashes whose
	// quotes are doubled, or a hex string.
	literalPattern = regexp.MustCompile(`^(DEFAULT|ON|OFF|TRUE|FALSE|` +
		`[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|` +
		`'([^'\\\x00\r\n]|'')*'|X'([0-9A-F]{2})*')$`)
)

// SetGlobalValue converts value, written as in my.cnf, into the literal that
// SET GLOBAL name = … needs to give the variable the same value:
//
//   - the value is read as mysqld reads my.cnf: surrounding white space and
//     one pair of matching quotes are removed, and the escapes \n \t \r \b \s
//     \" \' \\ are decoded;
//   - a size with a suffix (512M, 2g; K, M, G, T, P, E, powers of 1024),
//     which my.cnf accepts and SET GLOBAL does not, becomes its number of
//     bytes;
//   - ON, OFF, TRUE, FALSE (any case) become the upper-case keyword; a plain
//     number (200, 0.5, 1) is kept as it is;
//   - anything else becomes a quoted string in which each quote is doubled,
//     or a hex string (X'…') when it holds a backslash: both read the same
//     whatever the session's sql_mode (NO_BACKSLASH_ESCAPES changes what a
//     backslash in a quoted string means).
//
// A value with a NUL or a line break, or that is not UTF-8, is an error
// (ErrInvalidValue), and so is a size beyond 2^64-1; a name that is not a
// mysqld variable name is ErrInvalidName. The type of the variable is not
// known here: a number given for a string variable stays a number, and the
// server's answer to a value of the wrong type is an error (1231, 1232), not
// 1238.
func SetGlobalValue(name, value string) (string, error) {
	if err := checkName(name); err != nil {
		return "", err
	}
	v := cnfValue(value)
	if strings.ContainsAny(v, "\x00\r\n") {
		return "", fmt.Errorf("sysvars: %s: %w %q: NUL and line breaks cannot be set", name, ErrInvalidValue, value)
	}
	if !utf8.ValidString(v) {
		return "", fmt.Errorf("sysvars: %s: %w %q: not UTF-8", name, ErrInvalidValue, value)
	}
	if m := sizePattern.FindStringSubmatch(v); m != nil {
		n, err := sizeBytes(m[1], m[2])
		if err != nil {
			return "", fmt.Errorf("sysvars: %s: %w %q: %w", name, ErrInvalidValue, value, err)
		}
		return strconv.FormatUint(n, 10), nil
	}
	switch u := strings.ToUpper(v); u {
	case "ON", "OFF", "TRUE", "FALSE":
		return u, nil
	}
	if numberPattern.MatchString(v) {
		return v, nil
	}
	if strings.Contains(v, `\`) {
		return "X'" + strings.ToUpper(hex.EncodeToString([]byte(v))) + "'", nil
	}
	return "'" + strings.ReplaceAll(v, "'", "''") + "'", nil
}

// Statement returns "SET GLOBAL name = literal". name must be a mysqld
// variable name (ErrInvalidName otherwise) and literal one that
// SetGlobalValue returns, or DEFAULT (ErrInvalidValue otherwise), so that
// nothing but one assignment can come out.
func Statement(name, literal string) (string, error) {
	if err := checkName(name); err != nil {
		return "", err
	}
	if !literalPattern.MatchString(literal) {
		return "", fmt.Errorf("sysvars: %s: %w: %q is not a literal SetGlobalValue makes (or DEFAULT)",
			name, ErrInvalidValue, literal)
	}
	return "SET GLOBAL " + name + " = " + literal, nil
}

func checkName(name string) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("sysvars: %w %q: want a lower-case mysqld variable name (^[a-z][a-z0-9_]{0,63}$)",
			ErrInvalidName, name)
	}
	return nil
}

// ParseSize reads a my.cnf size (plain bytes or with a suffix such as 64M) as a number of
// bytes.
func ParseSize(v string) (uint64, bool) { return sizeValue(v) }

// sizeValue reads a my.cnf size (plain bytes or with a suffix) as a number
// of bytes.
func sizeValue(v string) (uint64, bool) {
	v = cnfValue(v)
	if m := sizePattern.FindStringSubmatch(v); m != nil {
		n, err := sizeBytes(m[1], m[2])
		return n, err == nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	return n, err == nil
}

// sizeBytes multiplies digits by the power of 1024 that suffix names.
func sizeBytes(digits, suffix string) (uint64, error) {
	n, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size out of range: %w", err)
	}
	shift := 10 * (strings.IndexByte("kmgtpe", strings.ToLower(suffix)[0]) + 1)
	if n > math.MaxUint64>>shift {
		return 0, errors.New("size out of range: more than 2^64-1 bytes")
	}
	return n << shift, nil
}

// cnfValue reads a value as mysqld reads it from my.cnf (mysys my_default.c,
// the same in MariaDB and MySQL): white space trimmed, one pair of matching
// surrounding quotes removed, backslash escapes decoded. An unknown escape,
// and a backslash at the very end, are kept as written.
func cnfValue(raw string) string {
	v := strings.Trim(raw, " \t\n\v\f\r")
	if len(v) > 1 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		v = v[1 : len(v)-1]
	}
	if !strings.Contains(v, `\`) {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c != '\\' || i == len(v)-1 {
			b.WriteByte(c)
			continue
		}
		i++
		switch v[i] {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case 'b':
			b.WriteByte('\b')
		case 's':
			b.WriteByte(' ')
		case '"', '\'', '\\':
			b.WriteByte(v[i])
		default:
			b.WriteByte('\\')
			b.WriteByte(v[i])
		}
	}
	return b.String()
}
