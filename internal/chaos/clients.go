package chaos

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// The checker's clients: writers, the incrementer and the readers, each on its own session
// through the Service under test, reconnecting after every error.

// session is one client's connection and the server it reached.
type session struct {
	conn     *sql.Conn
	serverID uint32
	// client is the session's address as the server saw it (host:port).
	client string
	// staleSeen is set once the session made a stale read (OnStaleRead is called once).
	staleSeen bool
}

// connect opens a connection and asks which server it reached; nil after Stop.
func (c *Checker) connect() *session {
	for !c.stopped() {
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.OpTimeout)
		conn, err := c.db.Conn(ctx)
		if err == nil {
			var id uint32
			var host sql.NullString
			// A session sees its own row of the process list without the PROCESS privilege.
			if err = conn.QueryRowContext(ctx, "SELECT @@server_id, (SELECT HOST FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID())").Scan(&id, &host); err == nil {
				cancel()
				return &session{conn: conn, serverID: id, client: host.String}
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
		c.mu.Lock()
		c.nextSeq[client] = seq + 1
		c.mu.Unlock()
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
		c.acked[client].set(seq)
		c.noteRunLocked(client, seq, s.serverID, time.Now())
		c.writes++
		c.mu.Unlock()
		if c.stopped() {
			s.drop()
			return
		}
		time.Sleep(c.opts.Interval)
	}
}

// repeat runs op on one session until Stop, each call bounded by OpTimeout; after an error
// the session is dropped and a new one made once Pause has passed.
func (c *Checker) repeat(op func(ctx context.Context, s *session) error) {
	defer c.wg.Done()
	var s *session
	for !c.stopped() {
		if s == nil {
			if s = c.connect(); s == nil {
				return
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.OpTimeout)
		err := op(ctx, s)
		cancel()
		if err != nil {
			c.noteErr(err)
			s.drop()
			s = nil
			time.Sleep(c.opts.Pause)
		}
	}
	if s != nil {
		s.drop()
	}
}

// incrementer raises the counter one by one; every value it is told committed raises the floor.
func (c *Checker) incrementer() {
	c.repeat(func(ctx context.Context, s *session) error {
		var v int64
		if _, err := s.conn.ExecContext(ctx, "UPDATE "+c.opts.Database+".counter SET v = LAST_INSERT_ID(v + 1) WHERE id = 1"); err != nil {
			return err
		}
		if err := s.conn.QueryRowContext(ctx, "SELECT LAST_INSERT_ID()").Scan(&v); err != nil {
			return err
		}
		c.mu.Lock()
		c.increments++
		c.floor = max(c.floor, v)
		c.mu.Unlock()
		return nil
	})
}

// reader reads the counter; a value below the floor known when the read was sent is stale.
func (c *Checker) reader() {
	c.repeat(func(ctx context.Context, s *session) error {
		c.mu.Lock()
		floor := c.floor
		c.mu.Unlock()
		var v int64
		if err := s.conn.QueryRowContext(ctx, "SELECT v FROM "+c.opts.Database+".counter WHERE id = 1").Scan(&v); err != nil {
			return err
		}
		c.mu.Lock()
		c.reads++
		var first *StaleRead
		if v < floor {
			r := StaleRead{At: time.Now(), Got: v, Want: floor, ServerID: s.serverID, Client: s.client, Fault: c.currentKindLocked()}
			c.staleReads = append(c.staleReads, r)
			if !s.staleSeen {
				s.staleSeen, first = true, &r
			}
		}
		c.floor = max(c.floor, v)
		c.mu.Unlock()
		if first != nil && c.opts.OnStaleRead != nil {
			go c.opts.OnStaleRead(*first)
		}
		time.Sleep(2 * time.Millisecond)
		return nil
	})
}
