package dbsql

import (
	"strings"
	"testing"
)

const uuidB = "4f000000-0000-0000-0000-000000000001"

func TestParseMariaDBGTID(t *testing.T) {
	tests := []struct {
		in, want string
		wantErr  bool
	}{
		{in: "", want: ""},
		{in: "  \n", want: ""},
		{in: "0-1-100", want: "0-1-100"},
		{in: "1-2-5,0-1-100", want: "0-1-100,1-2-5"},
		{in: " 0-1-100 ,\n 1-2-5 ", want: "0-1-100,1-2-5"},
		// gtid_binlog_state lists a domain once per server: the highest wins.
		{in: "0-1-100,0-2-120,0-3-7", want: "0-2-120"},
		{in: "0-1-0", want: "0-1-0"},
		{in: "4294967295-4294967295-18446744073709551615", want: "4294967295-4294967295-18446744073709551615"},
		{in: "0-1", wantErr: true},
		{in: "0-1-2-3", wantErr: true},
		{in: "0-1-x", wantErr: true},
		{in: "0--1", wantErr: true},
		{in: "-0-1-1", wantErr: true},
		{in: "+0-1-1", wantErr: true},
		{in: "0-1-1,", wantErr: true},
		{in: "0-1-1,,1-1-1", wantErr: true},
		{in: "4294967296-1-1", wantErr: true},
		{in: "0-4294967296-1", wantErr: true},
		{in: "0-1-18446744073709551616", wantErr: true},
		{in: "0-1- 1", wantErr: true},
		{in: uuidA + ":1-5", wantErr: true},
	}
	for _, tc := range tests {
		g, err := ParseMariaDBGTID(tc.in)
		if tc.wantErr {
			if err == nil {
				t.Errorf("ParseMariaDBGTID(%q) = %q, want an error", tc.in, g)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseMariaDBGTID(%q): %v", tc.in, err)
			continue
		}
		if got := g.String(); got != tc.want {
			t.Errorf("ParseMariaDBGTID(%q).String() = %q, want %q", tc.in, got, tc.want)
		}
		if again := mustParse(t, FlavorMariaDB, g.String()); !again.Equal(g) || again.String() != g.String() {
			t.Errorf("%q does not round-trip: %q", tc.in, again)
		}
	}
}

func TestParseMySQLGTID(t *testing.T) {
	upperA := strings.ToUpper(uuidA)
	tests := []struct {
		in, want string
		wantErr  bool
	}{
		{in: "", want: ""},
		{in: uuidA + ":1-5", want: uuidA + ":1-5"},
		{in: upperA + ":1-5", want: uuidA + ":1-5"},
		{in: uuidA + ":1-5:7", want: uuidA + ":1-5:7"},
		{in: uuidA + ":7:1-5", want: uuidA + ":1-5:7"},
		// Overlapping and adjacent intervals merge, also across entries.
		{in: uuidA + ":1-5:6-8:3-4:10", want: uuidA + ":1-8:10"},
		{in: uuidA + ":1-5," + uuidA + ":6", want: uuidA + ":1-6"},
		// SHOW REPLICA STATUS and @@gtid_executed break lines after commas.
		{in: uuidB + ":3,\n" + uuidA + ":1-5", want: uuidA + ":1-5," + uuidB + ":3"},
		// Tagged GTIDs (MySQL 8.3+).
		{in: uuidA + ":1-5:Dba:1-2:ops:4", want: uuidA + ":1-5:dba:1-2:ops:4"},
		{in: uuidA + ":ops:4,\n" + uuidA + ":1", want: uuidA + ":1:ops:4"},
		{in: uuidA + ":9223372036854775807", want: uuidA + ":9223372036854775807"},
		{in: uuidA, wantErr: true},
		{in: uuidA + ":", wantErr: true},
		{in: uuidA + ":0", wantErr: true},
		{in: uuidA + ":5-3", wantErr: true},
		{in: uuidA + ":1-", wantErr: true},
		{in: uuidA + ":-1", wantErr: true},
		{in: uuidA + ":1-5-7", wantErr: true},
		{in: uuidA + ":9223372036854775808", wantErr: true},
		{in: uuidA + ":tag", wantErr: true},
		{in: uuidA + ":a:b:1", wantErr: true},
		{in: uuidA + ":1-5:9tag:1", wantErr: true},
		{in: uuidA + ":1-5:" + strings.Repeat("t", 33) + ":1", wantErr: true},
		{in: uuidA + ":1,", wantErr: true},
		{in: "3e11fa4771ca11e19e33c80aa9429562:1", wantErr: true},
		{in: "3e11fa47-71ca-11e1-9e33-c80aa942956g:1", wantErr: true},
		{in: "0-1-100", wantErr: true},
	}
	for _, tc := range tests {
		g, err := ParseMySQLGTID(tc.in)
		if tc.wantErr {
			if err == nil {
				t.Errorf("ParseMySQLGTID(%q) = %q, want an error", tc.in, g)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseMySQLGTID(%q): %v", tc.in, err)
			continue
		}
		if got := g.String(); got != tc.want {
			t.Errorf("ParseMySQLGTID(%q).String() = %q, want %q", tc.in, got, tc.want)
		}
		if again := mustParse(t, FlavorMySQL, g.String()); !again.Equal(g) || again.String() != g.String() {
			t.Errorf("%q does not round-trip: %q", tc.in, again)
		}
	}
}

func TestGTIDContains(t *testing.T) {
	tests := []struct {
		flavor         Flavor
		a, b           string
		aHasB, bHasA   bool
		aEmpty, bEmpty bool
	}{
		// MariaDB: per domain by sequence number, server id ignored.
		{FlavorMariaDB, "0-1-100", "0-1-100", true, true, false, false},
		{FlavorMariaDB, "0-1-100", "0-2-100", true, true, false, false},
		{FlavorMariaDB, "0-1-100", "0-1-99", true, false, false, false},
		{FlavorMariaDB, "0-1-100,1-2-5", "0-1-100", true, false, false, false},
		{FlavorMariaDB, "0-1-100,1-2-5", "0-1-90,1-2-6", false, false, false, false},
		{FlavorMariaDB, "0-1-100", "", true, false, false, true},
		{FlavorMariaDB, "0-1-0", "", true, true, true, true},
		{FlavorMariaDB, "0-1-100", "2-1-1", false, false, false, false},
		// MySQL: true set containment, gaps matter.
		{FlavorMySQL, uuidA + ":1-10", uuidA + ":3-4:7", true, false, false, false},
		{FlavorMySQL, uuidA + ":1-5:7-10", uuidA + ":1-10", false, true, false, false},
		{FlavorMySQL, uuidA + ":1-5:7-10", uuidA + ":5-7", false, false, false, false},
		{FlavorMySQL, uuidA + ":1-5:7-10", uuidA + ":7-10:1-5", true, true, false, false},
		{FlavorMySQL, uuidA + ":1-5," + uuidB + ":1-3", uuidB + ":2", true, false, false, false},
		{FlavorMySQL, uuidA + ":1-5", uuidB + ":1", false, false, false, false},
		{FlavorMySQL, uuidA + ":1-5", uuidA + ":t:1", false, false, false, false},
		{FlavorMySQL, uuidA + ":1-5:t:1-3", uuidA + ":t:2", true, false, false, false},
		{FlavorMySQL, "", "", true, true, true, true},
		{FlavorMySQL, uuidA + ":1", "", true, false, false, true},
	}
	for _, tc := range tests {
		a, b := mustParse(t, tc.flavor, tc.a), mustParse(t, tc.flavor, tc.b)
		if got := a.Contains(b); got != tc.aHasB {
			t.Errorf("%s: %q.Contains(%q) = %v, want %v", tc.flavor, tc.a, tc.b, got, tc.aHasB)
		}
		if got := b.Contains(a); got != tc.bHasA {
			t.Errorf("%s: %q.Contains(%q) = %v, want %v", tc.flavor, tc.b, tc.a, got, tc.bHasA)
		}
		if got, want := a.Equal(b), tc.aHasB && tc.bHasA; got != want || b.Equal(a) != want {
			t.Errorf("%s: %q.Equal(%q) = %v, want %v", tc.flavor, tc.a, tc.b, got, want)
		}
		if a.IsEmpty() != tc.aEmpty || b.IsEmpty() != tc.bEmpty {
			t.Errorf("%s: IsEmpty(%q, %q) = %v, %v", tc.flavor, tc.a, tc.b, a.IsEmpty(), b.IsEmpty())
		}
		if !a.Contains(a) || !a.Equal(a) || !a.Contains(nil) || a.Equal(nil) != tc.aEmpty {
			t.Errorf("%s: %q: reflexivity or nil handling broken", tc.flavor, tc.a)
		}
	}
}

func TestGTIDFlavorsDoNotMix(t *testing.T) {
	m, y := mustParse(t, FlavorMariaDB, "0-1-1"), mustParse(t, FlavorMySQL, uuidA+":1")
	me, ye := mustParse(t, FlavorMariaDB, ""), mustParse(t, FlavorMySQL, "")
	if m.Contains(y) || y.Contains(m) || m.Equal(y) || me.Equal(ye) || me.Contains(ye) {
		t.Error("sets of different flavors compare as related")
	}
	if _, err := unionGTID(m, y); err == nil {
		t.Error("union across flavors: no error")
	}
	if _, err := ParseGTID("oracle", ""); err == nil {
		t.Error("unknown flavor: no error")
	}
}

func TestUnionGTID(t *testing.T) {
	tests := []struct {
		flavor     Flavor
		a, b, want string
	}{
		{FlavorMariaDB, "0-1-100,1-2-5", "0-3-120,2-1-1", "0-3-120,1-2-5,2-1-1"},
		{FlavorMariaDB, "0-1-100", "", "0-1-100"},
		{FlavorMySQL, uuidA + ":1-5", uuidA + ":6-9:12," + uuidB + ":1", uuidA + ":1-9:12," + uuidB + ":1"},
		{FlavorMySQL, "", uuidA + ":3", uuidA + ":3"},
	}
	for _, tc := range tests {
		a, b := mustParse(t, tc.flavor, tc.a), mustParse(t, tc.flavor, tc.b)
		u, err := unionGTID(a, b)
		if err != nil {
			t.Fatal(err)
		}
		if u.String() != tc.want || !u.Contains(a) || !u.Contains(b) {
			t.Errorf("union(%q, %q) = %q, want %q", tc.a, tc.b, u, tc.want)
		}
		if a.String() != mustParse(t, tc.flavor, tc.a).String() {
			t.Errorf("union modified its argument %q: %q", tc.a, a)
		}
	}
}

func TestAheadWithWritesOf(t *testing.T) {
	p := func(s string) GTIDSet {
		g, err := ParseMariaDBGTID(s)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	my, err := ParseMySQLGTID(uuidA + ":1-10")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		set, base GTIDSet
		server    uint32
		want      bool
	}{
		{p("0-1000-785"), p("0-1000-780"), 1000, true},                   // the primary's own tail
		{p("0-1000-785,1-1000-3"), p("0-1000-780,1-1000-3"), 1000, true}, // one domain ahead
		{p("0-1002-781"), p("0-1000-780"), 1000, false},                  // written elsewhere: errant
		{p("0-1000-780"), p("0-1000-780"), 1000, false},                  // not ahead
		{p("0-1000-779"), p("0-1000-780"), 1000, false},                  // behind
		{p("0-1000-785"), p("0-1000-780,1-1001-2"), 1000, false},         // lacks a domain of base
		{p("0-1000-785,1-1001-2"), p("0-1000-780"), 1000, false},         // ahead in a domain by another server
		{my, my, 1, false}, // MySQL: never
	}
	for _, tc := range tests {
		if got := AheadWithWritesOf(tc.set, tc.base, tc.server); got != tc.want {
			t.Errorf("AheadWithWritesOf(%s, %s, %d) = %v, want %v", tc.set, tc.base, tc.server, got, tc.want)
		}
	}
}
