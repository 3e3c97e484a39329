package e2e

import (
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/pki"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// throughputSetup is one of the three servers the throughput bench compares.
type throughputSetup struct {
	// key names the setup in the summary (standalone, cluster, tls).
	key     string
	cluster string
	spec    dolphinv1.MySQLClusterSpec
	// tls makes sysbench connect over TLS.
	tls bool
}

// sysbenchResult is what one sysbench run reported at its end.
type sysbenchResult struct {
	tps   float64
	p95ms float64
}

// sysbenchTotals reads sysbench's final report: "transactions: N (X per sec.)" and
// "95th percentile: Y".
var (
	sysbenchTPS = regexp.MustCompile(`transactions:\s+\d+\s+\(([0-9.]+) per sec\.\)`)
	sysbenchP95 = regexp.MustCompile(`95th percentile:\s+([0-9.]+)`)
)

// TestBenchThroughput measures the price of durability in the client's view: sysbench's
// oltp_write_only and oltp_read_write (8 and 32 threads, DOLPHIN_BENCH_THROUGHPUT_TIME each,
// default 20s) through each cluster's primary Service as an application account, against
// (a) a one-instance Dolphin cluster — the same server settings, no replication, nothing to
// wait for —, (b) a 3-instance cluster with lossless semi-sync (the default), (c) the same
// with TLS (sysbench over TLS). One setup runs at a time; all three clusters exist throughout.
// Prints tps and p95 latency per run and, per thread count, `throughput threads=N
// standalone_tps=… cluster_tps=… tls_tps=… ratio=… tls_ratio=…` (oltp_write_only, the
// 8-thread line last) to DOLPHIN_BENCH_OUT. `make bench-throughput` runs it.
func TestBenchThroughput(t *testing.T) {
	if os.Getenv("DOLPHIN_BENCH_THROUGHPUT") == "" {
		t.Skip("set DOLPHIN_BENCH_THROUGHPUT=1 (make bench-throughput)")
	}
	runFor := 20 * time.Second
	if d, err := time.ParseDuration(os.Getenv("DOLPHIN_BENCH_THROUGHPUT_TIME")); err == nil && d > 0 {
		runFor = d
	}
	if _, err := exec.LookPath("sysbench"); err != nil {
		t.Fatal("sysbench is not installed: hack/install-mariadb.sh installs it (make mariadb)")
	}
	s := upStackOn(t, repoRoot(), e2eNode())
	volumes := dolphinv1.StorageSpec{DeletePolicy: dolphinv1.VolumeDelete}
	setups := []throughputSetup{
		{key: "standalone", cluster: "tp-single", spec: dolphinv1.MySQLClusterSpec{Instances: 1, Storage: volumes}},
		{key: "cluster", cluster: "tp-semisync", spec: dolphinv1.MySQLClusterSpec{Instances: 3, Storage: volumes}},
		{key: "tls", cluster: "tp-tls", spec: dolphinv1.MySQLClusterSpec{Instances: 3, Storage: volumes, TLS: dolphinv1.TLSSpec{Enabled: true}}, tls: true},
	}
	var names []string
	for _, su := range setups {
		c := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: su.cluster}, Spec: su.spec}
		if err := s.c.Create(s.ctx, c); err != nil {
			t.Fatal(err)
		}
		names = append(names, su.cluster)
	}
	s.waitAllReady(names, 10*time.Minute)
	for _, su := range setups {
		s.declareAppAccount(su.cluster) // database app
		s.declareSysbenchAccount(su.cluster)
	}

	netns := "" // sysbench runs as a client pod would on the real node; one namespace for every run
	if s.node == nodeReal {
		netns = s.clientNetns()
	}
	results := map[string]sysbenchResult{} // by workload/threads/setup
	var lines []string
	for _, workload := range []string{"oltp_read_write", "oltp_write_only"} {
		for _, su := range setups {
			s.sysbench(su, netns, workload, "prepare", 0, 0)
			for _, threads := range []int{8, 32} {
				cpu0 := machineCPU(t)
				st0 := s.commitStatus(su)
				r := s.sysbench(su, netns, workload, "run", threads, runFor)
				busy := machineCPU(t).busyPctSince(cpu0)
				results[fmt.Sprintf("%s/%d/%s", workload, threads, su.key)] = r
				line := fmt.Sprintf("sysbench %s threads=%d setup=%s tps=%.1f p95_ms=%.2f machine_cpu_busy_pct=%.0f%s",
					workload, threads, su.key, r.tps, r.p95ms, busy, s.commitStatus(su).since(st0))
				t.Log(line)
				lines = append(lines, line)
			}
			s.sysbench(su, netns, workload, "cleanup", 0, 0)
		}
	}
	for _, workload := range []string{"oltp_read_write", "oltp_write_only"} {
		for _, threads := range []int{32, 8} {
			get := func(key string) sysbenchResult { return results[fmt.Sprintf("%s/%d/%s", workload, threads, key)] }
			a, b, c := get("standalone"), get("cluster"), get("tls")
			line := fmt.Sprintf("throughput threads=%d standalone_tps=%.1f cluster_tps=%.1f tls_tps=%.1f ratio=%.2f tls_ratio=%.2f workload=%s standalone_p95_ms=%.2f cluster_p95_ms=%.2f tls_p95_ms=%.2f",
				threads, a.tps, b.tps, c.tps, ratioOf(b.tps, a.tps), ratioOf(c.tps, a.tps), workload, a.p95ms, b.p95ms, c.p95ms)
			t.Log(line)
			lines = append(lines, line)
		}
	}
	if out := os.Getenv("DOLPHIN_BENCH_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// ratioOf is a/b, 0 when b is 0.
func ratioOf(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// sysbench runs Debian's stock sysbench workload (prepare, run or cleanup) through su's primary
// Service as the application account: 4 tables of 10,000 rows, in network namespace netns
// when set (clientNetns: as a client pod would on the real node). A run lasts runFor with threads threads; its final tps and p95
// latency are returned. Any error fails the test.
func (s *stack) sysbench(su throughputSetup, netns, workload, command string, threads int, runFor time.Duration) sysbenchResult {
	s.t.Helper()
	host, port, err := net.SplitHostPort(s.serviceAddr(su.cluster + "-primary"))
	if err != nil {
		s.t.Fatal(err)
	}
	args := []string{workload, "--db-driver=mysql", "--mysql-host=" + host, "--mysql-port=" + port,
		"--mysql-user=" + sysbenchUser, "--mysql-password=" + sysbenchPassword, "--mysql-db=app",
		"--tables=4", "--table-size=10000"}
	dir := ""
	if su.tls {
		args = append(args, "--mysql-ssl=on")
		dir = s.sysbenchTLSDir(su.cluster)
	}
	if command == "run" {
		args = append(args, "--threads="+strconv.Itoa(threads), "--time="+strconv.Itoa(int(runFor.Seconds())),
			"--percentile=95", sysbenchIgnoredErrors)
	}
	args = append(args, command)
	cmd := exec.Command("sysbench", args...)
	if netns != "" {
		cmd = exec.Command("ip", append([]string{"netns", "exec", netns, "sysbench"}, args...)...)
	}
	cmd.Dir = dir
	var out []byte
	// prepare may meet the account or database a moment before every instance has it.
	testenv.Eventually(s.t, 60*time.Second, fmt.Sprintf("sysbench %s %s on %s", workload, command, su.cluster), func() error {
		out, err = cmd.CombinedOutput()
		if err != nil {
			cmd = exec.Command(cmd.Args[0], cmd.Args[1:]...)
			cmd.Dir = dir
			return fmt.Errorf("%v: %s", err, tail(string(out), 5))
		}
		return nil
	})
	if command != "run" {
		return sysbenchResult{}
	}
	tps, p95 := sysbenchTPS.FindSubmatch(out), sysbenchP95.FindSubmatch(out)
	if tps == nil || p95 == nil {
		s.t.Fatalf("sysbench %s on %s: no final report:\n%s", workload, su.cluster, tail(string(out), 20))
	}
	var r sysbenchResult
	r.tps, _ = strconv.ParseFloat(string(tps[1]), 64)
	r.p95ms, _ = strconv.ParseFloat(string(p95[1]), 64)
	if r.tps <= 0 {
		s.t.Fatalf("sysbench %s on %s committed nothing:\n%s", workload, su.cluster, tail(string(out), 20))
	}
	return r
}

// sysbenchTLSDir is a folder for sysbench to run in over TLS with cluster's servers: sysbench
// 1.0.20 with --mysql-ssl=on always loads cacert.pem, client-cert.pem and client-key.pem from
// its working folder. The CA is the cluster's (its CA Secret); the client certificate is one
// the test issues with that CA (the servers do not require one, but a certificate they cannot
// verify would fail the handshake).
func (s *stack) sysbenchTLSDir(cluster string) string {
	s.t.Helper()
	var ca corev1.Secret
	key := client.ObjectKey{Namespace: s.ns, Name: resources.TLSCASecretName(&dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Name: cluster}})}
	if err := s.c.Get(s.ctx, key, &ca); err != nil {
		s.t.Fatal(err)
	}
	cert, certKey, err := pki.Issue(ca.Data[resources.TLSCAKey], ca.Data[resources.TLSCAPrivKey],
		pki.Leaf{CommonName: sysbenchUser, Validity: time.Hour, Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, time.Now())
	if err != nil {
		s.t.Fatal(err)
	}
	dir := s.t.TempDir()
	for name, data := range map[string][]byte{"cacert.pem": ca.Data[resources.TLSCAKey], "client-cert.pem": cert, "client-key.pem": certKey} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			s.t.Fatal(err)
		}
	}
	return dir
}

// cpuTimes is the machine's CPU time from /proc/stat, in clock ticks.
type cpuTimes struct{ busy, total uint64 }

// machineCPU reads the machine's CPU time: the question for a 2-core machine running a
// primary, two replicas and the client is whether the cluster is short of CPU.
func machineCPU(t *testing.T) cpuTimes {
	t.Helper()
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	var c cpuTimes
	for i, f := range strings.Fields(line)[1:] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			t.Fatalf("/proc/stat: %q: %v", line, err)
		}
		c.total += v
		if i != 3 && i != 4 { // idle, iowait
			c.busy += v
		}
	}
	return c
}

// busyPctSince is the share of the machine's CPU time that was busy since c0.
func (c cpuTimes) busyPctSince(c0 cpuTimes) float64 {
	return 100 * ratioOf(float64(c.busy-c0.busy), float64(c.total-c0.total))
}

// commitCounters are the primary's counters of commits, group commits and semi-sync waits.
type commitCounters map[string]float64

// commitStatus reads the primary's commit counters through the primary Service as the
// application account (nil for the TLS setup, whose sysbench connects over TLS only).
func (s *stack) commitStatus(su throughputSetup) commitCounters {
	s.t.Helper()
	if su.tls {
		return nil
	}
	db := s.sqlDBAs(appUser, appPassword, s.serviceAddr(su.cluster+"-primary"))
	rows, err := db.Query("SHOW GLOBAL STATUS WHERE Variable_name IN ('Binlog_commits', 'Binlog_group_commits', " +
		"'Rpl_semi_sync_master_tx_wait_time', 'Rpl_semi_sync_master_tx_waits', 'Rpl_semi_sync_master_no_tx')")
	if err != nil {
		s.t.Fatalf("commit counters of %s: %v", su.cluster, err)
	}
	defer rows.Close()
	c := commitCounters{}
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			s.t.Fatal(err)
		}
		c[name], _ = strconv.ParseFloat(value, 64)
	}
	if err := rows.Err(); err != nil {
		s.t.Fatal(err)
	}
	return c
}

// since is what the counters say about the run between c0 and c: commits per binary log
// group commit (each group is one fsync of the binary log and, with semi-sync, one wait for
// a replica's acknowledgement), the mean semi-sync wait per waiting commit, and commits that
// did not wait (no_tx: semi-sync off or timed out). Empty without counters.
func (c commitCounters) since(c0 commitCounters) string {
	if c == nil || c0 == nil {
		return ""
	}
	d := func(k string) float64 { return c[k] - c0[k] }
	out := fmt.Sprintf(" commits_per_group=%.1f", ratioOf(d("Binlog_commits"), d("Binlog_group_commits")))
	if waits := d("Rpl_semi_sync_master_tx_waits"); waits > 0 {
		out += fmt.Sprintf(" semisync_wait_ms=%.2f semisync_no_tx=%.0f", d("Rpl_semi_sync_master_tx_wait_time")/waits/1000, d("Rpl_semi_sync_master_no_tx"))
	}
	return out
}
