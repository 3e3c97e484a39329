package dbsql

import "testing"

// checkGTIDProperties asserts what every parsed set must satisfy: String
// re-parses to an Equal set with the same String, and Contains is reflexive.
func checkGTIDProperties(t *testing.T, f Flavor, in string) {
	g, err := ParseGTID(f, in)
	if err != nil {
		return
	}
	s := g.String()
	again, err := ParseGTID(f, s)
	if err != nil {
		t.Fatalf("%q parsed, but its String %q does not: %v", in, s, err)
	}
	if !again.Equal(g) || !g.Equal(again) {
		t.Fatalf("%q: String %q re-parses to a different set %q", in, s, again)
	}
	if again.String() != s {
		t.Fatalf("%q: String is not canonical: %q then %q", in, s, again.String())
	}
	if !g.Contains(g) || !g.Contains(again) {
		t.Fatalf("%q: Contains is not reflexive", in)
	}
	if g.IsEmpty() != (s == "" || again.IsEmpty()) {
		t.Fatalf("%q: IsEmpty %v disagrees with String %q", in, g.IsEmpty(), s)
	}
}

func FuzzParseMariaDBGTID(f *testing.F) {
	for _, s := range []string{"", "0-1-100", "0-1-100,1-2-5", "0-1-100,0-2-120", " 0-1-1 ,\n2-2-2",
		"0-1-0", "4294967295-4294967295-18446744073709551615", "0-1", "0-1-1,", "a-b-c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkGTIDProperties(t, FlavorMariaDB, s) })
}

func FuzzParseMySQLGTID(f *testing.F) {
	for _, s := range []string{"", uuidA + ":1-5", uuidA + ":1-5:7,\n" + uuidB + ":3",
		uuidA + ":1-5:3-9:11", uuidA + ":1-5:dba:1-2:ops:4", uuidA + ":ops:1," + uuidA + ":2",
		uuidA + ":9223372036854775807", uuidA + ":0", uuidA + ":5-3", uuidA} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkGTIDProperties(t, FlavorMySQL, s) })
}
