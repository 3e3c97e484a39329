// Package binlog archives a MariaDB server's binary log continuously into an objectstore.Store
// and replays the archive onto a restored server up to a GTID position.
//
// The archive is a sequence of segments, each a valid binlog file (compressed) holding whole
// transactions, keyed by an epoch and a number — never by the server's binlog file names,
// which mean nothing on another server and are reused after a failover. Each segment's
// manifest records the GTID position before and after it and the commit times it covers;
// the manifest is written after the segment, so a segment without a manifest does not exist.
// See docs/design/0023-binlog-archive.md.
package binlog

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// GTID is one MariaDB global transaction id, domain-server-sequence.
type GTID struct {
	Domain uint32
	Server uint32
	Seq    uint64
}

// String returns "domain-server-seq".
func (g GTID) String() string {
	return strconv.FormatUint(uint64(g.Domain), 10) + "-" + strconv.FormatUint(uint64(g.Server), 10) + "-" +
		strconv.FormatUint(g.Seq, 10)
}

// ParseGTID parses "domain-server-seq", e.g. "0-1-5".
func ParseGTID(s string) (GTID, error) {
	parts := strings.Split(strings.TrimSpace(s), "-")
	if len(parts) != 3 {
		return GTID{}, fmt.Errorf("GTID %q is not domain-server-sequence (e.g. 0-1-5)", s)
	}
	d, err1 := strconv.ParseUint(parts[0], 10, 32)
	srv, err2 := strconv.ParseUint(parts[1], 10, 32)
	seq, err3 := strconv.ParseUint(parts[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return GTID{}, fmt.Errorf("GTID %q is not domain-server-sequence of decimal numbers (e.g. 0-1-5)", s)
	}
	return GTID{Domain: uint32(d), Server: uint32(srv), Seq: seq}, nil
}

// Position is a MariaDB GTID position: for each replication domain, the last transaction of
// that domain, as @@gtid_binlog_pos shows it ("0-1-5,1-2-9"). The zero value is the empty
// position (nothing applied). Copies of a Position are independent: Advance replaces the
// receiver's map rather than changing one that a copy shares.
type Position struct {
	last map[uint32]GTID
}

// Parse parses a GTID position: GTIDs separated by commas, spaces and newlines ignored, at
// most one per domain. "" is the empty position.
func Parse(s string) (Position, error) {
	s = strings.Join(strings.Fields(s), "")
	var p Position
	if s == "" {
		return p, nil
	}
	p.last = map[uint32]GTID{}
	for part := range strings.SplitSeq(s, ",") {
		g, err := ParseGTID(part)
		if err != nil {
			return Position{}, fmt.Errorf("GTID position %q: %w", s, err)
		}
		if _, dup := p.last[g.Domain]; dup {
			return Position{}, fmt.Errorf("GTID position %q: domain %d appears twice (a position has one GTID per domain, as @@gtid_binlog_pos)", s, g.Domain)
		}
		p.last[g.Domain] = g
	}
	return p, nil
}

// MustParse is Parse for constants and tests; it panics on a malformed position.
func MustParse(s string) Position {
	p, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return p
}

// String returns the position in @@gtid_binlog_pos form, sorted by domain; "" when empty.
func (p Position) String() string {
	parts := make([]string, 0, len(p.last))
	for _, d := range p.Domains() {
		parts = append(parts, p.last[d].String())
	}
	return strings.Join(parts, ",")
}

// IsEmpty reports whether the position has no domain.
func (p Position) IsEmpty() bool { return len(p.last) == 0 }

// Domains returns the position's domains in increasing order.
func (p Position) Domains() []uint32 { return slices.Sorted(maps.Keys(p.last)) }

// Last returns the last GTID of domain, if the position has the domain.
func (p Position) Last(domain uint32) (GTID, bool) {
	g, ok := p.last[domain]
	return g, ok
}

// Contains reports whether the transaction g is at or before p: p has g's domain with a
// sequence number at least g's. Server ids are not compared: MariaDB orders a domain by
// sequence number alone.
func (p Position) Contains(g GTID) bool {
	l, ok := p.last[g.Domain]
	return ok && l.Seq >= g.Seq
}

// Covers reports whether every transaction of o is at or before p (p is o or later in
// every domain of o). The empty position is covered by every position.
func (p Position) Covers(o Position) bool {
	for _, g := range o.last {
		if !p.Contains(g) {
			return false
		}
	}
	return true
}

// Equal reports whether both positions have the same domains with the same GTIDs, server
// ids included.
func (p Position) Equal(o Position) bool {
	return maps.Equal(p.last, o.last)
}

// Clone returns a copy of p with its own map.
func (p Position) Clone() Position {
	if p.last == nil {
		return Position{}
	}
	return Position{last: maps.Clone(p.last)}
}

// Advance records g as the last transaction of its domain. It refuses a g that does not
// come after the domain's last transaction (a sequence number not greater): a history
// whose order went back is a divergence, never something to archive.
func (p *Position) Advance(g GTID) error {
	if l, ok := p.last[g.Domain]; ok && g.Seq <= l.Seq {
		return fmt.Errorf("GTID %s does not follow %s in domain %d (sequence numbers must increase)", g, l, g.Domain)
	}
	next := make(map[uint32]GTID, len(p.last)+1)
	maps.Copy(next, p.last)
	next[g.Domain] = g
	p.last = next
	return nil
}

// With returns a copy of p in which each domain of o has o's GTID: the position reached
// from p by applying transactions up to o in o's domains.
func (p Position) With(o Position) Position {
	q := p.Clone()
	for d, g := range o.last {
		if q.last == nil {
			q.last = map[uint32]GTID{}
		}
		q.last[d] = g
	}
	return q
}
