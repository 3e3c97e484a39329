package binlog

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// ServerState is a MariaDB @@gtid_binlog_state: for each replication domain and each server
// that wrote in it, the last sequence number the binary log holds from that server
// ("0-1-90,0-2-120"). It says more than a Position (one GTID per domain): which servers'
// histories a server has followed, and how far.
type ServerState struct {
	last map[domainServer]uint64
}

type domainServer struct{ domain, server uint32 }

// ParseServerState parses @@gtid_binlog_state: GTIDs separated by commas, at most one per
// domain and server. "" is the empty state.
func ParseServerState(s string) (ServerState, error) {
	s = strings.Join(strings.Fields(s), "")
	st := ServerState{last: map[domainServer]uint64{}}
	if s == "" {
		return st, nil
	}
	for part := range strings.SplitSeq(s, ",") {
		g, err := ParseGTID(part)
		if err != nil {
			return ServerState{}, fmt.Errorf("GTID binlog state %q: %w", s, err)
		}
		k := domainServer{g.Domain, g.Server}
		if _, dup := st.last[k]; dup {
			return ServerState{}, fmt.Errorf("GTID binlog state %q: domain %d and server %d appear twice", s, g.Domain, g.Server)
		}
		st.last[k] = g.Seq
	}
	return st, nil
}

// String returns the state in @@gtid_binlog_state's form, sorted by domain, then server.
func (s ServerState) String() string {
	keys := slices.SortedFunc(maps.Keys(s.last), func(a, b domainServer) int {
		if a.domain != b.domain {
			return int(int64(a.domain) - int64(b.domain))
		}
		return int(int64(a.server) - int64(b.server))
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, GTID{Domain: k.domain, Server: k.server, Seq: s.last[k]}.String())
	}
	return strings.Join(parts, ",")
}

// lastOf is the last sequence number the state holds from g's server in g's domain.
func (s ServerState) lastOf(g GTID) (uint64, bool) {
	n, ok := s.last[domainServer{g.Domain, g.Server}]
	return n, ok
}

// divergence decides which transactions of one server (the instance) another server (the
// primary, by its @@gtid_binlog_state) holds. Within a domain, a history is a line of
// transactions in sequence-number order, and two servers that hold one same transaction hold
// the same line up to it (each got it from its origin after everything before it). So:
//
//   - an anchor is a transaction in the instance's binary log that the primary's state names
//     as the last it holds from that transaction's server; the primary holds the instance's
//     whole line up to its highest anchor in each domain;
//   - beyond the anchor, the primary holds a transaction of server S with sequence number n
//     when it holds a later one of S (n ≤ its last from S): S wrote n before that one, and
//     the primary followed S's line past it.
//
// Anything else is a transaction the primary lacks. When the primary's state misses a
// server (a primary restored from a backup remembers one GTID per domain), the rule keeps
// more than the primary lacks, never less: a copy too large is reviewed by a person, a copy
// too small loses writes.
type divergence struct {
	primary ServerState
	anchor  map[uint32]uint64
}

func newDivergence(primary ServerState) *divergence {
	return &divergence{primary: primary, anchor: map[uint32]uint64{}}
}

// see records a transaction of the instance (in any order): an anchor raises its domain's.
func (d *divergence) see(g GTID) {
	if n, ok := d.primary.lastOf(g); ok && n == g.Seq && g.Seq > d.anchor[g.Domain] {
		d.anchor[g.Domain] = g.Seq
	}
}

// heldByLine is the part of the rule that needs no anchor: the primary holds a later
// transaction of g's server.
func (d *divergence) heldByLine(g GTID) bool {
	n, ok := d.primary.lastOf(g)
	return ok && g.Seq <= n
}

// held says whether the primary holds g, once every transaction of the instance was seen.
func (d *divergence) held(g GTID) bool {
	return d.heldByLine(g) || g.Seq <= d.anchor[g.Domain]
}

// gtidRanges summarises GTIDs as contiguous runs per domain and server, in the order first
// seen: "0-1-91..100,0-1-104".
type gtidRanges struct {
	runs []GTID // start of each run
	ends []uint64
}

func (r *gtidRanges) add(g GTID) {
	if i := len(r.runs) - 1; i >= 0 && r.runs[i].Domain == g.Domain && r.runs[i].Server == g.Server && r.ends[i]+1 == g.Seq {
		r.ends[i] = g.Seq
		return
	}
	r.runs = append(r.runs, g)
	r.ends = append(r.ends, g.Seq)
}

func (r *gtidRanges) String() string {
	parts := make([]string, 0, len(r.runs))
	for i, g := range r.runs {
		if r.ends[i] == g.Seq {
			parts = append(parts, g.String())
		} else {
			parts = append(parts, g.String()+".."+strconv.FormatUint(r.ends[i], 10))
		}
	}
	return strings.Join(parts, ",")
}
