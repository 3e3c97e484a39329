package restore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/engineupgrade"
)

// Helpers of the tests that take a backup of a real mariadbd (internal/dbsql/dbtest) and
// restore it with IntoDataDir. They are skipped under -short.

// Accounts of the source cluster, and the new cluster's passwords: those hold quotes and
// backslashes, which must reach the server as written.
const (
	operatorUser   = "dolphin"
	oldOperatorPw  = "old-operator-pw"
	oldRootPw      = "old-root-pw"
	newOperatorPw  = `new'op\pw"x\'`
	newRootPw      = `r00t\'s 'pw\`
	sourceRowsT    = 2000
	sourceRowsU    = 50
	backupPrefix   = "ns/src/b1/"
	restoredSrvID  = "77"
	tmpDirTemplate = "dolphin-restore-"
)

// source is a server with data, accounts and replication settings, backed up once.
type source struct {
	inst     *dbtest.Instance
	root     string // the directory store's root
	manifest *backup.Manifest
}

// takeSource starts one server, fills it (app.t in GTID domain 0, app.u in domain 1), gives
// it an operator account and root@localhost password of its own and two replication
// connections that are not started, backs it up into a directory store, and stops it.
func takeSource(t *testing.T) *source {
	t.Helper()
	c := dbtest.Start(t, dbtest.Options{Instances: 1})
	inst := c.Instances[0]
	db := openDB(t, socketDSN(inst, "root", ""))
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	execAll(t, conn,
		"SET GLOBAL read_only = OFF",
		"CREATE DATABASE app",
		"CREATE TABLE app.t (id INT PRIMARY KEY, v VARCHAR(100) NOT NULL)",
		fmt.Sprintf("INSERT INTO app.t SELECT seq, CONCAT('row-', seq) FROM app.seq_1_to_%d", sourceRowsT),
		"SET SESSION gtid_domain_id = 1",
		"CREATE TABLE app.u (id INT PRIMARY KEY, v VARCHAR(100) NOT NULL)",
		fmt.Sprintf("INSERT INTO app.u SELECT seq, CONCAT('u-', seq) FROM app.seq_1_to_%d", sourceRowsU),
		"SET SESSION gtid_domain_id = 0",
		"CREATE USER '"+operatorUser+"'@'%' IDENTIFIED BY '"+oldOperatorPw+"'",
		"GRANT ALL PRIVILEGES ON *.* TO '"+operatorUser+"'@'%' WITH GRANT OPTION",
		// Replication settings of the source, which must not survive the restore.
		"CHANGE MASTER TO MASTER_HOST = '192.0.2.1', MASTER_PORT = 3306, MASTER_USER = 'repl', MASTER_USE_GTID = slave_pos",
		"CHANGE MASTER 'other' TO MASTER_HOST = '192.0.2.2', MASTER_PORT = 3306, MASTER_USER = 'repl'",
		"ALTER USER 'root'@'localhost' IDENTIFIED BY '"+oldRootPw+"'",
	)
	conn.Close()
	db.Close()

	root := t.TempDir()
	store := dirStore(t, root)
	m, err := backup.Take(t.Context(), backup.TakeOptions{
		Prefix: backupPrefix, Name: "b1", Namespace: "ns", Cluster: "src",
		SourceInstance: inst.Name, SourceRole: "primary",
		Socket: inst.SocketPath(), User: "root", Password: oldRootPw,
		DataDir: inst.DataDir, DefaultsFile: inst.ConfigFile, TmpDir: t.TempDir(),
		ExtraArgs: []string{"--log-copy-interval=100"},
	}, store)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	// The source's mariadb-upgrade record travels in the manifest (mariadb-backup does not
	// copy the file); testIntoEmptyDataDir checks that the restore writes it.
	if want := engineupgrade.TransferableRecord(inst.DataDir); want == "" || m.UpgradeRecord != want {
		t.Fatalf("manifest upgrade record %q, want the source's %q (the source must have one)", m.UpgradeRecord, want)
	}
	if !strings.Contains(m.GTIDPosition, "0-1-") || !strings.Contains(m.GTIDPosition, "1-1-") {
		t.Fatalf("backup position %q: want GTIDs in domains 0 and 1", m.GTIDPosition)
	}
	t.Logf("backup %s: GTID position %s, %d bytes stored", backupPrefix, m.GTIDPosition, m.StoredBytes())
	inst.Stop(t) // the restores need the CPU more
	return &source{inst: inst, root: root, manifest: m}
}

// target lays out a stopped server (server_id 77) whose empty DataDir holds lost+found, as a
// fresh volume does.
func target(t *testing.T) *dbtest.Instance {
	t.Helper()
	c := dbtest.Layout(t, dbtest.Options{Instances: 1, ExtraConfig: map[string]string{"server_id": restoredSrvID}})
	inst := c.Instances[0]
	if err := os.Mkdir(filepath.Join(inst.DataDir, lostAndFound), 0o700); err != nil {
		t.Fatal(err)
	}
	return inst
}

// options restores path of src into inst's DataDir with the new cluster's passwords.
func (src *source) options(t *testing.T, inst *dbtest.Instance, path string) Options {
	tmp, err := os.MkdirTemp("", tmpDirTemplate) // short: the socket goes there
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	return Options{
		Path: path, DataDir: inst.DataDir, DefaultsFile: inst.ConfigFile,
		OperatorUser: operatorUser, OperatorPassword: newOperatorPw, RootPassword: newRootPw,
		TmpDir: tmp, UseMemory: "64M", StartTimeout: time.Minute, StopTimeout: time.Minute,
		Log: func(format string, args ...any) { t.Logf("restore: "+format, args...) },
	}.withStore(src.root)
}

func (o Options) withStore(root string) Options {
	o.Store.Directory = root
	return o
}

func socketDSN(inst *dbtest.Instance, user, password string) string {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd = user, password
	cfg.Net, cfg.Addr = "unix", inst.SocketPath()
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = 2*time.Second, 30*time.Second, 30*time.Second
	return cfg.FormatDSN()
}

func tcpDSN(inst *dbtest.Instance, user, password string) string {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd = user, password
	cfg.Net, cfg.Addr = "tcp", inst.Addr()
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = 2*time.Second, 30*time.Second, 30*time.Second
	return cfg.FormatDSN()
}

func openDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(2)
	t.Cleanup(func() { db.Close() })
	return db
}

type execer interface {
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
}

type querier interface {
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

func execAll(t *testing.T, db execer, qs ...string) {
	t.Helper()
	for _, q := range qs {
		if _, err := db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func str(t *testing.T, db querier, q string) string {
	t.Helper()
	var s sql.NullString
	if err := db.QueryRowContext(t.Context(), q).Scan(&s); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return s.String
}

func count(t *testing.T, db querier, table string) int {
	t.Helper()
	n, err := strconv.Atoi(str(t, db, "SELECT COUNT(*) FROM "+table))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// rowCount returns how many rows q yields.
func rowCount(t *testing.T, db querier, q string) int {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// binlogEventTypes returns the types of every event in every binary log of the server.
func binlogEventTypes(t *testing.T, db querier) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), "SHOW BINARY LOGS")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for rows.Next() {
		var name string
		var size any
		if err := rows.Scan(&name, &size); err != nil {
			t.Fatal(err)
		}
		files = append(files, name)
	}
	rows.Close()
	var types []string
	for _, f := range files {
		rows, err := db.QueryContext(t.Context(), "SHOW BINLOG EVENTS IN '"+f+"'")
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			types = append(types, f+":"+vals[slices.Index(cols, "Event_type")].String)
		}
		rows.Close()
	}
	return types
}

// accessDenied reports whether err is the server's ER_ACCESS_DENIED_ERROR.
func accessDenied(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1045
}

// tree describes every file under dir: path, size, mode and modification time.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, fmt.Sprintf("%s %d %v %d", rel, fi.Size(), fi.Mode(), fi.ModTime().UnixNano()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// nextGTID returns pos with domain 0's GTID replaced by 0-serverID-(seq+1).
func nextGTID(t *testing.T, pos, serverID string) string {
	t.Helper()
	var out []string
	for _, g := range gtidSet(pos) {
		p := strings.Split(g, "-")
		if len(p) == 3 && p[0] == "0" {
			seq, err := strconv.ParseUint(p[2], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			g = fmt.Sprintf("0-%s-%d", serverID, seq+1)
		}
		out = append(out, g)
	}
	return strings.Join(out, ",")
}
