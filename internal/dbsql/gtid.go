package dbsql

import (
	"fmt"
)

// Flavor names a MySQL-family server whose SQL Dolphin speaks.
type Flavor string

const (
	// FlavorMariaDB is MariaDB 10.11 or 11.4 (domain-server-seq GTIDs).
	FlavorMariaDB Flavor = "mariadb"
	// FlavorMySQL is MySQL 8.4 LTS (uuid:interval GTID sets).
	FlavorMySQL Flavor = "mysql"
)

// GTIDSet is a set of transactions in a flavor's notation.
//
// Sets of different flavors are never related: Contains and Equal return false
// when other is of the other flavor. A nil other counts as the empty set.
type GTIDSet interface {
	// String returns the set in the flavor's notation; it parses back to an
	// Equal set.
	String() string
	// IsEmpty reports whether the set holds no transaction.
	IsEmpty() bool
	// Contains reports whether every transaction of other is in the receiver
	// (other ⊆ receiver).
	Contains(other GTIDSet) bool
	// Equal reports whether both sets hold the same transactions.
	Equal(other GTIDSet) bool
}

// ParseGTID parses s in the notation of flavor f.
func ParseGTID(f Flavor, s string) (GTIDSet, error) {
	switch f {
	case FlavorMariaDB:
		return ParseMariaDBGTID(s)
	case FlavorMySQL:
		return ParseMySQLGTID(s)
	default:
		return nil, fmt.Errorf("dbsql: unknown flavor %q", f)
	}
}

// unionGTID returns the union of a and b, which must be of the same flavor.
// For MariaDB positions the union keeps the higher sequence number per domain.
func unionGTID(a, b GTIDSet) (GTIDSet, error) {
	switch x := a.(type) {
	case mariaDBSet:
		y, ok := b.(mariaDBSet)
		if !ok {
			return nil, fmt.Errorf("dbsql: cannot merge %T into a MariaDB GTID set", b)
		}
		return x.union(y), nil
	case mysqlSet:
		y, ok := b.(mysqlSet)
		if !ok {
			return nil, fmt.Errorf("dbsql: cannot merge %T into a MySQL GTID set", b)
		}
		return x.union(y), nil
	default:
		return nil, fmt.Errorf("dbsql: unknown GTID set type %T", a)
	}
}

// AheadWithWritesOf reports whether set holds every transaction of base and
// more, and — as far as the notation tells — the extra transactions were
// written by the server with id serverID. A replica for which this holds
// against its primary's executed set received transactions its primary no
// longer has: a primary restarted with --init-rpl-role=SLAVE rolled back its
// unacknowledged tail after a replica had received it. A replica ahead with
// transactions of its own is errant instead.
//
// On MariaDB a position keeps only the last transaction per domain: every
// domain in which set is ahead must end with a transaction of serverID. On
// MySQL (server UUIDs, not ids) it returns false.
func AheadWithWritesOf(set, base GTIDSet, serverID uint32) bool {
	s, ok := set.(mariaDBSet)
	b, okBase := base.(mariaDBSet)
	if !ok || !okBase || !s.Contains(b) || b.Contains(s) {
		return false
	}
	for d, g := range s.domains {
		if g.seq > b.domains[d].seq && g.server != serverID {
			return false
		}
	}
	return true
}

// LastWriters returns the server_id of the last transaction of every domain of a MariaDB set
// (nil for a set of another flavor, or nil).
func LastWriters(set GTIDSet) []uint32 {
	s, ok := set.(mariaDBSet)
	if !ok {
		return nil
	}
	out := make([]uint32, 0, len(s.domains))
	for _, g := range s.domains {
		out = append(out, g.server)
	}
	return out
}
