package restore

import (
	"errors"
	"strings"
	"testing"

	"github.com/dolphin-operator/dolphin/internal/backup"
)

func TestDataPosition(t *testing.T) {
	for _, c := range []struct {
		name, position, table, want string
	}{
		{"a source that was never a replica", "0-1-10,1-1-3", "", "0-1-10,1-1-3"},
		{"a replica's table equals the position", "0-1-10,1-1-3", "1-1-3,0-1-10", "0-1-10,1-1-3"},
		// The race the backup tool loses: it recorded one transaction less than the data.
		{"the table is one ahead in a domain", "0-1-155,1-1-3", "0-1-156,1-1-3", "0-1-156,1-1-3"},
		{"the table is behind (a primary that was a replica)", "0-2-900", "0-1-150", "0-2-900"},
		{"the table names a domain the position lacks", "0-1-10", "0-1-10,2-5-1", "0-1-10,2-5-1"},
		{"spaces and order", " 1-1-3 , 0-1-10", "0-1-11", "0-1-11,1-1-3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := dataPosition(c.position, c.table)
			if err != nil || got != c.want {
				t.Errorf("dataPosition(%q, %q) = %q, %v; want %q", c.position, c.table, got, err, c.want)
			}
		})
	}
	for _, bad := range [][2]string{{"0-1", ""}, {"0-1-10", "x-1-2"}, {"0-1-1,0-2-2", ""}} {
		if got, err := dataPosition(bad[0], bad[1]); err == nil {
			t.Errorf("dataPosition(%q, %q) = %q, want an error", bad[0], bad[1], got)
		}
	}
}

func TestHeldPosition(t *testing.T) {
	manifest := func(pos string) *backup.Manifest { return &backup.Manifest{GTIDPosition: pos} }
	for _, c := range []struct {
		name, info, table string
		m                 *backup.Manifest
		want, wantErr     string
	}{
		{"a clone: no manifest", "0-1-155", "0-1-156", nil, "0-1-156", ""},
		{"a backup of a primary", "0-1-10,1-1-3", "", manifest("1-1-3,0-1-10"), "0-1-10,1-1-3", ""},
		{"an exact manifest, a lagging info file", "0-1-155", "0-1-156", manifest("0-1-156"), "0-1-156", ""},
		{"an old manifest that lags too", "0-1-155", "0-1-156", manifest("0-1-155"), "0-1-156", ""},
		{"a manifest ahead of the data", "0-1-14", "", manifest("0-1-987654"), "",
			`the manifest's GTID position "0-1-987654" is ahead of what the data holds, "0-1-14"`},
		{"a manifest with a domain the data lacks", "0-1-14", "", manifest("0-1-14,3-1-1"), "", "in domain 3 (3-1-1)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := heldPosition(c.info, "xtrabackup_binlog_info", c.table, c.m, t.Logf)
			switch {
			case c.wantErr == "" && (err != nil || got != c.want):
				t.Errorf("heldPosition = %q, %v; want %q", got, err, c.want)
			case c.wantErr != "" && (!errors.Is(err, backup.ErrCorrupt) || !strings.Contains(err.Error(), c.wantErr)):
				t.Errorf("heldPosition = %q, %v; want ErrCorrupt saying %q", got, err, c.wantErr)
			}
		})
	}
}
