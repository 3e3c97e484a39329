package migrate

import (
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/mycnf"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// benchGiBEnv is the size of the generated dataset in GiB (fractions allowed); TestBenchMigrate
// is skipped when it is unset (make bench-migrate).
const benchGiBEnv = "DOLPHIN_BENCH_MIGRATE_GIB"

// Settings of the benchmark.
const (
	benchTables     = 4
	benchBatchRows  = 50_000
	benchCatchUp    = 15 * time.Second // how long the source is written to before replication starts
	benchWriters    = 4
	benchRowPayload = "SHA2(seq, 512), REPEAT(MD5(seq), 8)" // 128 + 256 characters per row
)

// TestBenchMigrate measures a migration's engine steps on real servers with a generated
// dataset of DOLPHIN_BENCH_MIGRATE_GIB GiB in benchTables InnoDB tables: the logical copy
// (LogicalCopy) against the pipeline a team would run by hand with the same dump options
// (`mariadb-dump … | mariadb`) into another fresh server, in the same run, the source warmed
// first so that neither reads it cold; the catch-up of benchCatchUp of writes by benchWriters
// application sessions made after the copy; a verification of every table; and the cutover
// under an application writer that switches to the target when the source refuses it. It ends
// with "migrate bytes=… copy_ratio=… catchup_tps=… cutover_pause=…s lost_acked_writes=N"
// (copy_ratio: the hand pipeline's time over LogicalCopy's, ≥ 1 when the copy is not slower)
// and fails on a checksum mismatch or a lost write.
func TestBenchMigrate(t *testing.T) {
	v := os.Getenv(benchGiBEnv)
	if v == "" {
		t.Skipf("set %s (make bench-migrate)", benchGiBEnv)
	}
	gib, err := strconv.ParseFloat(v, 64)
	if err != nil || gib <= 0 {
		t.Fatalf("%s=%q: want a positive number of GiB", benchGiBEnv, v)
	}
	rep := testenv.NewBenchReport(t)
	ctx := t.Context()
	c := dbtest.Start(t, dbtest.Options{Instances: 3, ExtraConfig: map[string]string{
		"innodb_buffer_pool_size": "1G", "innodb_log_file_size": "512M", "max_allowed_packet": "64M",
		"innodb_io_capacity": "2000", "innodb_io_capacity_max": "8000",
	}})
	src, hand, dst := c.Instances[0], c.Instances[1], c.Instances[2]
	srcRoot := open(t, src.RootDSN(""))
	execAll(t, srcRoot,
		"SET GLOBAL read_only = OFF",
		"CREATE DATABASE bench",
		"CREATE USER 'migrate'@'%' IDENTIFIED BY 'pw'",
		"GRANT SELECT, SHOW VIEW, TRIGGER, EVENT, REPLICATION SLAVE, BINLOG MONITOR, READ_ONLY ADMIN, CONNECTION ADMIN, PROCESS ON *.* TO 'migrate'@'%'",
		"CREATE USER 'app'@'%' IDENTIFIED BY 'app-pw'",
		"GRANT INSERT, SELECT ON *.* TO 'app'@'%'")
	tables := make([]string, 0, benchTables+1)
	for i := range benchTables {
		tables = append(tables, fmt.Sprintf("bench.t%d", i))
		execAll(t, srcRoot, fmt.Sprintf("CREATE TABLE bench.t%d (id BIGINT UNSIGNED PRIMARY KEY, h CHAR(128) NOT NULL, txt VARCHAR(512) NOT NULL) ENGINE=InnoDB", i))
	}
	execAll(t, srcRoot, "CREATE TABLE bench.w (id BIGINT UNSIGNED PRIMARY KEY, writer INT NOT NULL, v VARCHAR(64) NOT NULL) ENGINE=InnoDB")
	tables = append(tables, "bench.w")

	began := time.Now()
	rows := generate(t, srcRoot, int64(gib*(1<<30)))
	rep.Add("dataset: tables=%d rows=%d generated_s=%.1f", benchTables, rows, time.Since(began).Seconds())
	// Warm: every row read once, so that both copies read the source from its buffer pool.
	for _, tb := range tables[:benchTables] {
		str(t, srcRoot, "SELECT SUM(LENGTH(txt)) FROM "+tb)
	}

	source := Endpoint{Host: src.Host, Port: src.Port, User: "migrate", Password: "pw"}
	handTook := handPipeline(t, source, Endpoint{Socket: hand.SocketPath(), User: "root"})
	rep.Add("hand pipeline (mariadb-dump | mariadb): s=%.1f", handTook.Seconds())
	hand.Stop(t) // its memory back for the rest

	res, err := LogicalCopy(ctx, LogicalCopyOptions{Source: source, Target: Endpoint{Socket: dst.SocketPath(), User: "root"}, TmpDir: t.TempDir()})
	if err != nil {
		t.Fatalf("LogicalCopy: %v", err)
	}
	rep.Add("LogicalCopy: bytes=%d s=%.1f MB/s=%.1f position=%s", res.Bytes, res.Took.Seconds(), testenv.MBps(res.Bytes, res.Took), res.GTIDPosition)
	dstRoot := open(t, dst.RootDSN(""))
	if r, err := CopyAccounts(ctx, open(t, "migrate:pw@tcp("+src.Addr()+")/"), dstRoot, func(a Account) bool { return a.User == "migrate" }); err != nil || len(r.Failed) > 0 {
		t.Fatalf("CopyAccounts: %+v, %v", r, err)
	}

	// Writes made after the copy, applied once replication starts.
	app := open(t, "app:app-pw@tcp("+src.Addr()+")/bench")
	var next atomic.Int64
	var wg sync.WaitGroup
	stopAt := time.Now().Add(benchCatchUp)
	for w := range benchWriters {
		wg.Go(func() {
			for time.Now().Before(stopAt) {
				id := next.Add(1)
				if _, err := app.Exec("INSERT INTO w VALUES (?, ?, 'catch-up')", id, w); err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
			}
		})
	}
	wg.Wait()
	backlog := next.Load()
	final := gtidBinlogPos(t, srcRoot)
	execAll(t, dstRoot, fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='%s', MASTER_PORT=%d, MASTER_USER='migrate', "+
		"MASTER_PASSWORD='pw', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1", src.Host, src.Port), "START SLAVE")
	catchStart := time.Now()
	var waited int
	if err := dstRoot.QueryRow("SELECT MASTER_GTID_WAIT(?, 600)", final).Scan(&waited); err != nil || waited != 0 {
		t.Fatalf("catching up to %s: %d, %v", final, waited, err)
	}
	catchTook := time.Since(catchStart)
	catchTPS := float64(backlog) / catchTook.Seconds()
	rep.Add("catch-up: transactions=%d written_in_s=%.0f applied_in_s=%.1f tps=%.0f", backlog, benchCatchUp.Seconds(), catchTook.Seconds(), catchTPS)

	vr, err := Verify(ctx, open(t, "migrate:pw@tcp("+src.Addr()+")/"), dstRoot, tables, 5*time.Minute)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if bad := vr.Mismatched(); len(bad) > 0 {
		t.Fatalf("checksums differ at %s: %v", vr.Position, bad)
	}
	rep.Add("verified: tables=%d position=%s", len(vr.Tables), vr.Position)

	m := &migration{src: src, dst: dst, srcRoot: srcRoot, dstRoot: dstRoot, srcMigrate: open(t, "migrate:pw@tcp("+src.Addr()+")/")}
	w := startSwitchingWriter(t, m, "INSERT INTO bench.w VALUES (?, 0, 'cutover')", 1_000_000_000)
	testenv.Eventually(t, 10*time.Second, "the application writing", func() error {
		if n := w.count(); n < 200 {
			return fmt.Errorf("%d writes", n)
		}
		return nil
	})
	cut, err := Cutover(ctx, m.srcMigrate, dstRoot, time.Minute)
	if err != nil {
		t.Fatalf("Cutover: %v", err)
	}
	testenv.Eventually(t, 10*time.Second, "the application writing to the target", func() error {
		if !w.writingTo(true) {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	w.stop.Store(true)
	w.wg.Wait()
	pause := w.pause()
	lost := 0
	have := map[int]bool{}
	rowsW, err := dstRoot.QueryContext(ctx, "SELECT id FROM bench.w WHERE id >= 1000000000")
	if err != nil {
		t.Fatal(err)
	}
	for rowsW.Next() {
		var id int
		if err := rowsW.Scan(&id); err != nil {
			t.Fatal(err)
		}
		have[id] = true
	}
	rowsW.Close()
	for _, a := range w.acks {
		if !have[a.id] {
			lost++
		}
	}
	rep.Add("cutover: position=%s servers_pause_s=%.3f application_pause_s=%.3f sessions_ended=%d acknowledged=%d",
		cut.Position, cut.Opened.Sub(cut.Fenced).Seconds(), pause.Seconds(), cut.ClientsEnded, len(w.acks))
	ratio := handTook.Seconds() / res.Took.Seconds()
	rep.Summary = fmt.Sprintf("migrate bytes=%d copy_ratio=%.2f catchup_tps=%.0f cutover_pause=%.3fs lost_acked_writes=%d copy_s=%.1f hand_s=%.1f",
		res.Bytes, ratio, catchTPS, pause.Seconds(), lost, res.Took.Seconds(), handTook.Seconds())
	if lost > 0 {
		t.Errorf("%d acknowledged writes lost across the cutover", lost)
	}
}

// generate fills the bench tables of the source to about want bytes of rows (without the
// binary log: the dataset is the copy's, not replication's) and returns the rows written.
func generate(t *testing.T, db *sql.DB, want int64) int64 {
	t.Helper()
	const rowBytes = 8 + 128 + 256
	perTable := want / rowBytes / benchTables
	var wg sync.WaitGroup
	errs := make([]error, benchTables)
	for i := range benchTables {
		wg.Go(func() {
			conn, err := db.Conn(t.Context())
			if err != nil {
				errs[i] = err
				return
			}
			defer conn.Close()
			if _, err := conn.ExecContext(t.Context(), "SET SESSION sql_log_bin = 0"); err != nil {
				errs[i] = err
				return
			}
			for from := int64(1); from <= perTable; from += benchBatchRows {
				to := min(from+benchBatchRows-1, perTable)
				q := fmt.Sprintf("INSERT INTO bench.t%d SELECT seq, %s FROM bench.seq_%d_to_%d", i, benchRowPayload, from, to)
				if _, err := conn.ExecContext(t.Context(), q); err != nil {
					errs[i] = fmt.Errorf("%s: %w", q, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return perTable * benchTables
}

// handPipeline runs `mariadb-dump <LogicalCopy's options> | mariadb --binary-mode` through a
// shell, as a team would by hand, and returns its time; the loader skips the binary log as
// LogicalCopy's does, so that both do the same work.
func handPipeline(t *testing.T, source, target Endpoint) time.Duration {
	t.Helper()
	srcFile, err := mycnf.WriteClientFile(t.TempDir(), "the bench's hand pipeline", source.clientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	dstFile, err := mycnf.WriteClientFile(t.TempDir(), "the bench's hand pipeline", target.clientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	script := `set -o pipefail; mariadb-dump --defaults-extra-file="$1" ` + strings.Join(dumpArgs, " ") +
		` | mariadb --defaults-extra-file="$2" --binary-mode --max-allowed-packet=1073741824 --init-command="SET SESSION sql_log_bin=0"`
	began := time.Now()
	cmd := exec.CommandContext(t.Context(), "bash", "-c", script, "bash", srcFile, dstFile)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the hand pipeline: %v\n%s", err, out)
	}
	return time.Since(began)
}
