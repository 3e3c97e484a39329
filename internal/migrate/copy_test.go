package migrate

import "testing"

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
