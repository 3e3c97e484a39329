package migrate

import (
	"strings"
	"testing"
)

// TestGTIDSniffer feeds the sniffer a dump in pieces of every size: it finds the position in
// its comment wherever the pieces are cut, and never in a data line that quotes it.
func TestGTIDSniffer(t *testing.T) {
	dump := "-- MariaDB dump 10.19\n" +
		"-- CHANGE MASTER TO MASTER_USE_GTID=slave_pos;\n" +
		"INSERT INTO `t` VALUES (1,'\\n-- SET GLOBAL gtid_slave_pos=\\'9-9-9\\';\\n');\n" +
		"INSERT INTO `t` VALUES (2,'x'); -- SET GLOBAL gtid_slave_pos='8-8-8';\n" +
		"-- SET GLOBAL gtid_slave_pos='0-1-74,1-2-3';\n" +
		"-- Dump completed on 2026-12-07  5:46:41\n"
	for size := 1; size <= len(dump); size++ {
		s := &gtidSniffer{}
		for i := 0; i < len(dump); i += size {
			if _, err := s.Write([]byte(dump[i:min(i+size, len(dump))])); err != nil {
				t.Fatal(err)
			}
		}
		if pos, ok := s.position(); !ok || pos != "0-1-74,1-2-3" {
			t.Fatalf("pieces of %d bytes: position %q, %v; want 0-1-74,1-2-3", size, pos, ok)
		}
	}
	s := &gtidSniffer{}
	_, _ = s.Write([]byte("-- SET GLOBAL gtid_slave_pos='';\n"))
	if pos, ok := s.position(); !ok || pos != "" {
		t.Errorf("an empty position: %q, %v", pos, ok)
	}
	s = &gtidSniffer{}
	_, _ = s.Write([]byte("-- SET GLOBAL gtid_slave_pos='0-1-2'; DROP TABLE x;\n"))
	if _, ok := s.position(); ok {
		t.Error("a comment with more after the position was taken")
	}
}

// TestSnifferCoordinates: the snapshot's binary log coordinates are taken from their comment.
func TestSnifferCoordinates(t *testing.T) {
	s := &gtidSniffer{}
	_, _ = s.Write([]byte("-- CHANGE MASTER TO MASTER_USE_GTID=slave_pos;\n" +
		"-- CHANGE MASTER TO MASTER_LOG_FILE='binlog.000007', MASTER_LOG_POS=810;\n" +
		"INSERT INTO t VALUES ('-- CHANGE MASTER TO MASTER_LOG_FILE=''x'', MASTER_LOG_POS=1;');\n"))
	if c, ok := s.coordinates(); !ok || c != (BinlogCoordinates{File: "binlog.000007", Pos: 810}) {
		t.Errorf("coordinates %+v, %v", c, ok)
	}
}

// TestIsChange: what in a binary log is a change of a schema or an account.
func TestIsChange(t *testing.T) {
	for stmt, want := range map[string]bool{
		"BEGIN": false, "COMMIT": false, "ROLLBACK": false, "XA START X'01'": false, "SAVEPOINT a": false,
		"FLUSH TABLES": false, "ANALYZE TABLE t": false, "OPTIMIZE TABLE t": false,
		"DROP TEMPORARY TABLE IF EXISTS `tmp`": false,
		"ALTER TABLE app.t1 ADD COLUMN c0 INT": true, "CREATE TABLE t (id INT)": true, "DROP TABLE IF EXISTS t": true,
		"TRUNCATE TABLE t": true, "RENAME TABLE a TO b": true, "CREATE USER 'x'@'%'": true, "GRANT SELECT ON *.* TO 'x'@'%'": true,
		"DROP USER 'x'@'%'": true, "CREATE PROCEDURE p() SELECT 1": true, "something new": true,
	} {
		if got := isChange(stmt); got != want {
			t.Errorf("isChange(%q) = %v, want %v", stmt, got, want)
		}
	}
	if got := useClause.ReplaceAllString("use `a``b`; ALTER TABLE t ADD c INT", ""); got != "ALTER TABLE t ADD c INT" {
		t.Errorf("use clause: %q", got)
	}
}

// TestRedact: a statement shown in a condition never carries a password.
func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"CREATE USER 'late'@'%' IDENTIFIED BY 'x'":                      "CREATE USER 'late'@'%' …",
		"ALTER USER 'a'@'%' IDENTIFIED VIA ed25519 USING PASSWORD('s')": "ALTER USER 'a'@'%' …",
		"SET PASSWORD FOR 'a'@'%' = PASSWORD('s')":                      "SET …",
		"GRANT SELECT ON *.* TO 'a'@'%'":                                "GRANT SELECT ON *.* TO 'a'@'%'",
	} {
		got := redact(in)
		if !strings.HasPrefix(got, want) || strings.Contains(got, "'x'") || strings.Contains(got, "'s'") {
			t.Errorf("redact(%q) = %q, want it to start %q", in, got, want)
		}
	}
}
