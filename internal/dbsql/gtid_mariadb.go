package dbsql

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// mariaDBGTID is one MariaDB global transaction id, domain-server-seq.
type mariaDBGTID struct {
	domain, server uint32
	seq            uint64
}

// mariaDBSet is a MariaDB GTID position: the last transaction per replication
// domain. In gtid_strict_mode a domain's sequence numbers only grow, so the
// position stands for every transaction of the domain up to seq.
type mariaDBSet struct {
	domains map[uint32]mariaDBGTID
}

var _ GTIDSet = mariaDBSet{}

// ParseMariaDBGTID parses a MariaDB GTID position such as "0-1-100,1-2-5"
// (the form of @@gtid_binlog_pos, @@gtid_slave_pos and Gtid_IO_Pos). When a
// domain appears more than once (as in @@gtid_binlog_state) the highest
// sequence number wins. Server ids are kept for String but do not take part in
// Contains or Equal. The empty string is the empty set.
func ParseMariaDBGTID(s string) (GTIDSet, error) {
	set := mariaDBSet{domains: map[uint32]mariaDBGTID{}}
	if strings.TrimSpace(s) == "" {
		return set, nil
	}
	for elem := range strings.SplitSeq(s, ",") {
		g, err := parseMariaDBOne(strings.TrimSpace(elem))
		if err != nil {
			return nil, fmt.Errorf("dbsql: invalid MariaDB GTID position %q: %w", s, err)
		}
		if cur, ok := set.domains[g.domain]; !ok || g.seq > cur.seq {
			set.domains[g.domain] = g
		}
	}
	return set, nil
}

func parseMariaDBOne(s string) (mariaDBGTID, error) {
	parts := strings.Split(s, "-")
	if len(parts) != 3 {
		return mariaDBGTID{}, fmt.Errorf("%q is not domain-server-seq", s)
	}
	domain, err := parseDecimal(parts[0], 32)
	if err != nil {
		return mariaDBGTID{}, fmt.Errorf("domain of %q: %w", s, err)
	}
	server, err := parseDecimal(parts[1], 32)
	if err != nil {
		return mariaDBGTID{}, fmt.Errorf("server id of %q: %w", s, err)
	}
	seq, err := parseDecimal(parts[2], 64)
	if err != nil {
		return mariaDBGTID{}, fmt.Errorf("sequence number of %q: %w", s, err)
	}
	return mariaDBGTID{domain: uint32(domain), server: uint32(server), seq: seq}, nil
}

// parseDecimal parses a non-empty run of ASCII digits (no sign, no spaces).
func parseDecimal(s string, bits int) (uint64, error) {
	if s == "" {
		return 0, fmt.Errorf("empty number")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%q is not a decimal number", s)
		}
	}
	v, err := strconv.ParseUint(s, 10, bits)
	if err != nil {
		return 0, fmt.Errorf("%q: %w", s, err)
	}
	return v, nil
}

// String returns the position as "domain-server-seq" entries sorted by domain.
func (s mariaDBSet) String() string {
	var b strings.Builder
	for i, d := range s.sortedDomains() {
		if i > 0 {
			b.WriteByte(',')
		}
		g := s.domains[d]
		fmt.Fprintf(&b, "%d-%d-%d", g.domain, g.server, g.seq)
	}
	return b.String()
}

func (s mariaDBSet) sortedDomains() []uint32 {
	ds := make([]uint32, 0, len(s.domains))
	for d := range s.domains {
		ds = append(ds, d)
	}
	slices.Sort(ds)
	return ds
}

// IsEmpty reports whether no domain has a transaction (seq 0 counts as none).
func (s mariaDBSet) IsEmpty() bool {
	for _, g := range s.domains {
		if g.seq > 0 {
			return false
		}
	}
	return true
}

// Contains reports whether, in every domain of other, the receiver's sequence
// number is at least other's.
func (s mariaDBSet) Contains(other GTIDSet) bool {
	if other == nil {
		return true
	}
	o, ok := other.(mariaDBSet)
	if !ok {
		return false
	}
	for d, g := range o.domains {
		if g.seq == 0 {
			continue
		}
		if mine, ok := s.domains[d]; !ok || mine.seq < g.seq {
			return false
		}
	}
	return true
}

// Equal reports whether both positions hold the same transactions per domain.
func (s mariaDBSet) Equal(other GTIDSet) bool {
	if other == nil {
		return s.IsEmpty()
	}
	return s.Contains(other) && other.Contains(s)
}

func (s mariaDBSet) union(o mariaDBSet) mariaDBSet {
	out := mariaDBSet{domains: make(map[uint32]mariaDBGTID, len(s.domains)+len(o.domains))}
	for d, g := range s.domains {
		out.domains[d] = g
	}
	for d, g := range o.domains {
		if cur, ok := out.domains[d]; !ok || g.seq > cur.seq {
			out.domains[d] = g
		}
	}
	return out
}
