package dbsql

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// tsid is a MySQL transaction source id: a server UUID plus an optional tag
// (MySQL 8.3+ tagged GTIDs). Both are kept lower case.
type tsid struct {
	uuid, tag string
}

// interval is an inclusive range of MySQL transaction numbers.
type interval struct {
	start, end uint64
}

// mysqlSet is a MySQL GTID set: per source, sorted, disjoint, non-adjacent
// intervals.
type mysqlSet struct {
	sets map[tsid][]interval
}

var _ GTIDSet = mysqlSet{}

// maxGNO is the largest transaction number MySQL accepts.
const maxGNO = math.MaxInt64

// ParseMySQLGTID parses a MySQL GTID set such as
// "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7,\n4f…:3", the form of
// @@gtid_executed and Retrieved_Gtid_Set. Newlines and spaces around entries
// are allowed, UUIDs are case-insensitive, tagged GTIDs ("uuid:tag:1-3") are
// understood, and overlapping or adjacent intervals are merged. The empty
// string is the empty set.
func ParseMySQLGTID(s string) (GTIDSet, error) {
	set := mysqlSet{sets: map[tsid][]interval{}}
	if strings.TrimSpace(s) == "" {
		return set, nil
	}
	for elem := range strings.SplitSeq(s, ",") {
		if err := set.addText(strings.TrimSpace(elem)); err != nil {
			return nil, fmt.Errorf("dbsql: invalid MySQL GTID set %q: %w", s, err)
		}
	}
	for k, ivs := range set.sets {
		set.sets[k] = normalizeIntervals(ivs)
	}
	return set, nil
}

// addText adds one "uuid[:tag]:interval[:interval…][:tag:interval…]" entry.
func (s mysqlSet) addText(elem string) error {
	parts := strings.Split(elem, ":")
	uuid, err := parseUUID(parts[0])
	if err != nil {
		return err
	}
	cur := tsid{uuid: uuid}
	seen := false // whether cur got an interval
	for i, p := range parts[1:] {
		if p != "" && p[0] >= '0' && p[0] <= '9' {
			iv, err := parseInterval(p)
			if err != nil {
				return err
			}
			s.sets[cur] = append(s.sets[cur], iv)
			seen = true
			continue
		}
		if i > 0 && !seen {
			return fmt.Errorf("no interval for %q in %q", cur.uuid+":"+cur.tag, elem)
		}
		tag, err := parseTag(p)
		if err != nil {
			return err
		}
		cur, seen = tsid{uuid: uuid, tag: tag}, false
	}
	if !seen {
		return fmt.Errorf("no interval in %q", elem)
	}
	return nil
}

func parseUUID(s string) (string, error) {
	if len(s) != 36 {
		return "", fmt.Errorf("%q is not a UUID", s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return "", fmt.Errorf("%q is not a UUID", s)
			}
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f', c >= 'A' && c <= 'F':
		default:
			return "", fmt.Errorf("%q is not a UUID", s)
		}
	}
	return strings.ToLower(s), nil
}

// parseTag accepts a GTID tag: a letter or underscore, then up to 31 letters,
// digits or underscores.
func parseTag(s string) (string, error) {
	if s == "" || len(s) > 32 {
		return "", fmt.Errorf("invalid GTID tag %q", s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return "", fmt.Errorf("invalid GTID tag %q", s)
		}
	}
	return strings.ToLower(s), nil
}

func parseInterval(s string) (interval, error) {
	lo, hi, isRange := strings.Cut(s, "-")
	start, err := parseGNO(lo)
	if err != nil {
		return interval{}, err
	}
	end := start
	if isRange {
		if end, err = parseGNO(hi); err != nil {
			return interval{}, err
		}
	}
	if end < start {
		return interval{}, fmt.Errorf("interval %q ends before it starts", s)
	}
	return interval{start: start, end: end}, nil
}

func parseGNO(s string) (uint64, error) {
	v, err := parseDecimal(s, 64)
	if err != nil {
		return 0, err
	}
	if v == 0 || v > maxGNO {
		return 0, fmt.Errorf("transaction number %d out of range 1..%d", v, uint64(maxGNO))
	}
	return v, nil
}

// normalizeIntervals sorts ivs and merges overlapping or adjacent intervals.
func normalizeIntervals(ivs []interval) []interval {
	slices.SortFunc(ivs, func(a, b interval) int { return cmp.Compare(a.start, b.start) })
	out := ivs[:0]
	for _, iv := range ivs {
		if n := len(out); n > 0 && iv.start <= out[n-1].end+1 {
			out[n-1].end = max(out[n-1].end, iv.end)
			continue
		}
		out = append(out, iv)
	}
	return out
}

// String returns the set with sources sorted by UUID (untagged first, then
// tags in order), intervals as "a-b" or "a", and entries joined by ",".
func (s mysqlSet) String() string {
	keys := make([]tsid, 0, len(s.sets))
	for k, ivs := range s.sets {
		if len(ivs) > 0 {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b tsid) int {
		if c := strings.Compare(a.uuid, b.uuid); c != 0 {
			return c
		}
		return strings.Compare(a.tag, b.tag)
	})
	var b strings.Builder
	for i, k := range keys {
		switch {
		case i == 0:
			b.WriteString(k.uuid)
		case keys[i-1].uuid != k.uuid:
			b.WriteByte(',')
			b.WriteString(k.uuid)
		}
		if k.tag != "" {
			b.WriteByte(':')
			b.WriteString(k.tag)
		}
		for _, iv := range s.sets[k] {
			b.WriteByte(':')
			b.WriteString(strconv.FormatUint(iv.start, 10))
			if iv.end != iv.start {
				b.WriteByte('-')
				b.WriteString(strconv.FormatUint(iv.end, 10))
			}
		}
	}
	return b.String()
}

// IsEmpty reports whether the set holds no transaction.
func (s mysqlSet) IsEmpty() bool {
	for _, ivs := range s.sets {
		if len(ivs) > 0 {
			return false
		}
	}
	return true
}

// Contains reports whether every transaction of other is in the receiver.
func (s mysqlSet) Contains(other GTIDSet) bool {
	if other == nil {
		return true
	}
	o, ok := other.(mysqlSet)
	if !ok {
		return false
	}
	for k, ivs := range o.sets {
		mine := s.sets[k]
		for _, iv := range ivs {
			if !covered(mine, iv) {
				return false
			}
		}
	}
	return true
}

// covered reports whether iv lies inside one interval of the normalized ivs.
func covered(ivs []interval, iv interval) bool {
	i, _ := slices.BinarySearchFunc(ivs, iv.start, func(x interval, start uint64) int {
		if x.end < start {
			return -1
		}
		if x.start > start {
			return 1
		}
		return 0
	})
	return i < len(ivs) && ivs[i].start <= iv.start && iv.end <= ivs[i].end
}

// Equal reports whether both sets hold the same transactions.
func (s mysqlSet) Equal(other GTIDSet) bool {
	if other == nil {
		return s.IsEmpty()
	}
	return s.Contains(other) && other.Contains(s)
}

func (s mysqlSet) union(o mysqlSet) mysqlSet {
	out := mysqlSet{sets: make(map[tsid][]interval, len(s.sets)+len(o.sets))}
	for _, src := range []mysqlSet{s, o} {
		for k, ivs := range src.sets {
			out.sets[k] = append(out.sets[k], ivs...)
		}
	}
	for k, ivs := range out.sets {
		out.sets[k] = normalizeIntervals(ivs)
	}
	return out
}
