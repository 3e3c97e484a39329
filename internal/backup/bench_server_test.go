//go:build linux

package backup_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/backup"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/freeport"
	"github.com/dolphin-operator/dolphin/internal/objectstore"
	"github.com/dolphin-operator/dolphin/internal/objectstore/s3test"
	"github.com/dolphin-operator/dolphin/internal/restore"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// Environment of TestBenchBackup.
const (
	// benchGiBEnv is the size of the generated InnoDB table in GiB (fractions allowed); the
	// benchmark is skipped when it is unset.
	benchGiBEnv = "DOLPHIN_BENCH_BACKUP_GIB"
	// benchBinEnv, when set, is a dolphin binary to run the agent from instead of building
	// ./cmd/dolphin (e.g. one built from a clean checkout while the working tree does not
	// compile).
	benchBinEnv = "DOLPHIN_BENCH_DOLPHIN_BIN"
	// benchKeepStreamEnv, when set, is a file the raw tool's stream is copied to (the raw
	// baseline then also writes it to disk: its figures are not comparable), the input of
	// BenchmarkBackupPipeline.
	benchKeepStreamEnv = "DOLPHIN_BENCH_BACKUP_KEEP_STREAM"
)

// Settings of the benchmark's servers and runs.
const (
	// benchBufferPool holds the whole 1 GiB table while it is loaded (the machine has 2 cores
	// and ~20 GiB free; both servers get it, the second one only uses it after the restore).
	benchBufferPool = "1G"
	// benchRedoLog keeps the load from stalling on checkpoints.
	benchRedoLog = "512M"
	// benchUseMemory is --use-memory of the restore's --prepare.
	benchUseMemory = "256M"
	// benchBatchRows is how many rows one INSERT … SELECT adds (~80 MB of rows).
	benchBatchRows = 100_000
	// benchLoaders is how many connections load in parallel (one per core).
	benchLoaders = 2
	// benchRSSInterval is how often the agent's VmRSS is sampled.
	benchRSSInterval = 100 * time.Millisecond
	// benchUser and benchPassword are the account the backups run as (over the socket).
	benchUser     = "dolphin-backup"
	benchPassword = "bench-pw-#1"
	benchGrants   = "RELOAD, PROCESS, LOCK TABLES, BINLOG MONITOR, SLAVE MONITOR"
	// benchCluster and benchNamespace name the agent's certificate and the manifest.
	benchCluster   = "bench"
	benchNamespace = "bench"
	benchPrefix    = "bench/b1/"
	// The clone's new cluster accounts (restore.FromPeer replaces them).
	cloneOperator   = "dolphin"
	cloneOperatorPw = "clone-operator-pw"
	cloneRootPw     = "clone-root-pw"
	// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times (100 on Linux).
	clockTicks = 100
)

// benchRow fills one row of bench.t from the sequence number seq: 256 random bytes (does not
// compress), a 128-character hex digest (compresses about 2:1) and ~400 bytes of repetitive
// text with a few varying words (compresses well), so that the table compresses roughly like
// real data rather than like zeros.
const benchRow = `seq, RANDOM_BYTES(256), SHA2(CONCAT('dolphin-', seq), 512),
	CONCAT('order ', seq, ' customer ', seq MOD 9973, ' status ',
		ELT(1 + seq MOD 4, 'shipped', 'pending', 'cancelled', 'returned'),
		' placed ', DATE_ADD('2024-01-01', INTERVAL seq MOD 700 DAY), ' note: ',
		REPEAT('the quick brown fox jumps over the lazy dog; ', 8))`

// TestBenchBackup measures backup and restore throughput on a generated dataset of
// DOLPHIN_BENCH_BACKUP_GIB GiB against two baselines in the same run, mariadb-backup itself
// and the pipeline a team would write by hand: `make bench-backup` runs it. On one real
// mariadbd (dbtest) it generates the data (not timed), then measures
//  1. the raw tool: mariadb-backup --backup --stream=mbstream with Take's options, its
//     output read and thrown away (as `| cat > /dev/null`);
//  2. Dolphin's backup through the real agent process (`dolphin agent`, built here) into a
//     real S3 server (versitygw, over https as production stores are), with the agent's RSS
//     sampled every 100 ms and its VmHWM;
//  3. the hand pipeline's backup with the same compression (mariadb-backup --stream | zstd
//     -1 -T0 | aws s3 cp -, the CLI's defaults) into the same bucket
//     (bench_pipeline_server_test.go);
//  4. backup.Restore from that bucket into a fresh directory (extract, then --prepare), and
//     the hand pipeline's restore (aws s3 cp … - | zstd -d | mbstream -x, then --prepare);
//  5. a clone through the agent (restore.FromPeer) into a fresh data directory, unless the
//     agent answers that clone is not built (then clone_s=not-built).
//
// It fails when a backup or restore fails or the restored table's CHECKSUM TABLE (on a
// server started on the restored directory) or GTID position differs from the source's. The
// figures and the summary line `backup bytes=… backup_ratio=… restore_ratio=…
// pipeline_backup_ratio=… pipeline_restore_ratio=… agent_peak_rss_mb=… clone_s=…` go to the
// test log and to DOLPHIN_BENCH_OUT when set. backup_ratio and restore_ratio are the raw
// tool's backup time divided by Dolphin's backup and restore times; the pipeline ratios are
// the hand pipeline's time divided by Dolphin's (≥ 1: Dolphin as fast or faster).
func TestBenchBackup(t *testing.T) {
	v := os.Getenv(benchGiBEnv)
	if v == "" {
		t.Skipf("set %s (make bench-backup)", benchGiBEnv)
	}
	gib, err := strconv.ParseFloat(v, 64)
	if err != nil || gib <= 0 {
		t.Fatalf("%s=%q: want a positive number of GiB", benchGiBEnv, v)
	}
	dbtest.RequireMariaDB(t)
	s3test.RequireVersitygw(t)
	hand := requireHandTools(t)
	rep := testenv.NewBenchReport(t)
	ctx := t.Context()

	step(t, "building the dolphin binary")
	bin := buildDolphin(t)

	c := dbtest.Start(t, dbtest.Options{Instances: 2, ExtraConfig: map[string]string{
		"innodb_buffer_pool_size": benchBufferPool,
		"innodb_log_file_size":    benchRedoLog,
		"innodb_io_capacity":      "2000",
		"innodb_io_capacity_max":  "8000",
		"max_allowed_packet":      "64M",
	}})
	src, spare := c.Instances[0], c.Instances[1]
	db := openDB(t, src)
	mustExec(t, db,
		"SET GLOBAL read_only = OFF",
		"CREATE DATABASE bench",
		`CREATE TABLE bench.t (id BIGINT UNSIGNED PRIMARY KEY, r VARBINARY(256) NOT NULL,
			h CHAR(128) NOT NULL, txt VARCHAR(1024) NOT NULL) ENGINE=InnoDB`,
		fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", benchUser, benchPassword),
		fmt.Sprintf("GRANT %s ON *.* TO '%s'@'%%'", benchGrants, benchUser),
	)

	want := int64(gib * (1 << 30))
	step(t, "generating %.2f GiB of InnoDB data", gib)
	ds := loadData(t, db, src.DataDir, want)
	rep.Add("dataset: rows=%d table_bytes=%d datadir_bytes=%d (%.2f GiB on disk) generated_s=%.1f flushed_s=%.1f",
		ds.rows, ds.tableBytes, ds.dataDirBytes, float64(ds.dataDirBytes)/(1<<30), ds.loadTook.Seconds(), ds.flushTook.Seconds())
	srcGTID := queryString(t, db, "SELECT @@gtid_binlog_pos")
	step(t, "CHECKSUM TABLE on the source (%d rows)", ds.rows)
	srcSum := checksum(t, db, "bench.t")
	socket := src.SocketPath()
	conn := agent.DBConn{User: benchUser, Password: benchPassword, Socket: socket}

	// 1. The engine's own tool.
	step(t, "baseline: mariadb-backup --stream=mbstream > /dev/null")
	base := runBaseline(t, backup.TakeOptions{
		Socket: socket, User: benchUser, Password: benchPassword, DataDir: src.DataDir, TmpDir: t.TempDir(),
	})
	rep.Add("baseline mariadb-backup --stream=mbstream | cat >/dev/null: bytes=%d seconds=%.2f MB/s=%.1f tool_maxrss_mb=%d tool_cpu_s=%.2f",
		base.bytes, base.took.Seconds(), testenv.MBps(base.bytes, base.took), base.maxRSSKB/1024, base.cpu.Seconds())
	rep.Add("baseline timeline: all but the last MiB streamed at %.2fs (%.1f MB/s), exit at %.2fs (the tool's final wait for its redo log copy thread)",
		base.bulk.Seconds(), testenv.MBps(base.bytes, base.bulk), base.took.Seconds())

	// 2. Dolphin's backup, through the agent process into versitygw.
	s3 := s3test.StartTLS(t) // https, as production stores are: parts carry CRC32C (objectstore/s3checksum.go)
	cfg := s3.Config("")
	cfg.PartSize = 0 // the production default (16 MiB), not the tests' 5 MiB
	ag := startAgentProcess(t, bin, src.DataDir, socket)
	idleKB, _ := testenv.ProcStatusKB(ag.pid(), "VmRSS")
	gwPID := findProcess(t, "versitygw", s3.Dir)
	step(t, "dolphin backup through the agent (pid %d) into versitygw (pid %d)", ag.pid(), gwPID)
	gw0, busy0 := mustCPU(t, gwPID), machineCPU(t)
	bk := agentBackup(t, ag, cfg, conn, src.Name)
	gwCPU, busy := mustCPU(t, gwPID).sub(gw0), machineCPU(t).sub(busy0)
	m := bk.status.Manifest
	raw, stored := m.Objects[0].RawSize, m.StoredBytes()
	rep.Add("dolphin backup (agent → zstd → S3): raw_bytes=%d stored_bytes=%d seconds=%.2f MB/s=%.1f compression=%.2f (client saw %.2fs)",
		raw, stored, bk.took.Seconds(), testenv.MBps(raw, bk.took), float64(raw)/float64(stored), bk.wall.Seconds())
	rep.Add("agent during the backup: idle_rss_mb=%d peak_sampled_mb=%d vmhwm_mb=%d samples=%d agent_cpu_s=%.2f tool_cpu_s=%.2f",
		idleKB/1024, bk.mem.peakKB/1024, bk.mem.hwmKB/1024, bk.mem.samples, bk.cpu.self.Seconds(), bk.cpu.children.Seconds())
	rep.Add("machine during the backup: versitygw_cpu_s=%.2f other_cpu_s=%.2f (mariadbd, this test, anything else) busy_cores=%.2f of %d, %.2f until all but the last MiB was stored (from /proc/stat)",
		gwCPU.self.Seconds(), (busy.busy - bk.cpu.self - bk.cpu.children - gwCPU.self).Seconds(),
		busy.busy.Seconds()/bk.wall.Seconds(), busy.cores, bk.bulkBusy.busy.Seconds()/bk.bulk.Seconds())
	rep.Add("dolphin timeline: all but the last MiB stored at %.2fs (%.1f MB/s of raw data), mariadb-backup last seen at %.2fs, finished at %.2fs (client's clock, polled every %v)",
		bk.bulk.Seconds(), testenv.MBps(raw, bk.bulk), bk.toolSeen.Seconds(), bk.wall.Seconds(), benchRSSInterval)
	if ok, err := backup.SameGTID(m.GTIDPosition, srcGTID); err != nil || !ok {
		t.Fatalf("the manifest's GTID position %q is not the source's gtid_binlog_pos %q (%v)", m.GTIDPosition, srcGTID, err)
	}
	store, err := objectstore.New(ctx, objectstore.Config{S3: &cfg})
	if err != nil {
		t.Fatalf("opening the store: %v", err)
	}

	// 3. The pipeline a team would write by hand, into the same bucket.
	step(t, "hand pipeline: mariadb-backup --stream | zstd %s -T0 | aws s3 cp - (%s, starts in %.2fs)", handZstdLevel, hand.awsVersion, hand.awsStart.Seconds())
	hb := handBackup(t, hand, backup.TakeOptions{
		Socket: socket, User: benchUser, Password: benchPassword, DataDir: src.DataDir, TmpDir: t.TempDir(),
	}, cfg, store)
	rep.Add("hand pipeline: %s, `aws --version` takes %.2fs (the CLI's start-up, paid once in each of its runs)", hand.awsVersion, hand.awsStart.Seconds())
	rep.Add("hand pipeline backup (mariadb-backup | zstd %s -T0 | aws s3 cp -, %s): stored_bytes=%d seconds=%.2f MB/s=%.1f compression=%.2f cpu_s=%.2f: %s",
		handZstdLevel, hand.awsVersion, hb.stored, hb.took.Seconds(), testenv.MBps(raw, hb.took), float64(raw)/float64(hb.stored), hb.cpu().Seconds(), stageFigures(hb.pipelineRun))

	// 4. Restore from the bucket into a fresh directory: the spare's, which then serves it.
	spare.Stop(t)
	if err := os.RemoveAll(spare.DataDir); err != nil {
		t.Fatal(err)
	}
	step(t, "restore from versitygw into %s", spare.DataDir)
	rs := runRestore(t, store, spare.DataDir)
	rep.Add("restore extract (S3 → sha256 → zstd → mbstream -x): bytes=%d seconds=%.2f MB/s=%.1f",
		raw, rs.extract.Seconds(), testenv.MBps(raw, rs.extract))
	rep.Add("restore total (extract + --prepare --use-memory=%s): bytes=%d seconds=%.2f MB/s=%.1f prepare_s=%.2f",
		benchUseMemory, raw, rs.total.Seconds(), testenv.MBps(raw, rs.total), (rs.total - rs.extract).Seconds())
	if ok, err := backup.SameGTID(rs.manifest.GTIDPosition, srcGTID); err != nil || !ok {
		t.Fatalf("restored GTID position %q, the source's %q (%v)", rs.manifest.GTIDPosition, srcGTID, err)
	}
	step(t, "hand pipeline: aws s3 cp - | zstd -d | mbstream -x, mariadb-backup --prepare")
	hr := handRestore(t, hand, cfg)
	rep.Add("hand pipeline restore (aws s3 cp … - | zstd -d | mbstream -x, --prepare --use-memory=%s): seconds=%.2f MB/s=%.1f extract_s=%.2f prepare_s=%.2f cpu_s=%.2f: %s",
		benchUseMemory, hr.total.Seconds(), testenv.MBps(raw, hr.total), hr.extract.took.Seconds(), hr.prepare.Seconds(), hr.extract.cpu().Seconds(), stageFigures(hr.extract))
	step(t, "starting a server on the restored directory, CHECKSUM TABLE")
	spare.Start(t)
	rdb := openDB(t, spare)
	restoredSum := checksum(t, rdb, "bench.t")
	restoredRows := queryString(t, rdb, "SELECT COUNT(*) FROM bench.t")
	rep.Add("check: CHECKSUM TABLE bench.t source=%s restored=%s rows=%s gtid=%s",
		srcSum, restoredSum, restoredRows, rs.manifest.GTIDPosition)
	if restoredSum != srcSum || restoredRows != strconv.FormatInt(ds.rows, 10) {
		t.Fatalf("the restored table differs: checksum %s (source %s), %s rows (source %d)", restoredSum, srcSum, restoredRows, ds.rows)
	}

	// 5. Clone through the agent into a fresh data directory: the spare's again.
	step(t, "clone through the agent into a fresh %s (restore.FromPeer)", spare.DataDir)
	cloneS, cloneKB := cloneFigure(t, ag, spare, ds.rows, srcSum, srcGTID, raw, base.took, rep)

	backupRatio := base.took.Seconds() / bk.took.Seconds()
	restoreRatio := base.took.Seconds() / rs.total.Seconds()
	rep.Add("ratios (throughput relative to the baseline): backup=%.2f restore_total=%.2f restore_extract=%.2f",
		backupRatio, restoreRatio, base.took.Seconds()/rs.extract.Seconds())
	// mariadb-backup ends every backup with a fixed wait for its redo log copy thread (~5 s in
	// 10.11); Dolphin's runs pay it too. Without it (an estimate: the same wait assumed in
	// every run) the ratio says how the streaming itself compares.
	if wait := base.took - base.bulk; bk.took > wait {
		rep.Add("estimate without the tool's final wait (%.2fs, assumed equal in both runs): backup_ratio=%.2f",
			wait.Seconds(), base.bulk.Seconds()/(bk.took-wait).Seconds())
	}
	// Dolphin's time as its client saw it (the request to the agent, its run, the polls), like
	// the hand pipeline's, which includes starting its programs.
	pipelineBackupRatio := hb.took.Seconds() / bk.wall.Seconds()
	pipelineRestoreRatio := hr.total.Seconds() / rs.total.Seconds()
	if os.Getenv(benchKeepStreamEnv) != "" {
		rep.Add("note: %s is set: the raw baseline also wrote its stream to disk, so backup_ratio and restore_ratio are not comparable with other runs", benchKeepStreamEnv)
	}
	rep.Add("ratios to the hand pipeline (its time / Dolphin's as its client saw it; ≥ 1 is as fast or faster): backup=%.2f restore_total=%.2f restore_extract=%.2f",
		pipelineBackupRatio, pipelineRestoreRatio, hr.extract.took.Seconds()/rs.extract.Seconds())
	rep.Summary = fmt.Sprintf("backup bytes=%d backup_ratio=%.2f restore_ratio=%.2f pipeline_backup_ratio=%.2f pipeline_restore_ratio=%.2f agent_peak_rss_mb=%d clone_s=%s",
		raw, backupRatio, restoreRatio, pipelineBackupRatio, pipelineRestoreRatio, max(bk.mem.hwmKB, bk.mem.peakKB, cloneKB)/1024, cloneS)
}

// step logs a progress line (the Makefile shows them while the benchmark runs).
func step(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("step: "+format, args...)
}

// buildDolphin builds cmd/dolphin into the test's temporary directory, unless
// DOLPHIN_BENCH_DOLPHIN_BIN names a binary to use.
func buildDolphin(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv(benchBinEnv); bin != "" {
		if st, err := os.Stat(bin); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			t.Fatalf("%s=%s is not an executable file (%v)", benchBinEnv, bin, err)
		}
		t.Logf("using %s=%s", benchBinEnv, bin)
		return bin
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build dolphin: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "dolphin")
	began := time.Now()
	out, err := exec.CommandContext(t.Context(), goTool, "build", "-o", bin,
		"github.com/dolphin-operator/dolphin/cmd/dolphin").CombinedOutput()
	if err != nil {
		// One line: the Makefile shows only the test's log lines.
		t.Fatalf("go build ./cmd/dolphin: %v: %s", err, strings.Join(strings.Fields(tail(string(out), 5)), " "))
	}
	t.Logf("built %s in %v", bin, time.Since(began).Round(time.Millisecond))
	return bin
}

// openDB opens a root pool to inst over TCP with timeouts long enough for a load batch or a
// CHECKSUM TABLE of the whole table.
func openDB(t *testing.T, inst *dbtest.Instance) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", inst.RootDSN("timeout=5s&readTimeout=30m&writeTimeout=5m"))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(benchLoaders + 2)
	t.Cleanup(func() { db.Close() })
	return db
}

func mustExec(t *testing.T, db *sql.DB, qs ...string) {
	t.Helper()
	for _, q := range qs {
		if _, err := db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func queryString(t *testing.T, db *sql.DB, q string) string {
	t.Helper()
	var s sql.NullString
	if err := db.QueryRowContext(t.Context(), q).Scan(&s); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return s.String
}

func checksum(t *testing.T, db *sql.DB, table string) string {
	t.Helper()
	var name, sum sql.NullString
	if err := db.QueryRowContext(t.Context(), "CHECKSUM TABLE "+table).Scan(&name, &sum); err != nil {
		t.Fatalf("CHECKSUM TABLE %s: %v", table, err)
	}
	if !sum.Valid {
		t.Fatalf("CHECKSUM TABLE %s: NULL (no such table?)", table)
	}
	return sum.String
}

// dataset is what loadData generated.
type dataset struct {
	rows                int64
	tableBytes          int64
	dataDirBytes        int64
	loadTook, flushTook time.Duration
}

// loadData fills bench.t with INSERT … SELECT batches from the sequence engine, without
// writing them to the binary log (so that no GiB of binlog sits next to the data), until its
// tablespace holds at least want bytes; then it flushes every dirty page, so that both
// backups read the same files from the same state.
func loadData(t *testing.T, db *sql.DB, dataDir string, want int64) dataset {
	t.Helper()
	ctx := t.Context()
	ibd := filepath.Join(dataDir, "bench", "t.ibd")
	size := func() int64 {
		st, err := os.Stat(ibd)
		if err != nil {
			return 0
		}
		return st.Size()
	}
	var next atomic.Int64
	var done atomic.Bool
	began := time.Now()
	errs := make([]error, benchLoaders)
	var wg sync.WaitGroup
	for w := range benchLoaders {
		wg.Go(func() {
			conn, err := db.Conn(ctx)
			if err != nil {
				errs[w] = err
				return
			}
			defer conn.Close()
			if _, err := conn.ExecContext(ctx, "SET SESSION sql_log_bin = 0"); err != nil {
				errs[w] = fmt.Errorf("SET sql_log_bin: %w", err)
				return
			}
			for !done.Load() {
				b := next.Add(1) - 1
				from, to := b*benchBatchRows+1, (b+1)*benchBatchRows
				q := fmt.Sprintf("INSERT INTO bench.t SELECT %s FROM bench.seq_%d_to_%d", benchRow, from, to)
				if _, err := conn.ExecContext(ctx, q); err != nil {
					errs[w] = fmt.Errorf("batch %d: %w", b, err)
					done.Store(true)
					return
				}
				if size() >= want {
					done.Store(true)
				}
				if (b+1)%5 == 0 {
					t.Logf("  loaded %d batches, tablespace %d MiB, %v", b+1, size()>>20, time.Since(began).Round(time.Second))
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("loading bench.t: %v", err)
	}
	loadTook := time.Since(began)

	flushBegan := time.Now()
	mustExec(t, db, "SET GLOBAL innodb_max_dirty_pages_pct_lwm = 0", "SET GLOBAL innodb_max_dirty_pages_pct = 0")
	for deadline := time.Now().Add(10 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		var name string
		var dirty int64
		if err := db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'").Scan(&name, &dirty); err != nil {
			t.Fatalf("reading the dirty page count: %v", err)
		}
		if dirty == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d dirty pages left after 10 minutes of flushing", dirty)
		}
	}
	mustExec(t, db, "SET GLOBAL innodb_max_dirty_pages_pct = DEFAULT", "SET GLOBAL innodb_max_dirty_pages_pct_lwm = DEFAULT")
	rows, err := strconv.ParseInt(queryString(t, db, "SELECT COUNT(*) FROM bench.t"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return dataset{rows: rows, tableBytes: size(), dataDirBytes: dirSize(t, dataDir),
		loadTook: loadTook, flushTook: time.Since(flushBegan)}
}

// dirSize is the total size of the regular files under dir.
func dirSize(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.Type().IsRegular() {
			info, err := e.Info()
			if err != nil {
				return err
			}
			n += info.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("sizing %s: %v", dir, err)
	}
	return n
}

// baseline is what runBaseline measured.
type baseline struct {
	bytes int64
	// took is start → exit; bulk start → all but the last MiB of the stream read.
	took, bulk time.Duration
	maxRSSKB   int64
	cpu        time.Duration
}

// runBaseline runs mariadb-backup with Take's arguments for o and reads its stream into
// nothing, counting the bytes.
func runBaseline(t *testing.T, o backup.TakeOptions) baseline {
	t.Helper()
	tool, args, cleanup, err := backup.BaselineCommand(o)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	cmd := exec.CommandContext(t.Context(), tool, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", tool, err)
	}
	var n int64
	buf := make([]byte, 128<<10) // cat's buffer size
	var readErr error
	var keep *os.File // DOLPHIN_BENCH_BACKUP_KEEP_STREAM: a copy of the stream, for profiling
	if path := os.Getenv(benchKeepStreamEnv); path != "" {
		if keep, err = os.Create(path); err != nil {
			t.Fatal(err)
		}
		defer keep.Close()
	}
	type mark struct {
		n  int64
		at time.Duration
	}
	var marks []mark
	for {
		k, err := stdout.Read(buf)
		n += int64(k)
		if keep != nil && k > 0 {
			if _, werr := keep.Write(buf[:k]); werr != nil {
				t.Fatalf("keeping the stream: %v", werr)
			}
		}
		if k > 0 {
			marks = append(marks, mark{n, time.Since(began)})
		}
		if err != nil {
			if err != io.EOF {
				readErr = err
			}
			break
		}
	}
	waitErr := cmd.Wait()
	took := time.Since(began)
	if err := errors.Join(readErr, waitErr); err != nil || !strings.Contains(stderr.String(), "completed OK!") {
		t.Fatalf("baseline %s %s: %v; its output:\n%s", tool, strings.Join(args, " "), err, tail(stderr.String(), 20))
	}
	b := baseline{bytes: n, took: took, bulk: took}
	for _, m := range marks {
		if m.n >= n-1<<20 {
			b.bulk = m.at
			break
		}
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		b.maxRSSKB = ru.Maxrss
		b.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return b
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// agentProcess is a running `dolphin agent` and a client for it.
type agentProcess struct {
	cmd    *exec.Cmd
	done   chan struct{}
	log    string
	client *agent.Client
	// url, token and caPEM are how clients reach it.
	url, token string
	caPEM      []byte
}

func (a *agentProcess) pid() int { return a.cmd.Process.Pid }

// logTail is the end of the agent's log, for failure messages.
func (a *agentProcess) logTail() string {
	b, _ := os.ReadFile(a.log)
	return tail(string(b), 30)
}

// startAgentProcess starts `dolphin agent` on a free port of 127.0.0.1 with a new PKI and
// token, for the server whose data is dataDir and socket socket, and waits until it answers.
// A t.Cleanup stops it (SIGTERM, then SIGKILL).
func startAgentProcess(t *testing.T, bin, dataDir, socket string) *agentProcess {
	t.Helper()
	caPEM, certPEM, keyPEM, err := agent.NewAgentPKI(benchCluster, benchNamespace, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	token, err := agent.GenerateToken()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, data := range map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, "token": []byte(token)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ports, err := freeport.Pick(1) // the agent binds it later: outside the ephemeral range
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))

	a := &agentProcess{done: make(chan struct{}), log: filepath.Join(dir, "agent.log"),
		url: "https://" + addr, token: token, caPEM: caPEM}
	logf, err := os.Create(a.log)
	if err != nil {
		t.Fatal(err)
	}
	a.cmd = exec.Command(bin, "agent", "--listen", addr,
		"--token-file", filepath.Join(dir, "token"), "--tls-cert", filepath.Join(dir, "tls.crt"), "--tls-key", filepath.Join(dir, "tls.key"),
		"--flavor", "mariadb", "--datadir", dataDir, "--socket", socket)
	a.cmd.Stdout, a.cmd.Stderr = logf, logf
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the test
	if err := a.cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("starting %s agent: %v", bin, err)
	}
	go func() {
		_ = a.cmd.Wait()
		logf.Close()
		close(a.done)
	}()
	t.Cleanup(func() {
		_ = a.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-a.done:
		case <-time.After(15 * time.Second):
			_ = a.cmd.Process.Kill()
			<-a.done
		}
		if t.Failed() {
			t.Logf("agent log (%s):\n%s", a.log, a.logTail())
		}
	})

	a.client, err = agent.NewClient(agent.ClientOptions{BaseURL: a.url, Token: token, CACertPEM: caPEM,
		ServerName: agent.AgentServerName(benchCluster, benchNamespace)})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		err := a.client.Healthy(ctx)
		cancel()
		if err == nil {
			return a
		}
		select {
		case <-a.done:
			t.Fatalf("the agent exited (%v): %s", a.cmd.ProcessState, a.logTail())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not answer within 15 s: %v\n%s", err, a.logTail())
		}
	}
}

// memSampler samples a process's VmRSS every benchRSSInterval until finish, which also
// reads its VmHWM (the peak since the process started or since resetPeak).
type memSampler struct {
	pid           int
	stop, done    chan struct{}
	peakKB, hwmKB int64
	samples       int
}

// resetPeak resets pid's VmHWM to its current RSS (clear_refs "5").
func resetPeak(pid int) error {
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		return fmt.Errorf("resetting the peak RSS of pid %d: %w", pid, err)
	}
	return nil
}

func sampleMemory(pid int) *memSampler {
	s := &memSampler{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(benchRSSInterval)
		defer tick.Stop()
		for {
			if kb, err := testenv.ProcStatusKB(pid, "VmRSS"); err == nil {
				s.peakKB = max(s.peakKB, kb)
				s.samples++
			}
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// finish stops the sampling and reads VmHWM.
func (s *memSampler) finish(t *testing.T) {
	t.Helper()
	close(s.stop)
	<-s.done
	kb, err := testenv.ProcStatusKB(s.pid, "VmHWM")
	if err != nil {
		t.Fatal(err)
	}
	s.hwmKB = kb
}

// cpuTimes are a process's CPU time and that of its children it has waited for (the tools
// the agent runs).
type cpuTimes struct{ self, children time.Duration }

func (c cpuTimes) sub(d cpuTimes) cpuTimes {
	return cpuTimes{self: c.self - d.self, children: c.children - d.children}
}

// procCPU reads a process's CPU times and its children's.
func procCPU(pid int) (cpuTimes, error) {
	self, children, err := testenv.ProcCPU(pid)
	return cpuTimes{self: self, children: children}, err
}

func mustCPU(t *testing.T, pid int) cpuTimes {
	t.Helper()
	c, err := procCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// findProcess returns the PID of the one process whose command line holds every one of parts.
func findProcess(t *testing.T, parts ...string) int {
	t.Helper()
	pids := processesMatching(t, parts...)
	if len(pids) != 1 {
		t.Fatalf("processes with %q on their command line: %v, want one", parts, pids)
	}
	pid, err := strconv.Atoi(pids[0])
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// machineTimes are the CPU time of all processes (user, nice, system, irq and softirq in the
// first line of /proc/stat; guest time is part of user) and the number of CPUs.
type machineTimes struct {
	busy  time.Duration
	cores int
}

func (m machineTimes) sub(o machineTimes) machineTimes {
	return machineTimes{busy: m.busy - o.busy, cores: m.cores}
}

func machineCPU(t *testing.T) machineTimes {
	t.Helper()
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	var m machineTimes
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		switch {
		case len(f) > 7 && f[0] == "cpu":
			for _, i := range []int{1, 2, 3, 6, 7} { // user nice system [idle iowait] irq softirq
				n, err := strconv.ParseInt(f[i], 10, 64)
				if err != nil {
					t.Fatalf("/proc/stat: %q: %v", line, err)
				}
				m.busy += time.Duration(n) * (time.Second / clockTicks)
			}
		case len(f) > 0 && strings.HasPrefix(f[0], "cpu"):
			m.cores++
		}
	}
	return m
}

// agentRun is what agentBackup measured.
type agentRun struct {
	status agent.BackupStatus
	// took is the agent's own StartedAt → FinishedAt; wall what the client saw, polling;
	// bulk when the polled StoredBytes first came within 1 MiB of the final size; toolSeen
	// when mariadb-backup was last seen running (polled).
	took, wall, bulk, toolSeen time.Duration
	// bulkBusy is the CPU time of the whole machine until bulk.
	bulkBusy machineTimes
	mem      *memSampler
	cpu      cpuTimes
}

// agentBackup asks the agent for a backup into the bucket of cfg and polls it every 100 ms
// until it has ended, sampling the agent's VmRSS meanwhile; it fails the test unless the
// backup succeeded.
func agentBackup(t *testing.T, a *agentProcess, cfg objectstore.S3Config, conn agent.DBConn, source string) agentRun {
	t.Helper()
	ctx := t.Context()
	storeJSON, err := json.Marshal(objectstore.Config{S3: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	run := agentRun{mem: sampleMemory(a.pid())}
	cpu0, busy0 := mustCPU(t, a.pid()), machineCPU(t)
	began := time.Now()
	st, err := a.client.StartBackup(ctx, agent.BackupRequest{
		ID: "bench-1", Store: storeJSON, Prefix: benchPrefix, DB: conn,
		Meta: agent.BackupMeta{Name: "b1", Namespace: benchNamespace, Cluster: benchCluster,
			SourceInstance: source, SourceRole: "primary", Flavor: "mariadb"},
	})
	type mark struct {
		n    int64
		at   time.Duration
		busy machineTimes
	}
	var marks []mark
	for err == nil && !st.Finished() {
		time.Sleep(benchRSSInterval)
		st, err = a.client.BackupStatus(ctx, "bench-1")
		marks = append(marks, mark{st.StoredBytes, time.Since(began), machineCPU(t)})
		if len(processesMatching(t, "mariadb-backup", "--backup", "--socket="+conn.Socket)) > 0 {
			run.toolSeen = time.Since(began)
		}
	}
	run.wall = time.Since(began)
	run.bulk = run.wall
	for _, m := range marks {
		if m.n >= st.StoredBytes-1<<20 {
			run.bulk, run.bulkBusy = m.at, m.busy.sub(busy0)
			break
		}
	}
	run.mem.finish(t)
	run.cpu = mustCPU(t, a.pid()).sub(cpu0)
	if err != nil {
		t.Fatalf("agent backup: %v\nagent log:\n%s", err, a.logTail())
	}
	if st.Phase != agent.BackupSucceeded || st.Manifest == nil || len(st.Manifest.Objects) != 1 {
		t.Fatalf("agent backup ended %s: %s (manifest %+v)\nagent log:\n%s", st.Phase, st.Error, st.Manifest, a.logTail())
	}
	run.status, run.took = st, st.FinishedAt.Sub(st.StartedAt)
	return run
}

// restoreRun is what runRestore measured.
type restoreRun struct {
	manifest *backup.Manifest
	// extract ends when the last byte was read from the store; total includes --prepare.
	extract, total time.Duration
}

// runRestore restores the benchmark's backup from store into target.
func runRestore(t *testing.T, store objectstore.Store, target string) restoreRun {
	t.Helper()
	var lastRead atomic.Int64
	began := time.Now()
	m, err := backup.Restore(t.Context(), store, benchPrefix, backup.RestoreOptions{
		TargetDir: target, UseMemory: benchUseMemory,
		Progress: func(int64) { lastRead.Store(time.Now().UnixNano()) },
	})
	total := time.Since(began)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	extract := time.Unix(0, lastRead.Load()).Sub(began)
	return restoreRun{manifest: m, extract: extract, total: total}
}

// cloneFigure clones the source through the agent into inst's emptied data directory with
// restore.FromPeer (stream, extract, --prepare and the fix-up on a temporary server), starts
// inst on it and checks its table and GTID position against the source's. It returns the
// clone_s figure and the agent's peak RSS during the clone (kB), or "not-built" when the agent
// answers that clone is not built.
func cloneFigure(t *testing.T, a *agentProcess, inst *dbtest.Instance, rows int64, srcSum, srcGTID string, raw int64, baseTook time.Duration, rep *testenv.BenchReport) (string, int64) {
	t.Helper()
	inst.Stop(t)
	if err := os.RemoveAll(inst.DataDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(inst.DataDir, 0o750); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp("", "dolphin-bench-clone-") // short: the temporary server's socket goes there
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	if err := resetPeak(a.pid()); err != nil {
		t.Fatal(err)
	}
	mem := sampleMemory(a.pid())
	cpu0 := mustCPU(t, a.pid())
	var lastRead atomic.Int64
	var received atomic.Int64
	began := time.Now()
	res, err := restore.FromPeer(t.Context(), restore.PeerOptions{
		URL: a.url, ServerName: agent.AgentServerName(benchCluster, benchNamespace), Token: a.token, CACertPEM: a.caPEM,
		SourceDB: agent.DBConn{User: benchUser, Password: benchPassword},
		DataDir:  inst.DataDir, DefaultsFile: inst.ConfigFile,
		OperatorUser: cloneOperator, OperatorPassword: cloneOperatorPw, RootPassword: cloneRootPw,
		TmpDir: tmp, UseMemory: benchUseMemory,
		Progress: func(n int64) { received.Store(n); lastRead.Store(time.Now().UnixNano()) },
		Log:      func(format string, args ...any) { t.Logf("  clone: "+format, args...) },
	})
	took := time.Since(began)
	mem.finish(t)
	cpu := mustCPU(t, a.pid()).sub(cpu0)
	if err != nil && strings.Contains(err.Error(), "clone is not built") {
		rep.Add("clone: not built (the agent answers: %v)", err)
		return "not-built", 0
	}
	if err != nil {
		t.Fatalf("clone: %v\nagent log:\n%s", err, a.logTail())
	}
	stream := time.Unix(0, lastRead.Load()).Sub(began)
	rep.Add("clone (agent → zstd → HTTPS → mbstream -x, --prepare, fix-up): wire_bytes=%d seconds=%.2f stream_s=%.2f MB/s=%.1f (raw bytes %d) ratio=%.2f",
		received.Load(), took.Seconds(), stream.Seconds(), testenv.MBps(raw, took), raw, baseTook.Seconds()/took.Seconds())
	rep.Add("agent during the clone: peak_sampled_mb=%d vmhwm_mb=%d samples=%d agent_cpu_s=%.2f tool_cpu_s=%.2f",
		mem.peakKB/1024, mem.hwmKB/1024, mem.samples, cpu.self.Seconds(), cpu.children.Seconds())

	inst.StartAs(t, "root", cloneRootPw)
	db, err := sql.Open("mysql", fmt.Sprintf("root:%s@unix(%s)/?timeout=5s&readTimeout=30m", cloneRootPw, inst.SocketPath()))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sum := checksum(t, db, "bench.t")
	n := queryString(t, db, "SELECT COUNT(*) FROM bench.t")
	gtid := queryString(t, db, "SELECT @@gtid_current_pos")
	rep.Add("check clone: CHECKSUM TABLE bench.t=%s rows=%s gtid_current_pos=%s", sum, n, gtid)
	if sum != srcSum || n != strconv.FormatInt(rows, 10) {
		t.Fatalf("the cloned table differs: checksum %s (source %s), %s rows (source %d)", sum, srcSum, n, rows)
	}
	if ok, err := backup.SameGTID(gtid, srcGTID); err != nil || !ok {
		t.Fatalf("the clone's gtid_current_pos %q, the source's %q (%v)", gtid, srcGTID, err)
	}
	if ok, err := backup.SameGTID(res.GTIDPosition, srcGTID); err != nil || !ok {
		t.Fatalf("FromPeer's GTID position %q, the source's %q (%v)", res.GTIDPosition, srcGTID, err)
	}
	return fmt.Sprintf("%.2f", took.Seconds()), max(mem.hwmKB, mem.peakKB)
}
