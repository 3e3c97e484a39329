package dbsql

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
)

// recorder is a database/sql driver that records every statement with the
// connection it ran on and answers queries from canned results, so exact SQL
// can be tested without a server.
type recorder struct {
	mu      sync.Mutex
	conns   int
	log     []call
	results map[string]result // by exact query text
	errs    map[string]error  // by exact query text
}

// call is one recorded statement.
type call struct {
	conn  int
	query string
	args  []any
}

func (c call) String() string {
	if len(c.args) == 0 {
		return c.query
	}
	return fmt.Sprintf("%s %v", c.query, c.args)
}

// result is a canned query result; next, when set, is the following result set of a
// multi-statement query.
type result struct {
	cols []string
	rows [][]driver.Value
	next *result
}

func newRecorder() *recorder {
	return &recorder{results: map[string]result{}, errs: map[string]error{}}
}

// open returns an instance of flavor f on the recorder.
func (r *recorder) open(t *testing.T, f Flavor) *instance {
	t.Helper()
	d, err := dialectFor(f)
	if err != nil {
		t.Fatal(err)
	}
	in := openConnector(r, d, Config{Flavor: f})
	t.Cleanup(func() { in.Close() })
	return in
}

// statements returns the recorded statements, without the session setup,
// rendered as "query [args]", and clears the log.
func (r *recorder) statements(t *testing.T) []string {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	firstOfConn := map[int]bool{}
	var out []string
	for _, c := range r.log {
		if !firstOfConn[c.conn] {
			firstOfConn[c.conn] = true
			if c.query != sqlLogBinOff {
				t.Errorf("connection %d started with %q, want %q", c.conn, c.query, sqlLogBinOff)
			}
			continue
		}
		out = append(out, c.String())
	}
	r.log = nil
	return out
}

func (r *recorder) record(conn int, query string, args []driver.NamedValue) {
	vals := make([]any, len(args))
	for i, a := range args {
		vals[i] = a.Value
	}
	r.mu.Lock()
	r.log = append(r.log, call{conn: conn, query: query, args: vals})
	r.mu.Unlock()
}

// Connect implements driver.Connector.
func (r *recorder) Connect(context.Context) (driver.Conn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.conns++
	return &fakeConn{r: r, id: r.conns}, nil
}

// Driver implements driver.Connector.
func (r *recorder) Driver() driver.Driver { return fakeDriver{} }

type fakeDriver struct{}

func (fakeDriver) Open(string) (driver.Conn, error) { return nil, errors.New("use the connector") }

type fakeConn struct {
	r  *recorder
	id int
}

func (c *fakeConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("not supported") }
func (c *fakeConn) Close() error                        { return nil }
func (c *fakeConn) Begin() (driver.Tx, error)           { return nil, errors.New("not supported") }

func (c *fakeConn) ExecContext(_ context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	c.r.record(c.id, q, args)
	c.r.mu.Lock()
	err := c.r.errs[q]
	c.r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return driver.RowsAffected(0), nil
}

func (c *fakeConn) QueryContext(_ context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	c.r.record(c.id, q, args)
	c.r.mu.Lock()
	res, ok := c.r.results[q]
	err := c.r.errs[q]
	c.r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if !ok {
		// Unknown queries answer with no rows; a statement under test that
		// expects a row fails loudly on sql.ErrNoRows.
		return &fakeRows{cols: []string{"x"}}, nil
	}
	return &fakeRows{cols: res.cols, rows: res.rows, next: res.next}, nil
}

type fakeRows struct {
	cols []string
	rows [][]driver.Value
	i    int
	next *result
}

func (r *fakeRows) Columns() []string { return r.cols }
func (r *fakeRows) Close() error      { return nil }

// HasNextResultSet and NextResultSet serve a multi-statement result (driver.RowsNextResultSet).
func (r *fakeRows) HasNextResultSet() bool { return r.next != nil }
func (r *fakeRows) NextResultSet() error {
	if r.next == nil {
		return io.EOF
	}
	r.cols, r.rows, r.i, r.next = r.next.cols, r.next.rows, 0, r.next.next
	return nil
}
func (r *fakeRows) Next(dest []driver.Value) error {
	if r.i >= len(r.rows) {
		return io.EOF
	}
	copy(dest, r.rows[r.i])
	r.i++
	return nil
}

// row builds a one-row result from alternating column names and values.
func row(kv ...any) result {
	var res result
	var vals []driver.Value
	for i := 0; i < len(kv); i += 2 {
		res.cols = append(res.cols, kv[i].(string))
		vals = append(vals, kv[i+1])
	}
	res.rows = [][]driver.Value{vals}
	return res
}

// variables builds a SHOW VARIABLES/STATUS result.
func variables(kv ...string) result {
	res := result{cols: []string{"Variable_name", "Value"}}
	for i := 0; i < len(kv); i += 2 {
		res.rows = append(res.rows, []driver.Value{kv[i], kv[i+1]})
	}
	return res
}

func diffLines(got, want []string) string {
	if strings.Join(got, "\n") == strings.Join(want, "\n") {
		return ""
	}
	return fmt.Sprintf("got:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
}
