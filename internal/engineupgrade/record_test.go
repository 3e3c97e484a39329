package engineupgrade

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A record travels as one header-safe token and comes back byte for byte (a NUL after the
// version included); anything but the tool's file names and a version is refused.
func TestRecordEncodeDecode(t *testing.T) {
	for _, r := range []Record{
		{File: "mysql_upgrade_info", Content: []byte("10.11.19-MariaDB")},
		{File: "mariadb_upgrade_info", Content: []byte("11.8.9-MariaDB\x00")},
	} {
		got, err := DecodeRecord(r.Encode())
		if err != nil || got.File != r.File || !bytes.Equal(got.Content, r.Content) {
			t.Errorf("%+v: decoded %+v, %v", r, got, err)
		}
	}
	if (Record{}).Encode() != "" {
		t.Error("no record must encode as nothing")
	}
	for _, bad := range []string{
		"", "mysql_upgrade_info", "../../etc/passwd:MTAuMTEuMTk=", "ib_logfile0:MTAuMTEuMTk=",
		"mysql_upgrade_info:not base64!", "mysql_upgrade_info:" + (Record{Content: []byte("hello")}).encodeContent(),
		"mysql_upgrade_info:" + (Record{Content: []byte("10.11.19-" + strings.Repeat("a", 300))}).encodeContent(),
		"mariadb_upgrade_info:", // the empty file the 11.x tool leaves behind a run that did not finish
	} {
		if r, err := DecodeRecord(bad); err == nil {
			t.Errorf("%q decoded as %+v", bad, r)
		}
	}
}

// WriteRecord writes a missing record durably and never replaces the tool's own.
func TestWriteRecordKeepsTheToolsOwn(t *testing.T) {
	dir := t.TempDir()
	r := Record{File: "mysql_upgrade_info", Content: []byte("10.11.19-MariaDB")}
	if written, err := WriteRecord(dir, r); err != nil || !written {
		t.Fatalf("WriteRecord into an empty directory: written %v, %v", written, err)
	}
	if v, err := RecordedVersion(dir); err != nil || v != "10.11.19-MariaDB" {
		t.Fatalf("recorded %q, %v", v, err)
	}
	if written, err := WriteRecord(dir, Record{File: "mariadb_upgrade_info", Content: []byte("11.8.9-MariaDB")}); err != nil || written {
		t.Fatalf("WriteRecord over the tool's own: written %v, %v; want nothing written", written, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "mariadb_upgrade_info")); !os.IsNotExist(err) {
		t.Errorf("a second record was written beside the first: %v", err)
	}
	if v, _ := RecordedVersion(dir); v != "10.11.19-MariaDB" {
		t.Errorf("the record became %q", v)
	}
}
