package restore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/binlog"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestServerRestoreToPoint backs a real server up, archives its binary log with the real
// archiver while rows are written one per transaction, and restores the backup into fresh
// data directories replayed to a GTID between two writes (exactly the rows up to it), to the
// end of the archive (every row), and to a position beyond the archive (refused, nothing
// initialised). The restored server's GTID state is the target everywhere, so replication
// would continue from it.
func TestServerRestoreToPoint(t *testing.T) {
	srcInst := dbtest.Start(t, dbtest.Options{Instances: 1}).Instances[0]
	db := openDB(t, socketDSN(srcInst, "root", ""))
	execAll(t, db,
		"SET GLOBAL read_only = OFF",
		"CREATE DATABASE app",
		"CREATE TABLE app.t (id INT PRIMARY KEY)",
		"CREATE USER '"+operatorUser+"'@'%' IDENTIFIED BY '"+oldOperatorPw+"'",
		"GRANT ALL PRIVILEGES ON *.* TO '"+operatorUser+"'@'%' WITH GRANT OPTION",
		"CREATE USER 'arch'@'%' IDENTIFIED BY 'arch-pw'",
		"GRANT REPLICATION SLAVE ON *.* TO 'arch'@'%'",
		"INSERT INTO app.t SELECT seq FROM app.seq_1_to_10")
	root := t.TempDir()
	store := dirStore(t, root)
	m, err := backup.Take(t.Context(), backup.TakeOptions{
		Prefix: "ns/src/b/", Name: "b", Namespace: "ns", Cluster: "src", SourceInstance: srcInst.Name, SourceRole: "primary",
		Socket: srcInst.SocketPath(), User: "root", DataDir: srcInst.DataDir, DefaultsFile: srcInst.ConfigFile, TmpDir: t.TempDir(),
		ExtraArgs: []string{"--log-copy-interval=100"},
	}, store)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}

	actx, stop := context.WithCancel(t.Context())
	a, err := binlog.NewArchiver(binlog.ArchiverOptions{
		Source: func(context.Context) (binlog.Endpoint, error) {
			return binlog.Endpoint{Host: srcInst.Host, Port: srcInst.Port, User: "arch", Password: "arch-pw"}, nil
		},
		Store: store, Prefix: "ns/src/binlog/", ServerID: 4000000000, SegmentMaxAge: 300 * time.Millisecond, Start: m.GTIDPosition,
	})
	if err != nil {
		t.Fatal(err)
	}
	archived := make(chan error, 1)
	go func() { archived <- a.Run(actx) }()
	defer func() { stop(); <-archived }()

	var mid, final string
	for id := 11; id <= 40; id++ {
		execAll(t, db, fmt.Sprintf("INSERT INTO app.t VALUES (%d)", id))
		if id == 25 {
			mid = str(t, db, "SELECT @@gtid_binlog_pos")
		}
		if id%10 == 0 {
			time.Sleep(400 * time.Millisecond) // several segments
		}
	}
	final = str(t, db, "SELECT @@gtid_binlog_pos")
	for deadline := time.Now().Add(30 * time.Second); a.Status().Position != final; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the archive did not reach %s: %+v", final, a.Status())
		}
	}
	t.Logf("backup at %s, mid %s, archive up to %s", m.GTIDPosition, mid, final)
	src := &source{inst: srcInst, root: root, manifest: m}
	pit := func(to string) *PointInTime {
		return &PointInTime{Archive: objectstore.Config{Directory: root}, Prefix: "ns/src/binlog/", To: to}
	}

	for _, c := range []struct {
		name, to, want string
		rows           int
	}{
		{"ToGTID", mid, mid, 25},
		{"ToTheEnd", "", final, 40},
	} {
		t.Run(c.name, func(t *testing.T) {
			inst := target(t)
			opts := src.options(t, inst, "ns/src/b/")
			opts.PointInTime = pit(c.to)
			res, err := IntoDataDir(t.Context(), opts)
			if err != nil {
				t.Fatalf("IntoDataDir: %v", err)
			}
			if !SameGTIDPosition(res.GTIDPosition, c.want) {
				t.Errorf("Result.GTIDPosition %q, want %q", res.GTIDPosition, c.want)
			}
			inst.StartAs(t, "root", newRootPw)
			r := openDB(t, socketDSN(inst, "root", newRootPw))
			var ids []int
			rows, err := r.QueryContext(t.Context(), "SELECT id FROM app.t ORDER BY id")
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var id int
				if err := rows.Scan(&id); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			rows.Close()
			if len(ids) != c.rows || ids[len(ids)-1] != c.rows || !slices.IsSorted(ids) {
				t.Errorf("restored ids %v, want 1..%d", ids, c.rows)
			}
			for _, v := range []string{"gtid_binlog_pos", "gtid_slave_pos", "gtid_current_pos"} {
				if got := str(t, r, "SELECT @@"+v); !SameGTIDPosition(got, c.want) {
					t.Errorf("@@%s is %q, want %q", v, got, c.want)
				}
			}
			if err := openDB(t, tcpDSN(inst, operatorUser, newOperatorPw)).PingContext(t.Context()); err != nil {
				t.Errorf("the new operator password: %v", err)
			}
		})
	}

	// Verification replays the archive after the backup to its end (and checks the tables
	// with the replayed rows); an archive that does not reach back to the backup is noted,
	// a damaged one fails the check.
	verifyWith := func(t *testing.T, root, prefix string) (VerifyReport, error) {
		opts := verifyOptions(t, root, t.TempDir())
		opts.Path = "ns/src/b/"
		opts.Archive = &VerifyArchive{Store: objectstore.Config{Directory: root}, Prefix: prefix}
		return Verify(t.Context(), opts)
	}
	t.Run("VerifyReplaysTheArchive", func(t *testing.T) {
		rep, err := verifyWith(t, root, "ns/src/binlog/")
		if err != nil {
			t.Fatalf("Verify: %v", err)
		}
		if !SameGTIDPosition(rep.ArchiveReplayedTo, final) || rep.ArchiveSegments < 2 || rep.ArchiveNote != "" {
			t.Errorf("replayed to %q in %d segments (note %q), want the archive's end %q in several", rep.ArchiveReplayedTo, rep.ArchiveSegments, rep.ArchiveNote, final)
		}
		if rep.Rows != 40 || !SameGTIDPosition(rep.GTIDPosition, m.GTIDPosition) {
			t.Errorf("report: %d rows at %q, want the 40 rows after the replay and the backup's position %q", rep.Rows, rep.GTIDPosition, m.GTIDPosition)
		}
	})
	t.Run("VerifyArchiveNotReachingTheBackup", func(t *testing.T) {
		rep, err := verifyWith(t, root, "ns/other/binlog/")
		if err != nil {
			t.Fatalf("Verify with an empty archive: %v (the backup itself is fine)", err)
		}
		if rep.ArchiveReplayedTo != "" || !strings.Contains(rep.ArchiveNote, "nothing is archived") || rep.Rows != 10 {
			t.Errorf("report %+v: want no replay, a note, the backup's 10 rows", rep)
		}
	})
	t.Run("VerifyDamagedArchive", func(t *testing.T) {
		copied := t.TempDir()
		if out, err := exec.Command("cp", "-a", root+"/.", copied).CombinedOutput(); err != nil {
			t.Fatalf("copying the store: %v: %s", err, out)
		}
		l, err := binlog.ListSegments(t.Context(), dirStore(t, copied), "ns/src/binlog/")
		if err != nil || len(l.Segments) < 2 {
			t.Fatalf("ListSegments: %v (%d segments)", err, len(l.Segments))
		}
		victim := l.Segments[len(l.Segments)-1]
		testenv.FlipByte(t, filepath.Join(copied, "ns/src/binlog", victim.Object))
		_, err = verifyWith(t, copied, "ns/src/binlog/")
		if !errors.Is(err, binlog.ErrCorrupt) || !strings.Contains(err.Error(), victim.Object) {
			t.Fatalf("Verify with a damaged segment: %v; want ErrCorrupt naming %s", err, victim.Object)
		}
		t.Logf("error: %v", err)
	})

	t.Run("BeyondTheArchive", func(t *testing.T) {
		inst := target(t)
		opts := src.options(t, inst, "ns/src/b/")
		opts.PointInTime = pit("0-1-999999")
		_, err := IntoDataDir(t.Context(), opts)
		if !errors.Is(err, binlog.ErrOutsideArchive) || !strings.Contains(err.Error(), `"0-1-7" to "`+final+`"`) {
			t.Fatalf("IntoDataDir beyond the archive: %v", err)
		}
		t.Logf("error: %v", err)
		if _, err := os.Stat(filepath.Join(inst.DataDir, InitializedMarker)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a failed point-in-time restore left %s: %v", InitializedMarker, err)
		}
	})
}
