// Package chaos is the checker of Dolphin's fault-injection suite: clients that write and read
// through a cluster's primary Service, as an application would, while faults are injected, and
// the verdict on what they saw — acknowledged writes lost, windows in which two servers
// accepted writes (split brain), reads that went backwards (stale reads), and the outage each
// fault cost in the client's view.
//
// Every writer holds one connection at a time and asks it, once, which server it reached
// (@@server_id), so each acknowledgement is attributed to the server that gave it. A counter
// row is incremented by one client and read by others; an operation's outcome is compared
// only with operations that finished before it was sent (real time), so a checker verdict
// never depends on timing luck.
package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"
)

// Schema creates the checker's tables in database db; run it once, on the primary, before Start.
func Schema(db string) []string {
	return []string{
		"CREATE DATABASE IF NOT EXISTS " + db,
		"CREATE TABLE IF NOT EXISTS " + db + ".writes (client INT NOT NULL, seq BIGINT NOT NULL, PRIMARY KEY (client, seq))",
		"CREATE TABLE IF NOT EXISTS " + db + ".counter (id INT PRIMARY KEY, v BIGINT NOT NULL)",
		"INSERT IGNORE INTO " + db + ".counter VALUES (1, 0)",
	}
}

// Options configures a Checker.
type Options struct {
	// Database holds the checker's tables (Schema).
	Database string
	// Writers is the number of clients inserting rows (default 3).
	Writers int
	// Readers is the number of clients reading the counter (default 2).
	Readers int
	// OpTimeout bounds one statement (default 2 s): a client stuck on a hung server gives up
	// and reconnects, as applications with a query timeout do.
	OpTimeout time.Duration
	// Pause is how long a client waits after an error before it tries again (default 20 ms).
	Pause time.Duration
}

func (o *Options) defaults() {
	if o.Database == "" {
		o.Database = "chaos"
	}
	if o.Writers <= 0 {
		o.Writers = 3
	}
	if o.Readers <= 0 {
		o.Readers = 2
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = 2 * time.Second
	}
	if o.Pause <= 0 {
		o.Pause = 20 * time.Millisecond
	}
}

// Ack is one acknowledged write: which client, its sequence number, the server that
// acknowledged it, and when it was sent and answered.
type Ack struct {
	Client   int
	Seq      int64
	ServerID uint32
	Sent     time.Time
	Answered time.Time
}

// Checker runs the clients and keeps what they saw.
type Checker struct {
	db   *sql.DB
	opts Options
	stop chan struct{}
	wg   sync.WaitGroup

	mu         sync.Mutex
	acks       []Ack
	floor      int64 // highest counter value known to be committed (acknowledged or read)
	staleReads []StaleRead
	reads      int
	increments int
	lastErr    error
}

// StaleRead is a read of the counter that returned less than a value known, before the read
// was sent, to be committed.
type StaleRead struct {
	At        time.Time
	Got, Want int64
	ServerID  uint32
}

// Start runs the writers, the counter's incrementer and the readers against db (an
// application account through the primary Service) until Stop.
func Start(db *sql.DB, opts Options) *Checker {
	opts.defaults()
	c := &Checker{db: db, opts: opts, stop: make(chan struct{})}
	for i := range opts.Writers {
		c.wg.Add(1)
		go c.writer(i + 1)
	}
	c.wg.Add(1)
	go c.incrementer()
	for range opts.Readers {
		c.wg.Add(1)
		go c.reader()
	}
	return c
}

// Stop ends the clients and waits for them.
func (c *Checker) Stop() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	c.wg.Wait()
}

func (c *Checker) stopped() bool {
	select {
	case <-c.stop:
		return true
	default:
		return false
	}
}

// session is one client's connection and the server it reached.
type session struct {
	conn     *sql.Conn
	serverID uint32
}

// connect opens a connection and asks which server it reached; nil after Stop.
func (c *Checker) connect() *session {
	for !c.stopped() {
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.OpTimeout)
		conn, err := c.db.Conn(ctx)
		if err == nil {
			var id uint32
			if err = conn.QueryRowContext(ctx, "SELECT @@server_id").Scan(&id); err == nil {
				cancel()
				return &session{conn: conn, serverID: id}
			}
			_ = conn.Raw(func(any) error { return errors.New("discard") }) // never back to the pool
			conn.Close()
		}
		cancel()
		c.noteErr(err)
		time.Sleep(c.opts.Pause)
	}
	return nil
}

// drop closes a session after an error; the connection is not reused.
func (s *session) drop() {
	_ = s.conn.Raw(func(any) error { return errors.New("discard") })
	s.conn.Close()
}

func (c *Checker) noteErr(err error) {
	if err == nil {
		return
	}
	c.mu.Lock()
	c.lastErr = err
	c.mu.Unlock()
}

// LastError is the last error a client saw (for a failure message).
func (c *Checker) LastError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastErr
}

func (c *Checker) writer(client int) {
	defer c.wg.Done()
	var s *session
	for seq := int64(1); ; seq++ {
		if s == nil {
			if s = c.connect(); s == nil {
				return
			}
		}
		sent := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.OpTimeout)
		_, err := s.conn.ExecContext(ctx, "INSERT INTO "+c.opts.Database+".writes VALUES (?, ?)", client, seq)
		cancel()
		if err != nil {
			c.noteErr(err)
			s.drop()
			s = nil
			time.Sleep(c.opts.Pause)
			continue
		}
		c.mu.Lock()
		c.acks = append(c.acks, Ack{Client: client, Seq: seq, ServerID: s.serverID, Sent: sent, Answered: time.Now()})
		c.mu.Unlock()
		if c.stopped() {
			s.drop()
			return
		}
	}
}

// incrementer raises the counter one by one; every value it is told committed raises the floor.
func (c *Checker) incrementer() {
	defer c.wg.Done()
	var s *session
	for !c.stopped() {
		if s == nil {
			if s = c.connect(); s == nil {
				return
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.OpTimeout)
		var v int64
		_, err := s.conn.ExecContext(ctx, "UPDATE "+c.opts.Database+".counter SET v = LAST_INSERT_ID(v + 1) WHERE id = 1")
		if err == nil {
			err = s.conn.QueryRowContext(ctx, "SELECT LAST_INSERT_ID()").Scan(&v)
		}
		cancel()
		if err != nil {
			c.noteErr(err)
			s.drop()
			s = nil
			time.Sleep(c.opts.Pause)
			continue
		}
		c.mu.Lock()
		c.increments++
		c.floor = max(c.floor, v)
		c.mu.Unlock()
	}
	if s != nil {
		s.drop()
	}
}

// reader reads the counter; a value below the floor known when the read was sent is stale.
func (c *Checker) reader() {
	defer c.wg.Done()
	var s *session
	for !c.stopped() {
		if s == nil {
			if s = c.connect(); s == nil {
				return
			}
		}
		c.mu.Lock()
		floor := c.floor
		c.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.OpTimeout)
		var v int64
		err := s.conn.QueryRowContext(ctx, "SELECT v FROM "+c.opts.Database+".counter WHERE id = 1").Scan(&v)
		cancel()
		if err != nil {
			c.noteErr(err)
			s.drop()
			s = nil
			time.Sleep(c.opts.Pause)
			continue
		}
		c.mu.Lock()
		c.reads++
		if v < floor {
			c.staleReads = append(c.staleReads, StaleRead{At: time.Now(), Got: v, Want: floor, ServerID: s.serverID})
		}
		c.floor = max(c.floor, v)
		c.mu.Unlock()
		time.Sleep(2 * time.Millisecond)
	}
	if s != nil {
		s.drop()
	}
}

// Acks returns a copy of the acknowledged writes, in the order they were answered.
func (c *Checker) Acks() []Ack {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := append([]Ack(nil), c.acks...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Answered.Before(out[j].Answered) })
	return out
}

// StaleReads returns the stale reads seen so far.
func (c *Checker) StaleReads() []StaleRead {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]StaleRead(nil), c.staleReads...)
}

// Counts returns how many counter reads and increments succeeded.
func (c *Checker) Counts() (reads, increments int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads, c.increments
}

// FirstAckOfWriteSentAfter is when the first write sent at or after t was acknowledged, by
// any writer: the end of the outage a fault at t caused in the client's view.
func (c *Checker) FirstAckOfWriteSentAfter(t time.Time) (time.Time, bool) {
	var first time.Time
	for _, a := range c.Acks() {
		if !a.Sent.Before(t) && (first.IsZero() || a.Answered.Before(first)) {
			first = a.Answered
		}
	}
	return first, !first.IsZero()
}

// Lost returns the acknowledged writes missing from db (read from the final primary).
func (c *Checker) Lost(ctx context.Context, db *sql.DB) ([]Ack, error) {
	rows, err := db.QueryContext(ctx, "SELECT client, seq FROM "+c.opts.Database+".writes")
	if err != nil {
		return nil, fmt.Errorf("reading the written rows: %w", err)
	}
	defer rows.Close()
	type key struct {
		client int
		seq    int64
	}
	have := map[key]bool{}
	for rows.Next() {
		var k key
		if err := rows.Scan(&k.client, &k.seq); err != nil {
			return nil, fmt.Errorf("reading the written rows: %w", err)
		}
		have[k] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the written rows: %w", err)
	}
	var lost []Ack
	for _, a := range c.Acks() {
		if !have[key{a.Client, a.Seq}] {
			lost = append(lost, a)
		}
	}
	return lost, nil
}
