package binlog

import (
	"bytes"
	"strings"
	"testing"
)

func gtids(t *testing.T, ss ...string) []GTID {
	t.Helper()
	var out []GTID
	for _, s := range ss {
		g, err := ParseGTID(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, g)
	}
	return out
}

// TestDivergenceKeepsWhatThePrimaryLacks: the rule Keep applies, on the histories that
// occur: a failover from an old primary, an errant write on a replica, a new primary restored
// from a backup (its state names one server per domain), and two failovers in a row.
func TestDivergenceKeepsWhatThePrimaryLacks(t *testing.T) {
	cases := []struct {
		name, primary string
		instance      []string // the instance's transactions, in binlog order
		want          string   // the runs kept
	}{
		{"failover: the old primary's writes after the promotion point", "0-1-90,0-2-120",
			[]string{"0-3-5", "0-1-89", "0-1-90", "0-1-91", "0-1-92"}, "0-1-91..92"},
		{"the primary got everything: nothing kept", "0-1-100,0-2-120",
			[]string{"0-1-99", "0-1-100"}, ""},
		{"an errant write on a replica", "0-1-60",
			[]string{"0-1-49", "0-1-50", "0-2-51"}, "0-2-51"},
		{"the primary restored from a backup knows no GTID of server 2: the anchor proves the common line", "0-1-130,0-3-140",
			[]string{"0-2-40", "0-1-129", "0-1-130", "0-3-131"}, ""},
		{"two failovers in a row: no anchor, the old primary's line is kept whole (more, never less)", "0-2-250",
			[]string{"0-1-90", "0-1-91", "0-1-100"}, "0-1-90..91,0-1-100"},
		{"a second domain the primary never saw", "0-1-10",
			[]string{"0-1-10", "1-1-1", "1-1-2"}, "1-1-1..2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, err := ParseServerState(c.primary)
			if err != nil {
				t.Fatal(err)
			}
			d := newDivergence(st)
			seq := gtids(t, c.instance...)
			for _, g := range seq {
				d.see(g)
			}
			var r gtidRanges
			for _, g := range seq {
				if !d.held(g) {
					r.add(g)
				}
			}
			if got := r.String(); got != c.want {
				t.Fatalf("kept %q, want %q", got, c.want)
			}
		})
	}
}

func TestParseServerState(t *testing.T) {
	st, err := ParseServerState(" 0-2-120, 0-1-90 ,1-1-3")
	if err != nil || st.String() != "0-1-90,0-2-120,1-1-3" {
		t.Fatalf("%v %q", err, st)
	}
	if _, err := ParseServerState("0-1-3,0-1-4"); err == nil {
		t.Fatal("a server twice in one domain was accepted")
	}
	if st, err := ParseServerState(""); err != nil || st.String() != "" {
		t.Fatalf("empty state: %v %q", err, st)
	}
}

// TestFilterLinesDropsOnlyTheOriginalGTID: the lines that would give a replayed transaction
// its original server id and sequence number go, the domain and everything else stay, and a
// long line is never cut or matched in its middle.
func TestFilterLinesDropsOnlyTheOriginalGTID(t *testing.T) {
	long := "BINLOG '" + strings.Repeat("A", 200000) + "/*M!100001 SET @@session.gtid_seq_no=3*/'\n"
	in := "/*M!100001 SET @@session.gtid_domain_id=0*//*!*/;\n" +
		"/*M!100001 SET @@session.server_id=1*//*!*/;\n" +
		"/*M!100001 SET @@session.gtid_seq_no=23*//*!*/;\n" +
		"START TRANSACTION\n" + long + "COMMIT/*!*/;\n" +
		"/*!100001 SET @@session.gtid_seq_no=24*//*!*/;\n"
	var out bytes.Buffer
	if _, err := filterLines(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	want := "/*M!100001 SET @@session.gtid_domain_id=0*//*!*/;\nSTART TRANSACTION\n" + long + "COMMIT/*!*/;\n"
	if out.String() != want {
		t.Fatalf("filtered output differs (%d bytes, want %d): %.300q", out.Len(), len(want), out.String())
	}
}

// TestFailedAtNamesTheTransaction: the mariadb client's "at line N" is mapped to the
// transaction whose comment line precedes it in the filtered input, and to the one before.
func TestFailedAtNamesTheTransaction(t *testing.T) {
	in := "DELIMITER /*!*/;\n" +
		"#261205  2:17:00 server id 1  end_log_pos 123 CRC32 0x1  GTID 0-1-23 trans\n" +
		"/*M!100001 SET @@session.gtid_seq_no=23*//*!*/;\n" +
		"START TRANSACTION\n" +
		"COMMIT/*!*/;\n" +
		"#261205  2:17:01 server id 1  end_log_pos 456 CRC32 0x2  GTID 0-1-24 trans\n" +
		"START TRANSACTION\n" +
		"BINLOG '\nAAAA\n'/*!*/;\n"
	var out bytes.Buffer
	marks, err := filterLines(strings.NewReader(in), &out)
	if err != nil || len(marks) != 2 || marks[0] != (gtidMark{2, "0-1-23"}) || marks[1] != (gtidMark{5, "0-1-24"}) {
		t.Fatalf("marks %+v, %v", marks, err)
	}
	if f, b := failedAt("ERROR 1062 (23000) at line 8: Duplicate entry", marks); f != "0-1-24" || b != "0-1-23" {
		t.Fatalf("failed at %q after %q", f, b)
	}
	if f, b := failedAt("ERROR 1062 (23000) at line 3: Duplicate entry", marks); f != "0-1-23" || b != "" {
		t.Fatalf("failed at %q after %q", f, b)
	}
	if f, _ := failedAt("ERROR 2013: lost connection", marks); f != "" {
		t.Fatalf("no line: failed at %q", f)
	}
}
