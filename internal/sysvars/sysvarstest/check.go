// Package sysvarstest checks a sysvars table against a real MariaDB server: the host's
// mariadbd (internal/sysvars' own test) or a server in a pod of the real node (the end-to-end
// suite, for the series the host cannot install, such as 11.8).
package sysvarstest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dolphin-operator/dolphin/internal/sysvars"
)

// MariaDB error numbers the check tells apart.
const (
	errReadOnlyVariable = 1238 // ER_INCORRECT_GLOBAL_LOCAL_VAR: "Variable '%s' is a read only variable"
	errUnknownVariable  = 1193 // ER_UNKNOWN_SYSTEM_VARIABLE
	errOptionPrevents   = 1290 // ER_OPTION_PREVENTS_STATEMENT
)

// staticErrno lists the Static entries that SET GLOBAL refuses with another error than 1238
// (see their notes).
var staticErrno = map[string]uint16{
	"max_user_connections": errOptionPrevents, // started with 0
}

// Counts says how many entries of each kind a check went through.
type Counts struct {
	Dynamic, Static, Settable int
}

// Check checks every entry of the MariaDB table for version against the server conn is a
// session of (it needs SUPER-like privileges; global settings are changed and put back, so
// run it on a server nothing else uses). options are the option names that server's mariadbd
// accepts (ParseHelp):
//
//   - its option name is one mariadbd accepts in my.cnf (so that a restart with it does not
//     fail on "unknown variable");
//   - its variable exists (SELECT @@GLOBAL.name; ERROR 1193 fails the test);
//   - SET GLOBAL name = <its current value, through SetGlobalValue and Statement> succeeds for
//     Dynamic and RuntimeSettable entries and fails with ERROR 1238 (read only variable) for
//     the other Static ones;
//   - for Dynamic ones, SET GLOBAL name = DEFAULT (what Diff uses for a removed key)
//     succeeds, and setting the old value back restores it exactly (the literal round-trips);
//     a RaiseNeedsRestart size is lowered instead (DEFAULT may be above its cap);
//   - its value type (sysvars.TypeOf) is the one information_schema.SYSTEM_VARIABLES gives
//     (INT/BIGINT [UNSIGNED]: ValueInteger, BOOLEAN: ValueBoolean, DOUBLE: ValueDecimal, any
//     other: ValueAny), and the server's current value passes sysvars.CheckValue.
func Check(ctx context.Context, t testing.TB, conn *sql.Conn, version string, options map[string]bool) Counts {
	t.Helper()
	var n Counts
	for _, in := range sysvars.Variables(sysvars.FlavorMariaDB, version) {
		if !options[in.Option] && !(strings.HasPrefix(in.Option, "skip_") && options[strings.TrimPrefix(in.Option, "skip_")]) {
			t.Errorf("%s: mariadbd %s has no such option: a my.cnf with it would not start", in.Option, version)
		}
		cur, err := GlobalValue(ctx, conn, in.Variable)
		if err != nil {
			t.Errorf("%s: %v", in.Option, err)
			continue
		}
		checkValueType(ctx, t, conn, version, in, cur)
		stmt, err := setStatement(in.Variable, cur)
		if err != nil {
			t.Errorf("%s: current value %v: %v", in.Option, cur, err)
			continue
		}
		_, err = conn.ExecContext(ctx, stmt)
		switch {
		case in.Kind == sysvars.Static && !in.RuntimeSettable:
			n.Static++
			want := uint16(errReadOnlyVariable)
			if e, ok := staticErrno[in.Option]; ok {
				want = e
			}
			if Errno(err) != want {
				t.Errorf("%s is Static, but %s gave %v, want ERROR %d", in.Option, stmt, err, want)
			}
			continue
		case err != nil:
			t.Errorf("%s is %v (runtime settable: %v), but %s failed: %v", in.Option, in.Kind, in.RuntimeSettable, stmt, err)
			continue
		case in.Kind == sysvars.Static:
			n.Settable++
			continue
		}
		n.Dynamic++
		if in.RaiseNeedsRestart {
			// Never DEFAULT (Diff does not send it): on 10.11.14 it crashed the server when
			// the default is above the cap, and on 10.11.19 it goes past the cap.
			checkLower(ctx, t, conn, in, cur)
		} else if _, err := conn.ExecContext(ctx, "SET GLOBAL "+in.Variable+" = DEFAULT"); err != nil {
			t.Errorf("%s: SET GLOBAL %s = DEFAULT (what Diff does for a removed key): %v", in.Option, in.Variable, err)
		}
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			t.Errorf("%s: restoring with %s: %v", in.Option, stmt, err)
			continue
		}
		if after, err := GlobalValue(ctx, conn, in.Variable); err != nil || after != cur {
			t.Errorf("%s: after %s the value is %v (%v), want %v", in.Option, stmt, after, err, cur)
		}
	}
	return n
}

// checkLower checks a RaiseNeedsRestart size: SET GLOBAL to half of it takes effect. The
// caller restores cur.
func checkLower(ctx context.Context, t testing.TB, conn *sql.Conn, in sysvars.Info, cur Value) {
	t.Helper()
	n, ok := sysvars.ParseSize(cur.S)
	if !cur.Valid || !ok {
		t.Errorf("%s: current value %v is not a size", in.Option, cur)
		return
	}
	half := strconv.FormatUint(n/2/(1<<20)*(1<<20), 10) // whole MiB
	if _, err := conn.ExecContext(ctx, "SET GLOBAL "+in.Variable+" = "+half); err != nil {
		t.Errorf("%s: lowering to %s: %v", in.Option, half, err)
		return
	}
	if got := WaitValue(ctx, conn, in.Variable, half, 10*time.Second); got != half {
		t.Errorf("%s: lowered to %s, the server reports %s", in.Option, half, got)
	}
}

// WaitValue polls name for up to timeout until it reads want (a resize may run in the
// background), and returns the last value read.
func WaitValue(ctx context.Context, conn *sql.Conn, name, want string, timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	for {
		v, err := GlobalValue(ctx, conn, name)
		if err == nil && v.S == want || time.Now().After(deadline) {
			return v.S
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Value is a variable's value as SELECT @@GLOBAL returns it.
type Value struct {
	S     string
	Valid bool
}

func (v Value) String() string {
	if !v.Valid {
		return "NULL"
	}
	return fmt.Sprintf("%q", v.S)
}

// GlobalValue reads SELECT @@GLOBAL.name; an unknown variable is an error saying so.
func GlobalValue(ctx context.Context, conn *sql.Conn, name string) (Value, error) {
	var v sql.NullString
	err := conn.QueryRowContext(ctx, "SELECT @@GLOBAL."+name).Scan(&v)
	if Errno(err) == errUnknownVariable {
		return Value{}, fmt.Errorf("the server has no variable %s (ERROR 1193): remove it from the table: %w", name, err)
	}
	if err != nil {
		return Value{}, fmt.Errorf("SELECT @@GLOBAL.%s: %w", name, err)
	}
	return Value{v.String, v.Valid}, nil
}

// setStatement is SET GLOBAL name = cur, built the way Dolphin builds it.
func setStatement(name string, cur Value) (string, error) {
	if !cur.Valid {
		return "SET GLOBAL " + name + " = NULL", nil
	}
	lit, err := sysvars.SetGlobalValue(name, cur.S)
	if err != nil {
		return "", err
	}
	return sysvars.Statement(name, lit)
}

// Errno is the MariaDB error number of err (0 when it is not a server error).
func Errno(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// optionLine matches an option in `mariadbd --verbose --help`: "  --name", "  -C, --name".
var optionLine = regexp.MustCompile(`^  (?:-[A-Za-z?#], )?--([a-z0-9][a-z0-9-]*)`)

// ParseHelp returns the option names (underscored) `mariadbd --verbose --help` lists.
func ParseHelp(out string) (map[string]bool, error) {
	opts := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		if m := optionLine.FindStringSubmatch(line); m != nil {
			opts[strings.ReplaceAll(m[1], "-", "_")] = true
		}
	}
	if len(opts) < 300 || !opts["max_connections"] || !opts["innodb_buffer_pool_size"] {
		return nil, fmt.Errorf("found %d options in mariadbd --verbose --help, not the list expected", len(opts))
	}
	return opts, nil
}

// checkValueType compares the value type the table gives a variable with the server's, and
// checks that the server's current value passes sysvars.CheckValue.
func checkValueType(ctx context.Context, t testing.TB, conn *sql.Conn, version string, in sysvars.Info, cur Value) {
	t.Helper()
	var typ string
	if err := conn.QueryRowContext(ctx, "SELECT VARIABLE_TYPE FROM information_schema.SYSTEM_VARIABLES WHERE VARIABLE_NAME = UPPER(?)", in.Variable).Scan(&typ); err != nil {
		t.Errorf("%s: its type in information_schema.SYSTEM_VARIABLES: %v", in.Option, err)
		return
	}
	want := sysvars.ValueAny
	switch {
	case strings.Contains(typ, "INT"):
		want = sysvars.ValueInteger
	case typ == "BOOLEAN":
		want = sysvars.ValueBoolean
	case typ == "DOUBLE":
		want = sysvars.ValueDecimal
	}
	if sysvars.Unchecked(in.Variable) != "" {
		want = sysvars.ValueAny
	}
	if got := sysvars.TypeOf(sysvars.FlavorMariaDB, version, in.Variable); got != want {
		t.Errorf("%s: the table's value type is %v, the server's %s (%v)", in.Option, got, typ, want)
	}
	if cur.Valid {
		if err := sysvars.CheckValue(sysvars.FlavorMariaDB, version, in.Option, cur.S); err != nil {
			t.Errorf("%s: the server's own value is refused: %v", in.Option, err)
		}
	}
}
