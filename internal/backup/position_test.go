package backup

import "testing"

// Lines as /usr/bin/mariadb-backup 10.11.14 printed them, backing up a replica and a primary.
const (
	replicaLog = `[00] 2026-12-01 11:17:08 Connecting to MariaDB server host: 127.164.245.109, user: root, password: not set, port: 3306, socket: /run/mysqld/mysqld.sock
[00] 2026-12-01 11:17:08 Using server version 10.11.14-MariaDB-0+deb12u2-log
mariadb-backup based on MariaDB server 10.11.14-MariaDB debian-linux-gnu (x86_64)
[00] 2026-12-01 11:17:13 All tables unlocked
[00] 2026-12-01 11:17:13 Backup created in directory '/tmp/bkx/tgt/'
[00] 2026-12-01 11:17:13 MySQL binlog position: filename 'binlog.000001', position '172524', GTID of the last change '0-1-3'
[00] 2026-12-01 11:17:13 MySQL slave binlog position: gtid_slave_pos '0-1-3'; master '' master_use_gtid = slave_pos
[00] 2026-12-01 11:17:13 Redo log (from LSN 430549 to 430565) was copied.
[00] 2026-12-01 11:17:13 completed OK!
`
	primaryLog = `[00] 2026-12-01 11:18:11 Failed to get master binlog coordinates from SHOW SLAVE STATUS.This means that the server is not a replication slave. Ignoring the --slave-info option
[00] 2026-12-01 11:18:11 Executing FLUSH NO_WRITE_TO_BINLOG ENGINE LOGS...
[00] 2026-12-01 11:18:11 MySQL binlog position: filename 'binlog.000002', position '4711', GTID of the last change '0-1-3,7-2-19'
[00] 2026-12-01 11:18:11 Redo log (from LSN 428007 to 428023) was copied.
[00] 2026-12-01 11:18:11 completed OK!`
	failedLog = `[00] 2026-12-01 11:17:49 Connecting to MariaDB server host: 127.103.181.35, user: root, password: set, port: 3306, socket: /run/mysqld/mysqld.sock
[00] 2026-12-01 11:17:49 Failed to connect to MariaDB server: Access denied for user 'root'@'127.0.0.1' (using password: YES).
`
)

func TestParseToolReport(t *testing.T) {
	for _, tc := range []struct {
		name string
		log  string
		want toolReport
	}{
		{"replica", replicaLog, toolReport{ServerVersion: "10.11.14-MariaDB-0+deb12u2-log", HasBinlog: true, BinlogFile: "binlog.000001", BinlogPosition: 172524,
			GTID: "0-1-3", ReplicaGTID: "0-1-3", Completed: true}},
		{"primary, two domains, no final newline", primaryLog, toolReport{HasBinlog: true, BinlogFile: "binlog.000002",
			BinlogPosition: 4711, GTID: "0-1-3,7-2-19", Completed: true}},
		{"failed", failedLog, toolReport{}},
		{"no GTID yet", "[00] x MySQL binlog position: filename 'binlog.000001', position '329'\n[00] x completed OK!\n",
			toolReport{HasBinlog: true, BinlogFile: "binlog.000001", BinlogPosition: 329, Completed: true}},
		{"empty GTID", "[00] x MySQL binlog position: filename 'b.000003', position '4', GTID of the last change ''\n",
			toolReport{HasBinlog: true, BinlogFile: "b.000003", BinlogPosition: 4}},
		{"other versions' slave line", "[00] x MySQL slave binlog position: master host 'db-0', gtid_slave_pos 0-1-3,1-2-4\n",
			toolReport{ReplicaGTID: "0-1-3,1-2-4"}},
		{"non-GTID replica", "[00] x MySQL slave binlog position: master '' filename 'binlog.000001' position '342'\n",
			toolReport{}},
		{"CRLF", "[00] x completed OK!\r\n", toolReport{Completed: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := parseToolReport(tc.log); got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParseBinlogInfo(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    BinlogInfo
		wantErr bool
	}{
		{"binlog.000001\t172524\t0-1-3\n", BinlogInfo{"binlog.000001", 172524, "0-1-3"}, false},                  // 10.11.14
		{"binlog.000001\t329\n", BinlogInfo{"binlog.000001", 329, ""}, false},                                    // no GTID
		{"b.000001\t900\t[]\nb.000002\t344\t0-1-9,1-1-2\n\n", BinlogInfo{"b.000002", 344, "0-1-9,1-1-2"}, false}, // 11.x, binlogs copied
		{"", BinlogInfo{}, true},
		{"binlog.000001 172524 0-1-3\n", BinlogInfo{}, true},
		{"binlog.000001\tx\t0-1-3\n", BinlogInfo{}, true},
	} {
		got, err := parseBinlogInfo(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("parseBinlogInfo(%q) = %+v, %v; want %+v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestNormalizeGTID(t *testing.T) {
	for in, want := range map[string]string{
		"":                    "",
		"0-1-3":               "0-1-3",
		" 7-2-19, 0-1-3\n":    "0-1-3,7-2-19",
		"10-1-1,2-1-1,0-9-08": "0-9-8,2-1-1,10-1-1",
	} {
		if got, err := normalizeGTID(in); err != nil || got != want {
			t.Errorf("normalizeGTID(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"0-1", "0-1-3,0-2-4", "a-b-c", "0-1-3,", "4294967296-1-1", "3E11FA47-71CA-11E1:1-5"} {
		if got, err := normalizeGTID(bad); err == nil {
			t.Errorf("normalizeGTID(%q) = %q, want an error", bad, got)
		}
	}
	if same, err := sameGTID("1-1-1,0-1-3", "0-1-3, 1-1-1"); !same || err != nil {
		t.Errorf("sameGTID of reordered positions: %v %v", same, err)
	}
	if same, _ := sameGTID("0-1-3", "0-1-4"); same {
		t.Error("sameGTID(0-1-3, 0-1-4)")
	}
}

func TestParseToolVersion(t *testing.T) {
	for in, want := range map[string]string{
		"mariadb-backup based on MariaDB server 10.11.14-MariaDB debian-linux-gnu (x86_64)\n": "mariadb-backup 10.11.14-MariaDB",
		"mariabackup based on MariaDB server 10.5.9-MariaDB Linux (x86_64)":                   "mariabackup 10.5.9-MariaDB",
		"/usr/bin/mariadb-backup based on MariaDB server 10.11.14-MariaDB debian-linux-gnu":   "mariadb-backup 10.11.14-MariaDB",
		"\nsomething else\nsecond": "something else",
		"":                         "",
	} {
		if got := parseToolVersion(in); got != want {
			t.Errorf("parseToolVersion(%q) = %q, want %q", in, got, want)
		}
	}
}
