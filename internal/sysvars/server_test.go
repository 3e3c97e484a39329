package sysvars

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
)

// MariaDB error numbers the server test tells apart.
const (
	errReadOnlyVariable = 1238 // ER_INCORRECT_GLOBAL_LOCAL_VAR: "Variable '%s' is a read only variable"
	errUnknownVariable  = 1193 // ER_UNKNOWN_SYSTEM_VARIABLE
	errOptionPrevents   = 1290 // ER_OPTION_PREVENTS_STATEMENT
)

// staticErrno lists the Static entries that SET GLOBAL refuses with another
// error than 1238 (see their notes).
var staticErrno = map[string]uint16{
	"max_user_connections": errOptionPrevents, // started with 0
}

// TestSysvarsServerMariaDB checks every entry of the table for the installed
// MariaDB series against a real server (the one dbtest starts, configured
// with Dolphin's production my.cnf):
//
//   - its option name is one mariadbd accepts in my.cnf (so that a restart
//     with it does not fail on "unknown variable");
//   - its variable exists (SELECT @@GLOBAL.name; ERROR 1193 fails the test);
//   - SET GLOBAL name = <its current value, through SetGlobalValue and
//     Statement> succeeds for Dynamic and RuntimeSettable entries and fails
//     with ERROR 1238 (read only variable) for the other Static ones;
//   - for Dynamic ones, SET GLOBAL name = DEFAULT (what Diff uses for a
//     removed key) succeeds, and setting the old value back restores it
//     exactly (the literal round-trips).
//
// It proves the table is not guesswork, for the series installed here
// (MariaDB 10.11); the 11.4 and MySQL tables have no server to check against.
func TestSysvarsServerMariaDB(t *testing.T) {
	dbtest.RequireMariaDB(t)
	options := mariadbdOptions(t)
	// The thread pool's settings only stick with the thread pool on.
	c := dbtest.Start(t, dbtest.Options{Instances: 1, ExtraConfig: map[string]string{"thread_handling": "pool-of-threads"}})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	db, err := sql.Open("mysql", c.Instances[0].RootDSN("timeout=5s&readTimeout=2m&writeTimeout=2m"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx) // one session for everything
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	var version string
	if err := conn.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		t.Fatal(err)
	}
	major, minor, ok := parseVersion(version)
	if !ok || !hasSeries(FlavorMariaDB, major, minor) {
		t.Skipf("no sysvars table for the installed MariaDB %s", version)
	}
	vars := Variables(FlavorMariaDB, version)
	t.Logf("MariaDB %s: checking %d entries", version, len(vars))

	var dynamic, static, settable int
	for _, in := range vars {
		if !options[in.Option] && !(strings.HasPrefix(in.Option, "skip_") && options[strings.TrimPrefix(in.Option, "skip_")]) {
			t.Errorf("%s: mariadbd has no such option: a my.cnf with it would not start", in.Option)
		}
		cur, err := globalValue(ctx, conn, in.Variable)
		if err != nil {
			t.Errorf("%s: %v", in.Option, err)
			continue
		}
		stmt, err := setStatement(in.Variable, cur)
		if err != nil {
			t.Errorf("%s: current value %v: %v", in.Option, cur, err)
			continue
		}
		_, err = conn.ExecContext(ctx, stmt)
		switch {
		case in.Kind == Static && !in.RuntimeSettable:
			static++
			want := uint16(errReadOnlyVariable)
			if n, ok := staticErrno[in.Option]; ok {
				want = n
			}
			if mysqlErrno(err) != want {
				t.Errorf("%s is Static, but %s gave %v, want ERROR %d", in.Option, stmt, err, want)
			}
			continue
		case err != nil:
			t.Errorf("%s is %v (runtime settable: %v), but %s failed: %v", in.Option, in.Kind, in.RuntimeSettable, stmt, err)
			continue
		case in.Kind == Static:
			settable++
			continue
		}
		dynamic++
		if in.RaiseNeedsRestart {
			// Never DEFAULT (Diff does not send it): on 10.11.14 it crashed
			// the server when the default is above the cap, and on 10.11.19
			// it goes past the cap. Raising is probed on a server of its own
			// (TestSysvarsServerMariaDBRaiseAboveCap), so that a server the
			// probe might take down cannot fail the rest of this table.
			checkLower(ctx, t, conn, in, cur)
		} else if _, err := conn.ExecContext(ctx, "SET GLOBAL "+in.Variable+" = DEFAULT"); err != nil {
			t.Errorf("%s: SET GLOBAL %s = DEFAULT (what Diff does for a removed key): %v", in.Option, in.Variable, err)
		}
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			t.Errorf("%s: restoring with %s: %v", in.Option, stmt, err)
			continue
		}
		if after, err := globalValue(ctx, conn, in.Variable); err != nil || after != cur {
			t.Errorf("%s: after %s the value is %v (%v), want %v", in.Option, stmt, after, err, cur)
		}
	}
	t.Logf("%d dynamic, %d static (SET GLOBAL refused), %d static but settable at run time", dynamic, static, settable)
}

// checkLower checks a RaiseNeedsRestart size: SET GLOBAL to half of it
// takes effect. The caller restores cur.
func checkLower(ctx context.Context, t *testing.T, conn *sql.Conn, in Info, cur nullable) {
	t.Helper()
	n, ok := sizeValue(cur.s)
	if !cur.valid || !ok {
		t.Errorf("%s: current value %v is not a size", in.Option, cur)
		return
	}
	half := strconv.FormatUint(n/2/(1<<20)*(1<<20), 10) // whole MiB
	if _, err := conn.ExecContext(ctx, "SET GLOBAL "+in.Variable+" = "+half); err != nil {
		t.Errorf("%s: lowering to %s: %v", in.Option, half, err)
		return
	}
	if got := waitValue(ctx, conn, in.Variable, half, 10*time.Second); got != half {
		t.Errorf("%s: lowered to %s, the server reports %s", in.Option, half, got)
	}
}

// raiseCap is the cap (<name>_max) TestSysvarsServerMariaDBRaiseAboveCap
// starts its server with: small, so that asking for twice the cap asks for
// little memory. dbtest's servers start with innodb_buffer_pool_size=16M.
const raiseCap = 64 << 20

// TestSysvarsServerMariaDBRaiseAboveCap checks what RaiseNeedsRestart says
// of a size with a cap variable (<name>_max, e.g. innodb_buffer_pool_size_max,
// which MariaDB 10.11 has since 10.11.12): SET GLOBAL above the cap does not
// take it there at run time (10.11.19 truncates it to the cap with warning
// 1292), so a raise past the cap needs a restart.
//
// It runs on a server of its own, started with a small explicit cap: the
// default cap of 10.11.19 is 8 TiB, and asking for twice the default (what
// this test once did) made the server resize towards 8 TiB, which crashed it
// under load and failed every later check of the table with it.
func TestSysvarsServerMariaDBRaiseAboveCap(t *testing.T) {
	dbtest.RequireMariaDB(t)
	options := mariadbdOptions(t)
	extra := map[string]string{}
	var probed []Info
	version := mariadbdVersion(t)
	vars := Variables(FlavorMariaDB, version)
	if vars == nil {
		t.Skipf("no sysvars table for the installed MariaDB %s", version)
	}
	for _, in := range vars {
		if !in.RaiseNeedsRestart {
			continue
		}
		if !options[in.Option+"_max"] {
			t.Logf("%s: this mariadbd has no %s_max: raising it may work at run time here (nothing to probe)", in.Option, in.Option)
			continue
		}
		extra[in.Option+"_max"] = strconv.Itoa(raiseCap)
		probed = append(probed, in)
	}
	if len(probed) == 0 {
		t.Skip("no RaiseNeedsRestart size has a cap variable on this mariadbd")
	}
	c := dbtest.Start(t, dbtest.Options{Instances: 1, ExtraConfig: extra})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	db, err := sql.Open("mysql", c.Instances[0].RootDSN("timeout=5s&readTimeout=1m&writeTimeout=1m"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, in := range probed {
		capValue, err := globalValue(ctx, conn, in.Variable+"_max")
		if err != nil {
			t.Errorf("%s: %v", in.Option, err)
			continue
		}
		if c, ok := sizeValue(capValue.s); !ok || c != raiseCap {
			t.Errorf("%s_max = %v, want the %d the server was started with", in.Variable, capValue, raiseCap)
			continue
		}
		cur, err := globalValue(ctx, conn, in.Variable)
		if n, ok := sizeValue(cur.s); err != nil || !ok || n > raiseCap {
			t.Errorf("%s = %v (%v): want a size at most the cap %d", in.Option, cur, err, raiseCap)
			continue
		}
		above := strconv.FormatUint(2*raiseCap, 10)
		if _, err := conn.ExecContext(ctx, "SET GLOBAL "+in.Variable+" = "+above); err != nil {
			t.Logf("%s: raising above the cap (%d) to %s refused: %v", in.Option, raiseCap, above, err)
		}
		got := waitValue(ctx, conn, in.Variable, above, 2*time.Second)
		if got == above {
			t.Errorf("%s: raised above %s_max = %d at run time: RaiseNeedsRestart is wrong", in.Option, in.Variable, raiseCap)
		} else if n, ok := sizeValue(got); !ok || n > raiseCap {
			t.Errorf("%s: after asking for %s it is %s, above the cap %d", in.Option, above, got, raiseCap)
		} else {
			t.Logf("%s: asked for %s above the cap %d, the server keeps %s", in.Option, above, raiseCap, got)
		}
	}
	if err := conn.PingContext(ctx); err != nil {
		t.Errorf("the server does not answer after the probe: %v", err)
	}
}

// waitValue polls name for up to timeout until it reads want (a resize may
// run in the background), and returns the last value read.
func waitValue(ctx context.Context, conn *sql.Conn, name, want string, timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	for {
		v, err := globalValue(ctx, conn, name)
		if err == nil && v.s == want || time.Now().After(deadline) {
			return v.s
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// nullable is a variable's value as SELECT @@GLOBAL returns it.
type nullable struct {
	s     string
	valid bool
}

func (n nullable) String() string {
	if !n.valid {
		return "NULL"
	}
	return fmt.Sprintf("%q", n.s)
}

// globalValue reads SELECT @@GLOBAL.name; an unknown variable is an error
// saying so.
func globalValue(ctx context.Context, conn *sql.Conn, name string) (nullable, error) {
	var v sql.NullString
	err := conn.QueryRowContext(ctx, "SELECT @@GLOBAL."+name).Scan(&v)
	if mysqlErrno(err) == errUnknownVariable {
		return nullable{}, fmt.Errorf("the server has no variable %s (ERROR 1193): remove it from the table: %w", name, err)
	}
	if err != nil {
		return nullable{}, fmt.Errorf("SELECT @@GLOBAL.%s: %w", name, err)
	}
	return nullable{v.String, v.Valid}, nil
}

// setStatement is SET GLOBAL name = cur, built the way Dolphin builds it.
func setStatement(name string, cur nullable) (string, error) {
	if !cur.valid {
		return "SET GLOBAL " + name + " = NULL", nil
	}
	lit, err := SetGlobalValue(name, cur.s)
	if err != nil {
		return "", err
	}
	return Statement(name, lit)
}

func mysqlErrno(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

func hasSeries(flavor string, major, minor int) bool {
	for _, r := range releases[flavor] {
		if r.major == major && r.minor == minor {
			return true
		}
	}
	return false
}

// optionLine matches an option in `mariadbd --verbose --help`: "  --name",
// "  -C, --name".
var optionLine = regexp.MustCompile(`^  (?:-[A-Za-z?#], )?--([a-z0-9][a-z0-9-]*)`)

// mariadbdOptions returns the option names mariadbd accepts (underscored), as
// its --verbose --help lists them.
func mariadbdOptions(t *testing.T) map[string]bool {
	t.Helper()
	bin := mariadbdBinary(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--no-defaults", "--verbose", "--help").Output()
	if err != nil {
		t.Fatalf("%s --verbose --help: %v", bin, err)
	}
	opts := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if m := optionLine.FindStringSubmatch(line); m != nil {
			opts[strings.ReplaceAll(m[1], "-", "_")] = true
		}
	}
	if len(opts) < 300 || !opts["max_connections"] || !opts["innodb_buffer_pool_size"] {
		t.Fatalf("%s --verbose --help: found %d options, not the list expected", bin, len(opts))
	}
	return opts
}

// versionLine matches mariadbd --version: "mariadbd  Ver 10.11.19-MariaDB-0+deb12u1 for …".
var versionLine = regexp.MustCompile(`Ver (\d+\.\d+\.\d+)`)

// mariadbdVersion returns the version of the installed mariadbd, e.g. "10.11.19".
func mariadbdVersion(t *testing.T) string {
	t.Helper()
	bin := mariadbdBinary(t)
	out, err := exec.CommandContext(t.Context(), bin, "--version").Output()
	m := versionLine.FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("%s --version: %v: %q", bin, err, out)
	}
	return string(m[1])
}

// mariadbdBinary finds mariadbd on PATH or in /usr/sbin, /usr/bin.
func mariadbdBinary(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("mariadbd")
	if err != nil {
		for _, dir := range []string{"/usr/sbin", "/usr/bin"} {
			if p := filepath.Join(dir, "mariadbd"); isExecutable(p) {
				bin, err = p, nil
				break
			}
		}
	}
	if err != nil {
		t.Fatalf("mariadbd: %v", err)
	}
	return bin
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}
