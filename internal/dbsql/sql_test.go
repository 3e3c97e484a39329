package dbsql

import (
	"context"
	"database/sql/driver"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

const (
	uuidA = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	// trickyPassword has a quote, a double quote and a backslash: it must
	// only ever travel as an argument (the driver quotes it), never inside
	// statement text.
	trickyPassword = `it's "q" \ b`
)

var testAccounts = Accounts{
	Operator:    Account{User: "dolphin", Password: "op-" + trickyPassword},
	Replication: Account{User: "repl", Password: "repl-" + trickyPassword},
	Monitor:     Account{User: "monitor", Password: "mon-" + trickyPassword},
	Root:        Account{User: "root", Password: "root-pw"},
}

// TestExactSQL pins the statements each operation sends, per flavor.
func TestExactSQL(t *testing.T) {
	src := Source{Host: "10.0.0.7", Port: 3306, User: "repl", Password: trickyPassword}
	tests := []struct {
		name    string
		run     func(context.Context, Instance) error
		mariadb []string
		mysql   []string
	}{{
		name: "ConfigureReplication",
		run:  func(ctx context.Context, in Instance) error { return in.ConfigureReplication(ctx, src) },
		mariadb: []string{
			"STOP SLAVE",
			"CHANGE MASTER TO MASTER_HOST=?, MASTER_PORT=?, MASTER_USER=?, MASTER_PASSWORD=?, " +
				"MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1, MASTER_HEARTBEAT_PERIOD=0.5, " +
				"MASTER_SSL=?, MASTER_SSL_CA=?, MASTER_SSL_VERIFY_SERVER_CERT=? " +
				`[10.0.0.7 3306 repl it's "q" \ b 0  0]`,
			"START SLAVE",
		},
		mysql: []string{
			"STOP REPLICA",
			"CHANGE REPLICATION SOURCE TO SOURCE_HOST=?, SOURCE_PORT=?, SOURCE_USER=?, SOURCE_PASSWORD=?, " +
				"SOURCE_AUTO_POSITION=1, SOURCE_CONNECT_RETRY=1, SOURCE_HEARTBEAT_PERIOD=1, GET_SOURCE_PUBLIC_KEY=1, " +
				"SOURCE_SSL=?, SOURCE_SSL_CA=?, SOURCE_SSL_VERIFY_SERVER_CERT=? " +
				`[10.0.0.7 3306 repl it's "q" \ b 0  0]`,
			"START REPLICA",
		},
	}, {
		name: "ConfigureReplication over TLS",
		run: func(ctx context.Context, in Instance) error {
			tlsSrc := src
			tlsSrc.TLS = &SourceTLS{CAFile: "/etc/mysql/tls/ca.crt", VerifyName: true}
			return in.ConfigureReplication(ctx, tlsSrc)
		},
		mariadb: []string{
			"STOP SLAVE",
			"CHANGE MASTER TO MASTER_HOST=?, MASTER_PORT=?, MASTER_USER=?, MASTER_PASSWORD=?, " +
				"MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1, MASTER_HEARTBEAT_PERIOD=0.5, " +
				"MASTER_SSL=?, MASTER_SSL_CA=?, MASTER_SSL_VERIFY_SERVER_CERT=? " +
				`[10.0.0.7 3306 repl it's "q" \ b 1 /etc/mysql/tls/ca.crt 1]`,
			"START SLAVE",
		},
		mysql: []string{
			"STOP REPLICA",
			"CHANGE REPLICATION SOURCE TO SOURCE_HOST=?, SOURCE_PORT=?, SOURCE_USER=?, SOURCE_PASSWORD=?, " +
				"SOURCE_AUTO_POSITION=1, SOURCE_CONNECT_RETRY=1, SOURCE_HEARTBEAT_PERIOD=1, GET_SOURCE_PUBLIC_KEY=1, " +
				"SOURCE_SSL=?, SOURCE_SSL_CA=?, SOURCE_SSL_VERIFY_SERVER_CERT=? " +
				`[10.0.0.7 3306 repl it's "q" \ b 1 /etc/mysql/tls/ca.crt 1]`,
			"START REPLICA",
		},
	}, {
		name:    "StartReplication",
		run:     func(ctx context.Context, in Instance) error { return in.StartReplication(ctx) },
		mariadb: []string{"START SLAVE"},
		mysql:   []string{"START REPLICA"},
	}, {
		name:    "StopReplicationIO",
		run:     func(ctx context.Context, in Instance) error { return in.StopReplicationIO(ctx) },
		mariadb: []string{"SET GLOBAL rpl_semi_sync_slave_kill_conn_timeout=1", "SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND = 'Slave_IO'", "STOP SLAVE IO_THREAD"},
		mysql:   []string{"STOP REPLICA IO_THREAD"},
	}, {
		name:    "StopReplication",
		run:     func(ctx context.Context, in Instance) error { return in.StopReplication(ctx) },
		mariadb: []string{"STOP SLAVE"},
		mysql:   []string{"STOP REPLICA"},
	}, {
		name:    "ResetReplication",
		run:     func(ctx context.Context, in Instance) error { return in.ResetReplication(ctx) },
		mariadb: []string{"STOP SLAVE", "RESET SLAVE ALL"},
		mysql:   []string{"STOP REPLICA", "RESET REPLICA ALL"},
	}, {
		name:    "SetReadOnly(true)",
		run:     func(ctx context.Context, in Instance) error { return in.SetReadOnly(ctx, true) },
		mariadb: []string{"SET GLOBAL read_only=ON"},
		mysql:   []string{"SET GLOBAL read_only=ON", "SET GLOBAL super_read_only=ON"},
	}, {
		name:    "SetReadOnly(false)",
		run:     func(ctx context.Context, in Instance) error { return in.SetReadOnly(ctx, false) },
		mariadb: []string{"SET GLOBAL read_only=OFF"},
		mysql:   []string{"SET GLOBAL super_read_only=OFF", "SET GLOBAL read_only=OFF"},
	}, {
		name:    "SetSemiSyncSource(true)",
		run:     func(ctx context.Context, in Instance) error { return in.SetSemiSyncSource(ctx, true) },
		mariadb: []string{"SET GLOBAL rpl_semi_sync_master_enabled=ON"},
		mysql:   []string{"SET GLOBAL rpl_semi_sync_source_enabled=ON"},
	}, {
		name:    "SetSemiSyncSource(false)",
		run:     func(ctx context.Context, in Instance) error { return in.SetSemiSyncSource(ctx, false) },
		mariadb: []string{"SET GLOBAL rpl_semi_sync_master_enabled=OFF"},
		mysql:   []string{"SET GLOBAL rpl_semi_sync_source_enabled=OFF"},
	}, {
		name:    "RestartSemiSyncSource",
		run:     func(ctx context.Context, in Instance) error { return in.RestartSemiSyncSource(ctx, false) },
		mariadb: []string{"SET GLOBAL rpl_semi_sync_master_enabled=OFF", "SET GLOBAL rpl_semi_sync_master_enabled=ON"},
		mysql:   []string{"SET GLOBAL rpl_semi_sync_source_enabled=OFF", "SET GLOBAL rpl_semi_sync_source_enabled=ON"},
	}, {
		name:    "SetSemiSyncTimeout",
		run:     func(ctx context.Context, in Instance) error { return in.SetSemiSyncTimeout(ctx, 4294967295) },
		mariadb: []string{"SET GLOBAL rpl_semi_sync_master_timeout=4294967295"},
		mysql:   []string{"SET GLOBAL rpl_semi_sync_source_timeout=4294967295"},
	}, {
		name:    "SetSemiSyncReplica(true)",
		run:     func(ctx context.Context, in Instance) error { return in.SetSemiSyncReplica(ctx, true) },
		mariadb: []string{"SET GLOBAL rpl_semi_sync_slave_enabled=ON"},
		mysql:   []string{"SET GLOBAL rpl_semi_sync_replica_enabled=ON"},
	}, {
		name:    "SeedGTIDForRejoin",
		run:     func(ctx context.Context, in Instance) error { return in.SeedGTIDForRejoin(ctx) },
		mariadb: []string{"STOP SLAVE", "SET GLOBAL gtid_slave_pos=@@GLOBAL.gtid_binlog_pos"},
		mysql:   nil,
	}, {
		name: "SetGlobalVariables",
		run: func(ctx context.Context, in Instance) error {
			return in.SetGlobalVariables(ctx, map[string]string{"max_connections": "200", "long_query_time": "DEFAULT", "sql_mode": "'STRICT_ALL_TABLES'"})
		},
		mariadb: []string{"SET GLOBAL long_query_time = DEFAULT", "SET GLOBAL max_connections = 200", "SET GLOBAL sql_mode = 'STRICT_ALL_TABLES'"},
		mysql:   []string{"SET GLOBAL long_query_time = DEFAULT", "SET GLOBAL max_connections = 200", "SET GLOBAL sql_mode = 'STRICT_ALL_TABLES'"},
	}, {
		name: "EnsureAccounts",
		run:  func(ctx context.Context, in Instance) error { return in.EnsureAccounts(ctx, testAccounts) },
		mariadb: []string{
			`CREATE USER IF NOT EXISTS ?@'%' IDENTIFIED BY ? [dolphin op-it's "q" \ b]`,
			`ALTER USER ?@'%' IDENTIFIED BY ? [dolphin op-it's "q" \ b]`,
			"GRANT ALL PRIVILEGES ON *.* TO ?@'%' WITH GRANT OPTION [dolphin]",
			`CREATE USER IF NOT EXISTS ?@'%' IDENTIFIED BY ? [repl repl-it's "q" \ b]`,
			`ALTER USER ?@'%' IDENTIFIED BY ? [repl repl-it's "q" \ b]`,
			"GRANT REPLICATION SLAVE, REPLICATION SLAVE ADMIN, BINLOG MONITOR ON *.* TO ?@'%' [repl]",
			`CREATE USER IF NOT EXISTS ?@'%' IDENTIFIED BY ? [monitor mon-it's "q" \ b]`,
			`ALTER USER ?@'%' IDENTIFIED BY ? [monitor mon-it's "q" \ b]`,
			"GRANT PROCESS, BINLOG MONITOR, SLAVE MONITOR ON *.* TO ?@'%' [monitor]",
			`ALTER USER IF EXISTS ?@'localhost' IDENTIFIED BY ? [root root-pw]`,
			lockdownQuery,
			"DROP USER IF EXISTS ?@? [root 127.0.0.1]",
			"DROP USER IF EXISTS ?@? [ localhost]",
		},
		mysql: []string{
			`CREATE USER IF NOT EXISTS ?@'%' IDENTIFIED BY ? [dolphin op-it's "q" \ b]`,
			`ALTER USER ?@'%' IDENTIFIED BY ? [dolphin op-it's "q" \ b]`,
			"GRANT ALL PRIVILEGES ON *.* TO ?@'%' WITH GRANT OPTION [dolphin]",
			`CREATE USER IF NOT EXISTS ?@'%' IDENTIFIED BY ? [repl repl-it's "q" \ b]`,
			`ALTER USER ?@'%' IDENTIFIED BY ? [repl repl-it's "q" \ b]`,
			"GRANT REPLICATION SLAVE ON *.* TO ?@'%' [repl]",
			`CREATE USER IF NOT EXISTS ?@'%' IDENTIFIED BY ? [monitor mon-it's "q" \ b]`,
			`ALTER USER ?@'%' IDENTIFIED BY ? [monitor mon-it's "q" \ b]`,
			"GRANT PROCESS, REPLICATION CLIENT ON *.* TO ?@'%' [monitor]",
			`ALTER USER IF EXISTS ?@'localhost' IDENTIFIED BY ? [root root-pw]`,
			lockdownQuery,
			"DROP USER IF EXISTS ?@? [root 127.0.0.1]",
			"DROP USER IF EXISTS ?@? [ localhost]",
		},
	}}
	for _, f := range []Flavor{FlavorMariaDB, FlavorMySQL} {
		for _, tc := range tests {
			t.Run(string(f)+"/"+tc.name, func(t *testing.T) {
				r := newRecorder()
				r.results[lockdownQuery] = result{
					cols: []string{"User", "Host"},
					rows: [][]driver.Value{{"root", "127.0.0.1"}, {"", "localhost"}},
				}
				in := r.open(t, f)
				if err := tc.run(t.Context(), in); err != nil {
					t.Fatal(err)
				}
				want := tc.mariadb
				if f == FlavorMySQL {
					want = tc.mysql
				}
				if d := diffLines(r.statementsKeep(t), want); d != "" {
					t.Error(d)
				}
				for _, c := range r.log {
					if strings.Contains(c.query, "it's") {
						t.Errorf("password inside statement text: %s", c.query)
					}
				}
			})
		}
	}
}

// statementsKeep is statements without clearing the log.
func (r *recorder) statementsKeep(t *testing.T) []string {
	t.Helper()
	r.mu.Lock()
	saved := append([]call(nil), r.log...)
	r.mu.Unlock()
	out := r.statements(t)
	r.mu.Lock()
	r.log = saved
	r.mu.Unlock()
	return out
}

func TestEnsureAccountsRejectsEmptyPassword(t *testing.T) {
	r := newRecorder()
	in := r.open(t, FlavorMariaDB)
	a := testAccounts
	a.Monitor.Password = ""
	if err := in.EnsureAccounts(t.Context(), a); err == nil || !strings.Contains(err.Error(), "monitor") {
		t.Fatalf("got %v, want an error about the monitor account", err)
	}
	if got := r.statements(t); len(got) != 0 {
		t.Fatalf("statements sent before validation failed: %q", got)
	}
}

// KillConnections spares only idle connections of the excepted users (a busy one may be a
// client wrongly using the operator account, its commit waiting for an acknowledgement);
// KillClientConnections spares every connection of the spared users, busy or idle.
func TestKillConnections(t *testing.T) {
	kills := []struct {
		name string
		kill func(Instance) error
		want []string
	}{
		{"KillConnections", func(in Instance) error { return in.KillConnections(t.Context(), []string{"dolphin"}) },
			[]string{"KILL CONNECTION ? [7]", "KILL CONNECTION ? [10]", "KILL CONNECTION ? [12]", "KILL CONNECTION ? [13]"}},
		{"KillClientConnections", func(in Instance) error { return in.KillClientConnections(t.Context(), []string{"dolphin"}) },
			[]string{"KILL CONNECTION ? [7]", "KILL CONNECTION ? [10]", "KILL CONNECTION ? [12]"}},
	}
	for _, f := range []Flavor{FlavorMariaDB, FlavorMySQL} {
		for _, k := range kills {
			t.Run(string(f)+"/"+k.name, func(t *testing.T) {
				r := newRecorder()
				d, _ := dialectFor(f)
				r.results[d.processList] = result{cols: []string{"ID", "USER", "COMMAND"}, rows: [][]driver.Value{
					{int64(5), "system user", "Slave_IO"},
					{int64(6), "repl", "Binlog Dump GTID"},
					{int64(7), "app", "Sleep"},
					{int64(8), "event_scheduler", "Daemon"},
					{int64(9), "dolphin", "Sleep"},
					{int64(10), "app", "Query"},
					{int64(11), "repl", "Binlog Dump"},
					{int64(12), nil, "Connect"},
					{int64(13), "dolphin", "Query"},
				}}
				in := r.open(t, f)
				if err := k.kill(in); err != nil {
					t.Fatal(err)
				}
				conns := map[int]bool{}
				for _, c := range r.log {
					conns[c.conn] = true
				}
				if len(conns) != 1 {
					t.Errorf("ran on %d connections, want the process list and the kills on one", len(conns))
				}
				if d := diffLines(r.statements(t), append([]string{d.processList}, k.want...)); d != "" {
					t.Error(d)
				}
			})
		}
	}
}

func TestKillConnectionsErrors(t *testing.T) {
	r := newRecorder()
	r.results[mariadbDialect.processList] = result{cols: []string{"ID", "USER", "COMMAND"},
		rows: [][]driver.Value{{int64(7), "app", "Sleep"}, {int64(8), "app", "Sleep"}}}
	in := r.open(t, FlavorMariaDB)

	// A connection that is gone by the time of KILL is not an error.
	r.errs[killConn] = &mysql.MySQLError{Number: errUnknownThread, Message: "Unknown thread id"}
	if err := in.KillConnections(t.Context(), nil); err != nil {
		t.Fatalf("unknown thread: %v", err)
	}
	if got := len(r.statements(t)); got != 3 {
		t.Fatalf("%d statements, want the list and two kills", got)
	}

	denied := &mysql.MySQLError{Number: 1095, Message: "You are not owner of thread 7"}
	r.errs[killConn] = denied
	if err := in.KillConnections(t.Context(), nil); !errors.Is(err, denied) {
		t.Fatalf("got %v, want it to wrap %v", err, denied)
	}
}

func TestWaitForGTID(t *testing.T) {
	mysqlSet := mustParse(t, FlavorMySQL, uuidA+":1-5")
	mariaSet := mustParse(t, FlavorMariaDB, "0-1-100")
	tests := []struct {
		flavor  Flavor
		set     GTIDSet
		timeout time.Duration
		reply   int64
		want    []string
		wantErr error
	}{
		{FlavorMariaDB, mariaSet, 1500 * time.Millisecond, 0, []string{"SELECT MASTER_GTID_WAIT(?, ?) [0-1-100 1.5]"}, nil},
		{FlavorMariaDB, mariaSet, time.Second, -1, []string{"SELECT MASTER_GTID_WAIT(?, ?) [0-1-100 1]"}, ErrWaitTimeout},
		{FlavorMySQL, mysqlSet, 1500 * time.Millisecond, 0, []string{"SELECT WAIT_FOR_EXECUTED_GTID_SET(?, ?) [" + uuidA + ":1-5 2]"}, nil},
		{FlavorMySQL, mysqlSet, 10 * time.Millisecond, 1, []string{"SELECT WAIT_FOR_EXECUTED_GTID_SET(?, ?) [" + uuidA + ":1-5 1]"}, ErrWaitTimeout},
		// Nothing to wait for: no statement at all.
		{FlavorMariaDB, mustParse(t, FlavorMariaDB, ""), time.Second, 0, nil, nil},
		{FlavorMySQL, nil, time.Second, 0, nil, nil},
	}
	for _, tc := range tests {
		t.Run(string(tc.flavor)+"/"+tc.timeout.String(), func(t *testing.T) {
			r := newRecorder()
			r.results[mariadbDialect.waitForGTID] = row("r", tc.reply)
			r.results[mysqlDialect.waitForGTID] = row("r", tc.reply)
			in := r.open(t, tc.flavor)
			err := in.WaitForGTID(t.Context(), tc.set, tc.timeout)
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("got error %v, want %v", err, tc.wantErr)
			}
			if d := diffLines(r.statements(t), tc.want); d != "" {
				t.Error(d)
			}
		})
	}

	t.Run("bad arguments", func(t *testing.T) {
		r := newRecorder()
		in := r.open(t, FlavorMySQL)
		if err := in.WaitForGTID(t.Context(), mariaSet, time.Second); err == nil {
			t.Error("a MariaDB position on a MySQL server: no error")
		}
		if err := in.WaitForGTID(t.Context(), mysqlSet, 0); err == nil {
			t.Error("zero timeout (MySQL would wait forever): no error")
		}
		if got := r.statements(t); len(got) != 0 {
			t.Errorf("statements sent: %q", got)
		}
	})
}

// TestSessionSetup checks that every pooled connection turns binary logging
// off before anything else, and that a connection that cannot is never used.
func TestSessionSetup(t *testing.T) {
	r := newRecorder()
	in := r.open(t, FlavorMySQL)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := in.SetReadOnly(t.Context(), true); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if r.conns < 2 {
		t.Logf("only %d connection(s) opened; the check is weaker", r.conns)
	}
	if got := len(r.statements(t)); got != 16 { // statements() checks the first of each connection
		t.Errorf("%d statements, want 16", got)
	}

	failing := newRecorder()
	denied := &mysql.MySQLError{Number: 1227, Message: "Access denied; you need SUPER"}
	failing.errs[sqlLogBinOff] = denied
	in = failing.open(t, FlavorMariaDB)
	if err := in.StopReplication(t.Context()); !errors.Is(err, denied) {
		t.Fatalf("got %v, want the session setup error", err)
	}
	for _, c := range failing.log {
		if c.query != sqlLogBinOff {
			t.Errorf("%q ran although the session could not turn sql_log_bin off", c.query)
		}
	}
}

func TestOpen(t *testing.T) {
	if _, err := Open(Config{Flavor: "postgres", Addr: "127.0.0.1:3306"}); err == nil {
		t.Error("unknown flavor: no error")
	}
	if _, err := Open(Config{Flavor: FlavorMariaDB}); err == nil {
		t.Error("no address: no error")
	}
	// Open does not dial: an address nothing listens on is fine until used.
	in, err := Open(Config{Flavor: FlavorMariaDB, Addr: "127.0.0.1:1", ConnectTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if _, err := in.Status(t.Context()); err == nil {
		t.Error("Status against a closed port: no error")
	}

	mc := driverConfig(Config{Flavor: FlavorMySQL, Addr: "db:3306", User: "u", Password: "p"})
	if !mc.InterpolateParams || mc.Timeout != defaultConnectTimeout || mc.ReadTimeout != 0 || mc.Net != "tcp" {
		t.Errorf("driver config: interpolate=%v timeout=%v readTimeout=%v net=%q",
			mc.InterpolateParams, mc.Timeout, mc.ReadTimeout, mc.Net)
	}
}

func mustParse(t *testing.T, f Flavor, s string) GTIDSet {
	t.Helper()
	g, err := ParseGTID(f, s)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
