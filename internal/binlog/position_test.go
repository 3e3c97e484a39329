package binlog

import (
	"strings"
	"testing"
)

func TestParsePosition(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		err      string
	}{
		{in: "", want: ""},
		{in: "  \n", want: ""},
		{in: "0-1-5", want: "0-1-5"},
		{in: "1-2-9,0-1-5", want: "0-1-5,1-2-9"},
		{in: " 0-1-5 ,\n 1-2-9 ", want: "0-1-5,1-2-9"},
		{in: "4294967295-4294967295-18446744073709551615", want: "4294967295-4294967295-18446744073709551615"},
		{in: "0-1-5,0-2-6", err: "domain 0 appears twice"},
		{in: "0-1", err: "not domain-server-sequence"},
		{in: "0-1-5-6", err: "not domain-server-sequence"},
		{in: "0-x-5", err: "decimal numbers"},
		{in: "4294967296-1-5", err: "decimal numbers"},
		{in: "0-1--5", err: "not domain-server-sequence"},
		{in: "0-1-5,", err: "not domain-server-sequence"},
	} {
		p, err := Parse(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Parse(%q) = %v, %v; want an error with %q", tc.in, p, err, tc.err)
			}
			continue
		}
		if err != nil || p.String() != tc.want {
			t.Errorf("Parse(%q) = %q, %v; want %q", tc.in, p, err, tc.want)
		}
	}
}

func TestPositionContainsCovers(t *testing.T) {
	p := MustParse("0-1-5,1-2-9")
	for _, tc := range []struct {
		g    string
		want bool
	}{
		{"0-1-5", true},
		{"0-1-4", true},
		{"0-7-5", true}, // the server id is not compared
		{"0-1-6", false},
		{"1-2-9", true},
		{"1-2-10", false},
		{"2-1-1", false},
	} {
		if got := p.Contains(mustGTID(t, tc.g)); got != tc.want {
			t.Errorf("%s.Contains(%s) = %v", p, tc.g, got)
		}
	}
	for _, tc := range []struct {
		p, o string
		want bool
	}{
		{"", "", true},
		{"0-1-5", "", true},
		{"", "0-1-5", false},
		{"0-1-5,1-2-9", "0-1-5", true},
		{"0-1-5,1-2-9", "0-1-3,1-2-9", true},
		{"0-1-5,1-2-9", "0-1-6", false},
		{"0-1-5", "0-1-5,1-2-1", false},
		{"0-2-5", "0-1-5", true},
	} {
		if got := MustParse(tc.p).Covers(MustParse(tc.o)); got != tc.want {
			t.Errorf("%q.Covers(%q) = %v", tc.p, tc.o, got)
		}
	}
}

func TestPositionAdvance(t *testing.T) {
	for _, tc := range []struct {
		from, g, want, err string
	}{
		{from: "", g: "0-1-1", want: "0-1-1"},
		{from: "0-1-5", g: "0-1-6", want: "0-1-6"},
		{from: "0-1-5", g: "0-2-6", want: "0-2-6"}, // a failover: another server continues the domain
		{from: "0-1-5", g: "0-1-9", want: "0-1-9"}, // sequence numbers may jump
		{from: "0-1-5", g: "1-3-1", want: "0-1-5,1-3-1"},
		{from: "0-1-5", g: "0-1-5", err: "does not follow 0-1-5"},
		{from: "0-1-5", g: "0-2-4", err: "does not follow 0-1-5"},
	} {
		p := MustParse(tc.from)
		before := p
		err := p.Advance(mustGTID(t, tc.g))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || p.String() != tc.from {
				t.Errorf("%q.Advance(%s) = %v, now %q; want an error with %q and no change", tc.from, tc.g, err, p, tc.err)
			}
			continue
		}
		if err != nil || p.String() != tc.want {
			t.Errorf("%q.Advance(%s) = %v, now %q; want %q", tc.from, tc.g, err, p, tc.want)
		}
		if before.String() != tc.from {
			t.Errorf("Advance changed a copy: %q, want %q", before, tc.from)
		}
	}
}

func TestPositionEqualWith(t *testing.T) {
	if !MustParse("1-2-9,0-1-5").Equal(MustParse("0-1-5,1-2-9")) || !MustParse("").Equal(Position{}) {
		t.Error("equal positions are not Equal")
	}
	for _, pair := range [][2]string{{"0-1-5", "0-2-5"}, {"0-1-5", "0-1-6"}, {"0-1-5", "0-1-5,1-1-1"}, {"", "0-1-1"}} {
		if MustParse(pair[0]).Equal(MustParse(pair[1])) {
			t.Errorf("%q Equal %q", pair[0], pair[1])
		}
	}
	base := MustParse("0-1-5,1-2-9")
	if got := base.With(MustParse("0-3-7,2-1-1")).String(); got != "0-3-7,1-2-9,2-1-1" {
		t.Errorf("With = %q", got)
	}
	if base.String() != "0-1-5,1-2-9" {
		t.Errorf("With changed its receiver: %q", base)
	}
	if got := (Position{}).With(MustParse("0-1-1")).String(); got != "0-1-1" {
		t.Errorf("empty With = %q", got)
	}
}

func mustGTID(t *testing.T, s string) GTID {
	t.Helper()
	g, err := ParseGTID(s)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
