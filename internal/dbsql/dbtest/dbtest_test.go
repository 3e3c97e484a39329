package dbtest

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/mycnf"
)

// openDB opens a connection pool to inst as root and closes it at the end of
// the test.
func openDB(t *testing.T, inst *Instance) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", inst.RootDSN("timeout=1s&readTimeout=5s&writeTimeout=5s"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestCluster(t *testing.T) {
	RequireMariaDB(t)
	began := time.Now()
	c := Start(t, Options{Instances: 2, ExtraConfig: map[string]string{"max_allowed_packet": "8388608"}})
	t.Logf("Start(2 instances): %v", time.Since(began).Round(time.Millisecond))
	if len(c.Instances) != 2 {
		t.Fatalf("got %d instances, want 2", len(c.Instances))
	}
	if c.Instances[0].Host == c.Instances[1].Host {
		t.Fatalf("both instances on %s", c.Instances[0].Host)
	}

	for n, inst := range c.Instances {
		if inst.Name != []string{"db-0", "db-1"}[n] || inst.Port != 3306 || !inst.Running() {
			t.Fatalf("instance %d: name %q port %d running %v", n, inst.Name, inst.Port, inst.Running())
		}
		if !strings.HasPrefix(inst.Host, "127.") || inst.Addr() != inst.Host+":3306" {
			t.Fatalf("%s: host %q addr %q", inst.Name, inst.Host, inst.Addr())
		}
		var (
			serverID, readOnly, strict, maxPacket int
			bind, reportHost                      string
		)
		err := openDB(t, inst).QueryRowContext(ctx(t),
			"SELECT @@server_id, @@read_only, @@gtid_strict_mode, @@bind_address, @@report_host, @@max_allowed_packet").
			Scan(&serverID, &readOnly, &strict, &bind, &reportHost, &maxPacket)
		if err != nil {
			t.Fatalf("%s: %v", inst.Name, err)
		}
		if serverID != n+1 || uint32(serverID) != inst.ServerID() {
			t.Errorf("%s: server_id %d, ServerID() %d, want %d", inst.Name, serverID, inst.ServerID(), n+1)
		}
		if readOnly != 1 || strict != 1 {
			t.Errorf("%s: read_only=%d gtid_strict_mode=%d, want 1 and 1 (production my.cnf)", inst.Name, readOnly, strict)
		}
		if bind != inst.Host || reportHost != inst.Host {
			t.Errorf("%s: bind_address=%q report_host=%q, want %q", inst.Name, bind, reportHost, inst.Host)
		}
		if maxPacket != 8388608 {
			t.Errorf("%s: max_allowed_packet=%d, want ExtraConfig's 8388608", inst.Name, maxPacket)
		}
	}

	// Data written before a crash survives it.
	victim, other := c.Instances[1], c.Instances[0]
	db := openDB(t, victim)
	for _, q := range []string{
		"CREATE DATABASE dbtest_t",
		"CREATE TABLE dbtest_t.rows (id INT PRIMARY KEY)",
		"INSERT INTO dbtest_t.rows VALUES (1), (2), (3)",
	} {
		if _, err := db.ExecContext(ctx(t), q); err != nil {
			t.Fatalf("%s: %s: %v", victim.Name, q, err)
		}
	}
	db.Close()

	began = time.Now()
	pid := victim.PID()
	victim.Kill(t)
	killed := time.Since(began)
	if victim.Running() || victim.PID() != 0 {
		t.Fatalf("%s still running after Kill", victim.Name)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("pid %d after Kill: %v, want ESRCH (reaped)", pid, err)
	}
	if err := openDB(t, victim).PingContext(ctx(t)); err == nil {
		t.Fatalf("%s: connected after Kill", victim.Name)
	}
	if err := openDB(t, other).PingContext(ctx(t)); err != nil {
		t.Fatalf("%s stopped answering when %s was killed: %v", other.Name, victim.Name, err)
	}

	restart := time.Now()
	victim.Start(t)
	t.Logf("Kill: %v, Start after kill (crash recovery): %v", killed.Round(time.Millisecond),
		time.Since(restart).Round(time.Millisecond))
	countRows := func() int {
		t.Helper()
		var rows int
		if err := openDB(t, victim).QueryRowContext(ctx(t), "SELECT COUNT(*) FROM dbtest_t.rows").Scan(&rows); err != nil {
			t.Fatalf("%s after restart: %v", victim.Name, err)
		}
		return rows
	}
	if rows := countRows(); rows != 3 {
		t.Fatalf("%s after kill and restart: %d rows, want 3", victim.Name, rows)
	}

	// A clean stop, then a start with extra arguments. (After a kill,
	// --init-rpl-role=SLAVE would roll back the last, unreplicated commits.)
	began = time.Now()
	victim.Stop(t)
	if victim.Running() {
		t.Fatalf("%s running after Stop", victim.Name)
	}
	stopped := time.Since(began)
	began = time.Now()
	victim.Start(t, "--init-rpl-role=SLAVE")
	t.Logf("Stop: %v, Start after clean stop: %v", stopped.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	if rows := countRows(); rows != 3 {
		t.Fatalf("%s after stop and restart: %d rows, want 3", victim.Name, rows)
	}
	out, err := os.ReadFile(filepath.Join(victim.Dir, "mariadbd.log"))
	if err != nil || !strings.Contains(string(out), "--defaults-file="+victim.ConfigFile+" --init-rpl-role=SLAVE\n") {
		t.Errorf("mariadbd.log does not show the restart with extra args (%v):\n%s", err, out)
	}
}

// TestClusterCleanup checks that a test's servers, directories and address locks are
// gone once the test ends.
func TestClusterCleanup(t *testing.T) {
	RequireMariaDB(t)
	var (
		pid        int
		dir, host  string
		lockPath   string
		subStarted bool
	)
	t.Run("start", func(t *testing.T) {
		c := Start(t, Options{Instances: 1})
		inst := c.Instances[0]
		pid, dir, host, lockPath = inst.PID(), c.Dir, inst.Host, inst.lock.path
		subStarted = pid != 0
	})
	if !subStarted {
		t.Fatal("the subtest did not start a server")
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("mariadbd pid %d after cleanup: %v, want ESRCH", pid, err)
	}
	for _, p := range []string{dir, lockPath} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after cleanup: %v, want it removed", p, err)
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "3306"))
	if err != nil {
		t.Errorf("address %s not free after cleanup: %v", host, err)
	} else {
		ln.Close()
	}
}

// TestConfig checks the rewritten my.cnf without starting a server.
func TestConfig(t *testing.T) {
	dir := t.TempDir()
	inst, err := newInstance(dir, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inst.lock.release)
	if err := writeConfig(inst, map[string]string{"skip_log_bin": "", "log_warnings": "4"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(inst.ConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	cnf := string(b)
	for _, bad := range []string{mycnf.InstanceConfigFile} {
		if strings.Contains(cnf, bad) {
			t.Errorf("my.cnf still mentions %s", bad)
		}
	}
	for _, w := range []string{
		"read_only=ON\n", "gtid_strict_mode=ON\n", "rpl_semi_sync_slave_enabled=ON\n", "log_bin=binlog\n",
		"innodb_buffer_pool_size=16M\n", "max_connections=60\n", "performance_schema=OFF\n",
		"innodb_log_file_size=16M\n", "datadir=" + mycnf.DataDir + "\n",
	} {
		if !strings.Contains(cnf, w) {
			t.Errorf("my.cnf lacks production setting %q", w)
		}
	}
	// In order: the last production setting, the instance include, test
	// paths, extra.
	want := []string{
		"sync_binlog=1\n",
		"!include " + filepath.Join(inst.Dir, "instance.cnf") + "\n",
		"[client]\nhost=" + inst.Host + "\nport=3306\nsocket=" + filepath.Join(inst.Dir, "mysqld.sock") + "\n",
		"[mysqld]\ndatadir=" + inst.DataDir + "\n",
		"bind_address=" + inst.Host + "\n",
		"log_error=" + inst.ErrorLog + "\n",
		"log_warnings=4\nskip_log_bin\n",
	}
	pos := 0
	for _, w := range want {
		i := strings.Index(cnf[pos:], w)
		if i < 0 {
			t.Fatalf("my.cnf lacks %q after offset %d:\n%s", w, pos, cnf)
		}
		pos += i + len(w)
	}
	if got := strings.Contains(cnf, "\nuser=root\n"); got != (os.Geteuid() == 0) {
		t.Errorf("user=root present=%v with euid %d", got, os.Geteuid())
	}
	b, err = os.ReadFile(filepath.Join(inst.Dir, "instance.cnf"))
	if err != nil || !strings.Contains(string(b), "server_id=3\n") || !strings.Contains(string(b), "report_host="+inst.Host+"\n") {
		t.Errorf("instance.cnf (%v):\n%s", err, b)
	}
	if got, want := inst.RootDSN("timeout=1s"), "root@tcp("+inst.Host+":3306)/?timeout=1s"; got != want {
		t.Errorf("RootDSN = %q, want %q", got, want)
	}
	if got, want := inst.RootDSN(""), "root@tcp("+inst.Host+":3306)/"; got != want {
		t.Errorf("RootDSN(\"\") = %q, want %q", got, want)
	}
}

func TestTail(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"", 3, ""},
		{"a\nb\nc\n", 2, "b\nc\n"},
		{"a\nb\nc", 5, "a\nb\nc\n"},
		{"a\nb\nc\n\n", 1, "c\n"},
	} {
		if got := tail([]byte(tc.in), tc.n); got != tc.want {
			t.Errorf("tail(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
