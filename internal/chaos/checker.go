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
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"
)

// Schema creates the checker's tables in database db (which must exist); run it once, through
// the primary, before Start. The account needs CREATE, INSERT, UPDATE and SELECT on db.
func Schema(db string) []string {
	return []string{
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
	// Interval is how long a writer waits between two writes (default 2 ms): it keeps the
	// binary logs of a long run from filling the disk.
	Interval time.Duration
	// OnStaleRead, when set, is called (on its own goroutine) with the first stale read of
	// each session: a test can take a picture of the network path while it still holds.
	OnStaleRead func(StaleRead)
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
	if o.Interval <= 0 {
		o.Interval = 2 * time.Millisecond
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

	mu sync.Mutex
	// acks are the acknowledged writes of the windows not judged yet (memory stays bounded
	// over a long run: judged windows keep only their verdict and acked holds the rest).
	acks []Ack
	// acked is, per client, the set of acknowledged sequence numbers (a bitset).
	acked map[int]*bitset
	// ackRuns are, per client, its acknowledgements as runs of consecutive writes one server
	// acknowledged: a few per failover, so a lost write can be told by whom and when it was
	// acknowledged over runs of any length.
	ackRuns map[int][]AckRun
	// nextSeq is, per client, the next sequence number it will send.
	nextSeq    map[int]int64
	marks      []mark
	judged     int   // windows before this index in marks have their verdict
	floor      int64 // highest counter value known to be committed (acknowledged or read)
	staleReads []StaleRead
	reads      int
	increments int
	writes     int
	lastErr    error
}

// mark is the start of one fault's window.
type mark struct {
	kind       string
	at         time.Time
	firstSeq   map[int]int64 // per client, the first sequence number sent in this window
	splitBrain bool
	before     *Ack // the last acknowledgement before the fault
}

// StaleRead is a read of the counter that returned less than a value known, before the read
// was sent, to be committed.
type StaleRead struct {
	At        time.Time
	Got, Want int64
	ServerID  uint32
	// Client is the session's address as the server saw it (host:port), for matching the
	// read with the network path that carried it.
	Client string
	// Fault is the kind of the fault whose window the read fell in ("" before the first).
	Fault string
}

// Start runs the writers, the counter's incrementer and the readers against db (an
// application account through the primary Service) until Stop.
func Start(db *sql.DB, opts Options) *Checker {
	opts.defaults()
	c := &Checker{db: db, opts: opts, stop: make(chan struct{}), acked: map[int]*bitset{}, ackRuns: map[int][]AckRun{}, nextSeq: map[int]int64{}}
	for i := range opts.Writers {
		c.acked[i+1] = &bitset{}
		c.nextSeq[i+1] = 1
	}
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

// Acks returns a copy of the acknowledged writes of the windows not judged yet (the current
// and, until the next Mark, the previous fault's), in the order they were answered.
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

// Counts returns how many writes were acknowledged and how many counter reads and increments
// succeeded.
func (c *Checker) Counts() (writes, reads, increments int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes, c.reads, c.increments
}

// Mark records that a fault of kind is injected at at (call it just before injecting): it
// opens the fault's window and judges the windows that can no longer change (every write
// sent in them answered or given up, OpTimeout ago).
func (c *Checker) Mark(kind string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := mark{kind: kind, at: at, firstSeq: map[int]int64{}}
	for client, seq := range c.nextSeq {
		m.firstSeq[client] = seq
	}
	for i := range c.acks {
		if a := &c.acks[i]; a.Sent.Before(at) && (m.before == nil || a.Answered.After(m.before.Answered)) {
			b := *a
			m.before = &b
		}
	}
	c.marks = append(c.marks, m)
	c.judgeLocked(at.Add(-2 * c.opts.OpTimeout))
}

// judgeLocked gives its verdict on every window that ended before settled and forgets its
// acknowledgements.
func (c *Checker) judgeLocked(settled time.Time) {
	for c.judged < len(c.marks) {
		end := time.Time{}
		if c.judged+1 < len(c.marks) {
			end = c.marks[c.judged+1].at
		}
		if end.IsZero() || !end.Before(settled) {
			return
		}
		m := &c.marks[c.judged]
		var in []Ack
		if m.before != nil {
			in = append(in, *m.before)
		}
		for _, a := range c.acks {
			if !a.Sent.Before(m.at) && a.Sent.Before(end) {
				in = append(in, a)
			}
		}
		m.splitBrain = SplitBrainWindows(in, []time.Time{m.at}) > 0
		kept := c.acks[:0]
		for _, a := range c.acks {
			if !a.Sent.Before(end) {
				kept = append(kept, a) // a later window's (the last before a fault is in its mark)
			}
		}
		c.acks = kept
		c.judged++
	}
}

func (c *Checker) currentKindLocked() string {
	if len(c.marks) == 0 {
		return ""
	}
	return c.marks[len(c.marks)-1].kind
}

// Verdict is what the checker found, per fault kind ("" is the time before the first fault).
type Verdict struct {
	Lost       map[string]int
	SplitBrain map[string]int
	StaleReads map[string]int
	// LostRuns say who acknowledged the lost writes and when: the runs of acknowledgements
	// they belong to, each with how many of its writes were lost.
	LostRuns []LostRun
}

// AckRun is a run of one client's consecutive writes acknowledged by one server.
type AckRun struct {
	Client            int
	FirstSeq, LastSeq int64
	ServerID          uint32
	FirstAck, LastAck time.Time
}

// LostRun is an AckRun some of whose writes are missing on the final primary.
type LostRun struct {
	AckRun
	Lost int
	// Fault is the kind of the window the run's first lost write was sent in.
	Fault string
}

// String describes a lost run for a failure message.
func (l LostRun) String() string {
	return fmt.Sprintf("client %d: %d of writes %d-%d acknowledged by server %d between %s and %s lost (window %q)",
		l.Client, l.Lost, l.FirstSeq, l.LastSeq, l.ServerID, l.FirstAck.Format("15:04:05.000"), l.LastAck.Format("15:04:05.000"), l.Fault)
}

// noteRunLocked records that server acknowledged client's write seq at t.
func (c *Checker) noteRunLocked(client int, seq int64, server uint32, t time.Time) {
	runs := c.ackRuns[client]
	if n := len(runs); n > 0 && runs[n-1].ServerID == server {
		runs[n-1].LastSeq, runs[n-1].LastAck = seq, t
		return
	}
	c.ackRuns[client] = append(runs, AckRun{Client: client, FirstSeq: seq, LastSeq: seq, ServerID: server, FirstAck: t, LastAck: t})
}

// runOf is the run holding client's acknowledged write seq.
func (c *Checker) runOf(client int, seq int64) (AckRun, bool) {
	runs := c.ackRuns[client]
	i, found := slices.BinarySearchFunc(runs, seq, func(r AckRun, s int64) int {
		switch {
		case r.LastSeq < s:
			return -1
		case r.FirstSeq > s:
			return 1
		}
		return 0
	})
	if !found {
		return AckRun{}, false
	}
	return runs[i], true
}

// Finish stops the clients, judges every window and compares the acknowledged writes with what
// db (the final primary) holds.
func (c *Checker) Finish(ctx context.Context, db *sql.DB) (Verdict, error) {
	c.Stop()
	c.mu.Lock()
	c.marks = append(c.marks, mark{at: time.Now().Add(time.Hour)}) // closes the last window
	c.judgeLocked(time.Now().Add(2 * time.Hour))
	c.marks = c.marks[:len(c.marks)-1]
	c.mu.Unlock()
	v := Verdict{Lost: map[string]int{}, SplitBrain: map[string]int{}, StaleReads: map[string]int{}}
	for _, m := range c.marks {
		if m.splitBrain {
			v.SplitBrain[m.kind]++
		}
	}
	for _, r := range c.StaleReads() {
		v.StaleReads[r.Fault]++
	}
	have := map[int]*bitset{}
	for client := range c.acked {
		have[client] = &bitset{}
	}
	rows, err := db.QueryContext(ctx, "SELECT client, seq FROM "+c.opts.Database+".writes")
	if err != nil {
		return v, fmt.Errorf("reading the written rows: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var client int
		var seq int64
		if err := rows.Scan(&client, &seq); err != nil {
			return v, fmt.Errorf("reading the written rows: %w", err)
		}
		if b := have[client]; b != nil {
			b.set(seq)
		}
	}
	if err := rows.Err(); err != nil {
		return v, fmt.Errorf("reading the written rows: %w", err)
	}
	for client, acked := range c.acked {
		var cur *LostRun
		for seq := range acked.members() {
			if have[client].has(seq) {
				continue
			}
			kind := c.kindOfSeq(client, seq)
			v.Lost[kind]++
			run, _ := c.runOf(client, seq)
			if cur == nil || cur.FirstSeq != run.FirstSeq {
				v.LostRuns = append(v.LostRuns, LostRun{AckRun: run, Fault: kind})
				cur = &v.LostRuns[len(v.LostRuns)-1]
			}
			cur.Lost++
		}
	}
	return v, nil
}

// kindOfSeq is the fault kind whose window a client's write was sent in.
func (c *Checker) kindOfSeq(client int, seq int64) string {
	kind := ""
	for _, m := range c.marks {
		if seq >= m.firstSeq[client] {
			kind = m.kind
		}
	}
	return kind
}

// bitset is a set of positive sequence numbers.
type bitset struct{ words []uint64 }

func (b *bitset) set(n int64) {
	i := int(n / 64)
	for len(b.words) <= i {
		b.words = append(b.words, 0)
	}
	b.words[i] |= 1 << uint(n%64)
}

func (b *bitset) has(n int64) bool {
	i := int(n / 64)
	return i < len(b.words) && b.words[i]&(1<<uint(n%64)) != 0
}

// members yields the set's numbers in order.
func (b *bitset) members() func(func(int64) bool) {
	return func(yield func(int64) bool) {
		for i, w := range b.words {
			for j := 0; w != 0; j++ {
				if w&1 != 0 && !yield(int64(i*64+j)) {
					return
				}
				w >>= 1
			}
		}
	}
}
