//go:build linux

package backup_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/objectstore/s3test"
)

// TestServerAgentKilledMidBackup kills the real `dolphin agent` process (SIGKILL) while it
// streams a backup into a real S3 server, under a writer: the killed backup leaves no manifest
// and no visible object, an older backup is untouched and still verifies, the backup tool does
// not outlive its agent for long, the writer never stops, and a restarted agent does not know
// the job (which the operator turns into a Failed MySQLBackup: see the controller's envtest).
func TestServerAgentKilledMidBackup(t *testing.T) {
	dbtest.RequireMariaDB(t)
	s3test.RequireVersitygw(t)
	ctx := t.Context()
	bin := buildDolphin(t)
	c := dbtest.Start(t, dbtest.Options{Instances: 1, ExtraConfig: map[string]string{"innodb_buffer_pool_size": "256M"}})
	src := c.Instances[0]
	db := openDB(t, src)
	mustExec(t, db,
		"SET GLOBAL read_only = OFF",
		"CREATE DATABASE bench",
		`CREATE TABLE bench.t (id BIGINT UNSIGNED PRIMARY KEY, r VARBINARY(256) NOT NULL,
			h CHAR(128) NOT NULL, txt VARCHAR(1024) NOT NULL) ENGINE=InnoDB`,
		"CREATE TABLE bench.w (id BIGINT PRIMARY KEY)",
		fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", benchUser, benchPassword),
		fmt.Sprintf("GRANT %s ON *.* TO '%s'@'%%'", benchGrants, benchUser),
	)
	began := time.Now()
	// About 60 MiB in one statement: enough for a backup that is still uploading when killed.
	mustExec(t, db, "INSERT INTO bench.t SELECT "+benchRow+" FROM bench.seq_1_to_60000")
	t.Logf("dataset loaded in %s", time.Since(began).Round(time.Millisecond))
	conn := agent.DBConn{User: benchUser, Password: benchPassword, Socket: src.SocketPath()}
	s3 := s3test.Start(t)
	cfg := s3.Config("")
	store, err := objectstore.New(ctx, objectstore.Config{S3: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	storeJSON, err := json.Marshal(objectstore.Config{S3: &cfg})
	if err != nil {
		t.Fatal(err)
	}

	// An older, complete backup.
	ag := startAgentProcess(t, bin, src.DataDir, src.SocketPath())
	older := agentBackup(t, ag, cfg, conn, src.Name)
	t.Logf("older backup: %d bytes stored, GTID %s", older.status.Manifest.StoredBytes(), older.status.Manifest.GTIDPosition)

	// A writer that must never stop.
	var writes, failures atomic.Int64
	stop := make(chan struct{})
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for id := int64(1); ; id++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := db.ExecContext(ctx, "INSERT INTO bench.w VALUES (?)", id); err != nil {
				failures.Add(1)
			} else {
				writes.Add(1)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	// The backup to kill.
	const prefix = "bench/killed/"
	_, err = ag.client.StartBackup(ctx, agent.BackupRequest{ID: "killed", Store: storeJSON, Prefix: prefix, DB: conn,
		Meta: agent.BackupMeta{Name: "killed", Namespace: benchNamespace, Cluster: benchCluster, SourceInstance: src.Name, SourceRole: "primary", Flavor: "mariadb"}})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := ag.client.BackupStatus(ctx, "killed")
		if err != nil {
			t.Fatal(err)
		}
		if st.Finished() {
			t.Fatalf("the backup ended (%s) before it could be killed: make the dataset larger", st.Phase)
		}
		// Past the first multipart part (5 MiB in s3test's configuration): a multipart upload
		// is under way when the agent dies.
		if st.StoredBytes > 6<<20 {
			t.Logf("killing the agent after %d bytes uploaded", st.StoredBytes)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the backup uploaded nothing in 60 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("backup under way after %s", time.Since(began).Round(time.Millisecond))
	if len(processesMatching(t, "mariadb-backup", src.SocketPath())) == 0 {
		t.Fatal("no mariadb-backup process found while the backup runs: the check below could not fail")
	}
	before := writes.Load()
	if err := ag.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-ag.done

	// The backup tool, whose output pipe is gone, ends soon (it does not hold the server's
	// backup locks for long).
	toolGone := time.Now().Add(30 * time.Second)
	for {
		pids := processesMatching(t, "mariadb-backup", src.SocketPath())
		if len(pids) == 0 {
			break
		}
		if time.Now().After(toolGone) {
			t.Fatalf("mariadb-backup (pids %v) still runs 30 s after its agent was killed", pids)
		}
		time.Sleep(100 * time.Millisecond)
	}

	t.Logf("backup tool gone after %s", time.Since(began).Round(time.Millisecond))
	// Nothing of the killed backup is visible; the older one is whole.
	if _, err := backup.ReadManifest(ctx, store, prefix); !errors.Is(err, backup.ErrIncomplete) {
		t.Fatalf("the killed backup's manifest: %v, want ErrIncomplete (no manifest)", err)
	}
	if objs, err := store.List(ctx, prefix); err != nil || len(objs) != 0 {
		t.Fatalf("objects of the killed backup visible: %v (%v)", objs, err)
	}
	if _, err := backup.Verify(ctx, store, benchPrefix); err != nil {
		t.Fatalf("the older backup no longer verifies: %v", err)
	}

	// A restarted agent does not know the job.
	ag2 := startAgentProcess(t, bin, src.DataDir, src.SocketPath()) // returns once it answers
	if _, err := ag2.client.BackupStatus(ctx, "killed"); !errors.Is(err, agent.ErrUnknownBackup) {
		t.Fatalf("restarted agent on the killed job: %v, want ErrUnknownBackup", err)
	}

	// The writer went on through it all.
	time.Sleep(500 * time.Millisecond)
	close(stop)
	<-writerDone
	if failures.Load() != 0 || writes.Load() <= before {
		t.Fatalf("writer: %d writes (%d before the kill), %d failures: the database paused", writes.Load(), before, failures.Load())
	}
	t.Logf("writer: %d writes, 0 failures", writes.Load())
}

// processesMatching lists the processes whose command line contains every one of parts, read
// from /proc (no pgrep: a fresh machine may not have procps).
func processesMatching(t *testing.T, parts ...string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // gone meanwhile
		}
		cmd := strings.ReplaceAll(string(b), "\x00", " ")
		all := true
		for _, p := range parts {
			all = all && strings.Contains(cmd, p)
		}
		if all {
			pids = append(pids, e.Name())
		}
	}
	return pids
}
