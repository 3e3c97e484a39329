package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	_ "github.com/go-sql-driver/mysql"

	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// Helpers of the tests that archive from and replay into real mariadbd processes
// (internal/dbsql/dbtest). Those tests are skipped under -short.

// The archiver's account: REPLICATION SLAVE is all it needs.
const (
	archUser     = "dolphin-archiver"
	archPassword = "arch#pw 'x'"
)

// waitTimeout bounds every poll of these tests: generous, for a loaded 2-core machine.
const waitTimeout = 90 * time.Second

// server is one mariadbd with a root pool.
type server struct {
	t    *testing.T
	inst *dbtest.Instance
	db   *sql.DB
}

// startServers starts n fresh servers; each is writable and has the archiver's account,
// created without writing to the binary log.
func startServers(t *testing.T, n int) []*server {
	t.Helper()
	return startServersWith(t, n, nil)
}

// startServersWith is startServers with extra [mysqld] settings.
func startServersWith(t *testing.T, n int, extra map[string]string) []*server {
	t.Helper()
	c := dbtest.Start(t, dbtest.Options{Instances: n, ExtraConfig: extra})
	var out []*server
	for _, inst := range c.Instances {
		s := &server{t: t, inst: inst}
		s.open()
		s.execNoBinlog("SET GLOBAL read_only = OFF",
			fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", archUser, strings.ReplaceAll(archPassword, "'", "''")),
			fmt.Sprintf("GRANT REPLICATION SLAVE ON *.* TO '%s'@'%%'", archUser))
		out = append(out, s)
	}
	return out
}

func (s *server) open() {
	db, err := sql.Open("mysql", s.inst.RootDSN("timeout=2s&readTimeout=30s&writeTimeout=30s&interpolateParams=true"))
	if err != nil {
		s.t.Fatal(err)
	}
	db.SetMaxOpenConns(4)
	s.t.Cleanup(func() { db.Close() })
	s.db = db
}

// endpoint is where the archiver reads from s.
func (s *server) endpoint() Endpoint {
	return Endpoint{Host: s.inst.Host, Port: s.inst.Port, User: archUser, Password: archPassword}
}

func ctx30(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (s *server) exec(qs ...string) {
	s.t.Helper()
	for _, q := range qs {
		if _, err := s.db.ExecContext(ctx30(s.t), q); err != nil {
			s.t.Fatalf("%s: %s: %v", s.inst.Name, q, err)
		}
	}
}

// execNoBinlog runs qs on one connection with sql_log_bin=0: they take no GTID. The
// connection goes back to the pool with sql_log_bin=1 again.
func (s *server) execNoBinlog(qs ...string) {
	s.t.Helper()
	conn, err := s.db.Conn(ctx30(s.t))
	if err != nil {
		s.t.Fatal(err)
	}
	defer conn.Close()
	qs = append(append([]string{"SET SESSION sql_log_bin = 0"}, qs...), "SET SESSION sql_log_bin = 1")
	for _, q := range qs {
		if _, err := conn.ExecContext(ctx30(s.t), q); err != nil {
			s.t.Fatalf("%s: %s: %v", s.inst.Name, q, err)
		}
	}
}

func (s *server) str(q string) string {
	s.t.Helper()
	var v sql.NullString
	if err := s.db.QueryRowContext(ctx30(s.t), q).Scan(&v); err != nil {
		s.t.Fatalf("%s: %s: %v", s.inst.Name, q, err)
	}
	return v.String
}

func (s *server) pos() Position {
	s.t.Helper()
	p, err := Parse(s.str("SELECT @@gtid_binlog_pos"))
	if err != nil {
		s.t.Fatal(err)
	}
	return p
}

func (s *server) checksum(table string) string {
	s.t.Helper()
	var name, sum sql.NullString
	if err := s.db.QueryRowContext(ctx30(s.t), "CHECKSUM TABLE "+table).Scan(&name, &sum); err != nil {
		s.t.Fatalf("%s: CHECKSUM TABLE %s: %v", s.inst.Name, table, err)
	}
	return sum.String
}

// ids returns the ids in table, in order.
func (s *server) ids(table string) []int64 {
	s.t.Helper()
	return s.idList("SELECT id FROM " + table + " ORDER BY id")
}

// idList runs a query of one integer column and returns its values.
func (s *server) idList(q string) []int64 {
	s.t.Helper()
	rows, err := s.db.QueryContext(ctx30(s.t), q)
	if err != nil {
		s.t.Fatal(err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			s.t.Fatal(err)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		s.t.Fatal(err)
	}
	return out
}

// resetTo makes s look restored from a backup at pos: its binary log holds exactly pos.
func (s *server) resetTo(pos Position) {
	s.t.Helper()
	s.exec("RESET MASTER", fmt.Sprintf("SET GLOBAL gtid_binlog_state = '%s'", pos))
	if got := s.pos(); !got.Equal(pos) {
		s.t.Fatalf("%s: gtid_binlog_pos %q after reset, want %q", s.inst.Name, got, pos)
	}
}

// mysqlArgs run the mariadb client against s as root.
func (s *server) mysqlArgs() []string { return []string{"--defaults-file=" + s.inst.ConfigFile} }

// ack is a row a writer's INSERT committed, with the transaction's GTID.
type ack struct {
	id   int64
	gtid GTID
	at   time.Time // when the commit was acknowledged
}

// writer inserts one row per transaction into app.w on one connection, recording each
// acknowledged row with @@last_gtid. It survives a restarted server: a failed statement is
// retried on a new connection (that row may or may not be committed, so it is not recorded).
type writer struct {
	s      *server
	mu     sync.Mutex // held while writing one row; pause takes it
	acks   []ack
	failed atomic.Int64
	stop   chan struct{}
	done   chan struct{}
}

func createApp(s *server) {
	s.exec("CREATE DATABASE IF NOT EXISTS app",
		"CREATE TABLE app.w (id BIGINT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(200) NOT NULL, at DATETIME(6) NOT NULL)")
}

func startWriter(t *testing.T, s *server) *writer {
	w := &writer{s: s, stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	t.Cleanup(func() { w.halt() })
	return w
}

func (w *writer) run() {
	defer close(w.done)
	var conn *sql.Conn
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for n := 0; ; n++ {
		select {
		case <-w.stop:
			return
		default:
		}
		w.mu.Lock()
		a, err := w.one(&conn, n)
		if err == nil {
			w.acks = append(w.acks, a)
		}
		w.mu.Unlock()
		if err != nil {
			w.failed.Add(1)
			if conn != nil {
				conn.Close()
				conn = nil
			}
			select { // retry pacing while the server is down
			case <-w.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

func (w *writer) one(conn **sql.Conn, n int) (ack, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if *conn == nil {
		c, err := w.s.db.Conn(ctx)
		if err != nil {
			return ack{}, err
		}
		*conn = c
	}
	res, err := (*conn).ExecContext(ctx, "INSERT INTO app.w (v, at) VALUES (?, NOW(6))", fmt.Sprintf("row %d %s", n, strings.Repeat("x", n%150)))
	if err != nil {
		return ack{}, err
	}
	at := time.Now()
	id, err := res.LastInsertId()
	if err != nil {
		return ack{}, err
	}
	var last string
	if err := (*conn).QueryRowContext(ctx, "SELECT @@last_gtid").Scan(&last); err != nil {
		return ack{}, err
	}
	g, err := ParseGTID(last)
	if err != nil {
		return ack{}, err
	}
	return ack{id: id, gtid: g, at: at}, nil
}

// pause stops the writer between two rows until the returned function is called.
func (w *writer) pause() func() {
	w.mu.Lock()
	return w.mu.Unlock
}

func (w *writer) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acks)
}

// halt stops the writer and returns what it acknowledged.
func (w *writer) halt() []ack {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]ack(nil), w.acks...)
}

// waitFor is testenv.Eventually (waitTimeout) for a condition that describes what it saw.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	testenv.Eventually(t, waitTimeout, what, func() error {
		if ok, desc := cond(); !ok {
			return errors.New(desc)
		}
		return nil
	})
}

// runArchiver runs a new Archiver until the returned stop function is called (also at
// the test's end). Source is read through src at every connect.
func runArchiver(t *testing.T, opts ArchiverOptions, src *atomic.Pointer[Endpoint]) (*Archiver, func()) {
	t.Helper()
	opts.Source = func(context.Context) (Endpoint, error) {
		ep := src.Load()
		if ep == nil {
			return Endpoint{}, errors.New("no source")
		}
		return *ep, nil
	}
	if opts.ServerID == 0 {
		opts.ServerID = 4242
	}
	// DOLPHIN_TEST_V=1 shows the archiver's V(1) lines (segments) and go-mysql's.
	v, _ := strconv.Atoi(os.Getenv("DOLPHIN_TEST_V"))
	opts.Log = testr.NewWithOptions(t, testr.Options{Verbosity: v})
	a, err := NewArchiver(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Archiver.Run: %v", err)
				}
			case <-time.After(waitTimeout):
				t.Errorf("Archiver.Run did not return within %v of its context's end", waitTimeout)
			}
		})
	}
	t.Cleanup(stop)
	return a, stop
}

// waitArchived waits until the archiver's position is want.
func waitArchived(t *testing.T, a *Archiver, want Position) {
	t.Helper()
	waitFor(t, "archived up to "+want.String(), func() (bool, string) {
		st := a.Status()
		return st.Position == want.String(), fmt.Sprintf("status %+v", st)
	})
}

func newStore(t *testing.T) (objectstore.Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := objectstore.NewDirectory(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s, dir
}

// archivedTransactions lists the archive (failing on any problem) and reads every
// segment's transactions, checking each segment against its manifest.
func archivedTransactions(t *testing.T, store objectstore.Store, prefix string) (*Listing, []txn) {
	t.Helper()
	l, err := ListSegments(t.Context(), store, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("ListSegments: %v", err)
	}
	var all []txn
	for _, m := range l.Segments {
		txns, err := segmentTransactions(t.Context(), store, normPrefix(prefix), m)
		if err != nil {
			t.Fatal(err)
		}
		gtids, err := SegmentGTIDs(t.Context(), store, prefix, m)
		if err != nil || len(gtids) != len(txns) {
			t.Fatalf("SegmentGTIDs(%s) = %d GTIDs, %v; want %d", m.Name(), len(gtids), err, len(txns))
		}
		for i, g := range gtids {
			if g != txns[i].GTID {
				t.Fatalf("SegmentGTIDs(%s)[%d] = %s, want %s", m.Name(), i, g, txns[i].GTID)
			}
		}
		p := m.StartPosition()
		for _, x := range txns {
			if err := p.Advance(x.GTID); err != nil {
				t.Fatalf("segment %s: %v", m.Name(), err)
			}
		}
		if !p.Equal(m.EndPosition()) {
			t.Errorf("segment %s: transactions end at %q, manifest %q", m.Name(), p, m.End)
		}
		all = append(all, txns...)
	}
	return l, all
}

// checkExactlyOnce checks that txns are the source's transactions 1..end in domain 0, each
// once, in order, all from serverID.
func checkExactlyOnce(t *testing.T, txns []txn, end Position, serverID uint32) {
	t.Helper()
	last, ok := end.Last(0)
	if !ok {
		t.Fatalf("end %q has no domain 0", end)
	}
	if uint64(len(txns)) != last.Seq {
		t.Errorf("%d transactions archived, the source has %d", len(txns), last.Seq)
	}
	for i, x := range txns {
		if want := (GTID{Domain: 0, Server: serverID, Seq: uint64(i + 1)}); x.GTID != want {
			t.Fatalf("transaction %d is %s, want %s", i, x.GTID, want)
		}
	}
}

// copyTree copies a directory store's files.
func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(to, filepath.Dir(rel)), 0o750); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o640)
	})
	if err != nil {
		t.Fatal(err)
	}
}
