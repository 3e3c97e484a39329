package instancemetrics

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/dbsql"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// Environment of TestBenchInstanceMetrics.
const (
	// benchScrapesEnv is how many scrapes each side gets; the benchmark is skipped when unset.
	benchScrapesEnv = "DOLPHIN_BENCH_METRICS_SCRAPES"
	// exporterEnv is the mysqld_exporter binary (hack/mysqld-exporter.sh).
	exporterEnv = "DOLPHIN_MYSQLD_EXPORTER"
	// benchMonitorPassword is the monitor account's password in the bench (startExporter).
	benchMonitorPassword = `bench'mon"itor-pw@x:/y\z`
)

// TestBenchInstanceMetrics measures what serving a replica's own metrics costs per instance,
// both ways the issue allows, on one real replica in the same run (`make
// bench-instance-metrics`):
//   - Dolphin's agent (the real `dolphin agent` process, built here), whose GET /metrics runs
//     mysqld_exporter's default collectors in-process: its cost is the memory the agent gains
//     by serving scrapes and the CPU per scrape;
//   - a mysqld_exporter sidecar (the same version, built from its module by
//     hack/mysqld-exporter.sh), default flags: its cost is its whole process.
//
// Both log in as Dolphin's monitor account over the socket. The scrapes alternate, so noise
// falls on both. It fails when a scrape fails, when either reports mysql_up 0, or when the
// two do not return the same mysql_* series (names and labels). The figures and the summary
// line `instance-metrics scrapes=… series=… agent_rss_added_mb=… exporter_rss_mb=…
// agent_cpu_ms_per_scrape=… exporter_cpu_ms_per_scrape=… same_series=true` go to the test log
// and to DOLPHIN_BENCH_OUT when set.
func TestBenchInstanceMetrics(t *testing.T) {
	v := os.Getenv(benchScrapesEnv)
	if v == "" {
		t.Skipf("set %s (make bench-instance-metrics)", benchScrapesEnv)
	}
	scrapes, err := strconv.Atoi(v)
	if err != nil || scrapes < 10 {
		t.Fatalf("%s=%q: want at least 10 scrapes", benchScrapesEnv, v)
	}
	exporterBin := os.Getenv(exporterEnv)
	if exporterBin == "" {
		t.Fatalf("%s must name mysqld_exporter (hack/mysqld-exporter.sh builds it)", exporterEnv)
	}
	dbtest.RequireMariaDB(t)
	rep := testenv.NewBenchReport(t)
	ctx := t.Context()
	dolphinBin := buildDolphin(t)

	c := dbtest.Start(t, dbtest.Options{Instances: 2})
	replica := startReplica(ctx, t, c, benchMonitorPassword)
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "monitor-password")
	writeFile(t, pwFile, benchMonitorPassword)

	ag := startBenchAgent(t, dolphinBin, dir, replica, pwFile)
	ex := startExporter(t, exporterBin, dir, replica)
	agentIdleKB, exporterIdleKB := testenv.MustProcStatusKB(t, ag.pid, "VmRSS"), testenv.MustProcStatusKB(t, ex.pid, "VmRSS")
	agentCPU0, exporterCPU0 := testenv.MustProcCPU(t, ag.pid), testenv.MustProcCPU(t, ex.pid)

	var agentTook, exporterTook []time.Duration
	var agentLast, exporterLast scrapeResult
	for i := 0; i < scrapes; i++ {
		agentLast = ag.scrape(t)
		exporterLast = ex.scrape(t)
		agentTook, exporterTook = append(agentTook, agentLast.took), append(exporterTook, exporterLast.took)
	}
	agentCPU, exporterCPU := testenv.MustProcCPU(t, ag.pid)-agentCPU0, testenv.MustProcCPU(t, ex.pid)-exporterCPU0
	agentKB, exporterKB := testenv.MustProcStatusKB(t, ag.pid, "VmRSS"), testenv.MustProcStatusKB(t, ex.pid, "VmRSS")
	agentHWM, exporterHWM := testenv.MustProcStatusKB(t, ag.pid, "VmHWM"), testenv.MustProcStatusKB(t, ex.pid, "VmHWM")

	for name, r := range map[string]scrapeResult{"agent": agentLast, "mysqld_exporter": exporterLast} {
		if up := value(r.families, "mysql_up", nil); up != 1 {
			t.Fatalf("%s: mysql_up = %v", name, up)
		}
	}
	agentSeries, exporterSeries := mysqlSeries(agentLast.families), mysqlSeries(exporterLast.families)
	onlyAgent, onlyExporter := difference(agentSeries, exporterSeries), difference(exporterSeries, agentSeries)
	perScrape := func(cpu time.Duration) float64 { return float64(cpu.Microseconds()) / 1000 / float64(scrapes) }
	mb := func(kb int64) float64 { return float64(kb) / 1024 }

	rep.Add("server: MariaDB replica %s, monitor account over the socket, %d scrapes each, alternating", replica.Name, scrapes)
	rep.Add("agent (dolphin agent, collectors in-process): idle_rss_mb=%.1f after_rss_mb=%.1f vmhwm_mb=%.1f cpu_ms_per_scrape=%.2f scrape_p50_ms=%.1f bytes=%d mysql_series=%d",
		mb(agentIdleKB), mb(agentKB), mb(agentHWM), perScrape(agentCPU), p50ms(agentTook), agentLast.bytes, len(agentSeries))
	rep.Add("mysqld_exporter sidecar (default flags): idle_rss_mb=%.1f after_rss_mb=%.1f vmhwm_mb=%.1f cpu_ms_per_scrape=%.2f scrape_p50_ms=%.1f bytes=%d mysql_series=%d all_series=%d",
		mb(exporterIdleKB), mb(exporterKB), mb(exporterHWM), perScrape(exporterCPU), p50ms(exporterTook), exporterLast.bytes,
		len(exporterSeries), exporterLast.series)
	rep.Add("series only the agent returns: %d %v; only mysqld_exporter: %d %v (its go_*, process_* and promhttp_* series about itself excluded)",
		len(onlyAgent), firstN(onlyAgent, 5), len(onlyExporter), firstN(onlyExporter, 5))
	same := len(onlyAgent) == 0 && len(onlyExporter) == 0
	if !same {
		t.Errorf("the agent and mysqld_exporter return different mysql_* series: %d only in the agent's, %d only in the exporter's",
			len(onlyAgent), len(onlyExporter))
	}
	rep.Summary = fmt.Sprintf("instance-metrics scrapes=%d series=%d agent_rss_added_mb=%.1f exporter_rss_mb=%.1f agent_cpu_ms_per_scrape=%.2f exporter_cpu_ms_per_scrape=%.2f same_series=%t",
		scrapes, len(agentSeries), mb(agentKB-agentIdleKB), mb(exporterKB), perScrape(agentCPU), perScrape(exporterCPU), same)
}

// startReplica creates Dolphin's accounts (the monitor account with monitorPassword) on both servers and makes the second a replica of
// the first; it returns the replica once its threads run.
func startReplica(ctx context.Context, t *testing.T, c *dbtest.Cluster, monitorPassword string) *dbtest.Instance {
	t.Helper()
	accounts := dbsql.Accounts{
		Operator:    dbsql.Account{User: "dolphin", Password: "op-pw"},
		Replication: dbsql.Account{User: "dolphin-repl", Password: "repl-pw"},
		Monitor:     dbsql.Account{User: "dolphin-monitor", Password: monitorPassword},
	}
	var replica dbsql.Instance
	for i, s := range c.Instances {
		root, err := dbsql.Open(dbsql.Config{Flavor: dbsql.FlavorMariaDB, Addr: s.Addr(), User: "root"})
		if err != nil {
			t.Fatal(err)
		}
		if err := root.EnsureAccounts(ctx, accounts); err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		_ = root.Close()
		if i == 1 {
			if replica, err = dbsql.Open(dbsql.Config{Flavor: dbsql.FlavorMariaDB, Addr: s.Addr(), User: "dolphin", Password: "op-pw"}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = replica.Close() })
		}
	}
	src := dbsql.Source{Host: c.Instances[0].Host, Port: c.Instances[0].Port, User: "dolphin-repl", Password: "repl-pw"}
	if err := replica.ConfigureReplication(ctx, src); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the replica's threads to run", func() error {
		st, err := replica.Status(ctx)
		if err != nil {
			return err
		}
		if st.Replica == nil || !st.Replica.IORunning || !st.Replica.SQLRunning {
			return fmt.Errorf("replica status %+v", st.Replica)
		}
		return nil
	})
	return c.Instances[1]
}

// target is a process serving metrics and how to scrape it.
type target struct {
	pid    int
	url    string
	client *http.Client
	token  string
}

type scrapeResult struct {
	families      map[string]*dto.MetricFamily
	took          time.Duration
	bytes, series int
}

func (tg *target) scrape(t *testing.T) scrapeResult {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, tg.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", "10")
	req.Header.Set("Accept", "text/plain")
	if tg.token != "" {
		req.Header.Set("Authorization", "Bearer "+tg.token)
	}
	began := time.Now()
	resp, err := tg.client.Do(req)
	if err != nil {
		t.Fatalf("scraping %s: %v", tg.url, err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	took := time.Since(began)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scraping %s: %d %v: %.200s", tg.url, resp.StatusCode, err, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parsing the scrape of %s: %v", tg.url, err)
	}
	n := 0
	for _, mf := range families {
		n += len(mf.GetMetric())
	}
	return scrapeResult{families: families, took: took, bytes: len(body), series: n}
}

// startBenchAgent runs `dolphin agent` on the replica's socket with a metrics token and the
// monitor password, and waits until it answers (before any scrape).
func startBenchAgent(t *testing.T, bin, dir string, replica *dbtest.Instance, pwFile string) *target {
	t.Helper()
	caPEM, certPEM, keyPEM, err := agent.NewAgentPKI("bench", "bench", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"tls.crt": string(certPEM), "tls.key": string(keyPEM), "token": "api-token", "metrics-token": "scraper-token"} {
		writeFile(t, filepath.Join(dir, name), data)
	}
	addr := testenv.FreeAddr(t)
	cmd := exec.Command(bin, "agent", "--listen", addr,
		"--token-file", filepath.Join(dir, "token"), "--tls-cert", filepath.Join(dir, "tls.crt"), "--tls-key", filepath.Join(dir, "tls.key"),
		"--flavor", "mariadb", "--datadir", replica.DataDir, "--socket", replica.SocketPath(),
		"--metrics-token-file", filepath.Join(dir, "metrics-token"), "--monitor-password-file", pwFile)
	startProcess(t, cmd, filepath.Join(dir, "agent.log"))
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: agent.AgentServerName("bench", "bench"), MinVersion: tls.VersionTLS13}}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 15 * time.Second}
	waitHTTP(t, client, "https://"+addr+"/healthz")
	return &target{pid: cmd.Process.Pid, url: "https://" + addr + "/metrics", client: client, token: "scraper-token"}
}

// startExporter runs mysqld_exporter with default collectors on the replica's socket as the
// monitor account, and waits until it answers (before any scrape).
func startExporter(t *testing.T, bin, dir string, replica *dbtest.Instance) *target {
	t.Helper()
	cnf := filepath.Join(dir, "exporter.cnf")
	// The password comes from the environment, as the exporter's docs advise. It holds a
	// "?", which mysqld_exporter v0.16.0 cannot log in with (collector.New then appends its
	// session settings to the password instead of the DSN's parameters); the agent can
	// (TestAgentMetricsFromARealServer), so the bench's account has a password both take.
	writeFile(t, cnf, "[client]\nuser=dolphin-monitor\nsocket="+replica.SocketPath()+"\n")
	addr := testenv.FreeAddr(t)
	cmd := exec.Command(bin, "--config.my-cnf="+cnf, "--web.listen-address="+addr, "--log.level=warn")
	cmd.Env = append(os.Environ(), "MYSQLD_EXPORTER_PASSWORD="+benchMonitorPassword)
	startProcess(t, cmd, filepath.Join(dir, "exporter.log"))
	client := &http.Client{Timeout: 15 * time.Second}
	waitHTTP(t, client, "http://"+addr+"/")
	return &target{pid: cmd.Process.Pid, url: "http://" + addr + "/metrics", client: client}
}

// startProcess starts cmd with its output in logFile, and kills it when the test ends
// (printing the log's end when the test failed).
func startProcess(t *testing.T, cmd *exec.Cmd, logFile string) {
	t.Helper()
	f, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", cmd.Path, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = f.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("%s log (end):\n%s", filepath.Base(cmd.Path), tailLines(string(b), 20))
		}
	})
}

func waitHTTP(t *testing.T, client *http.Client, url string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, url+" to answer", func() error {
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		return nil
	})
}

// buildDolphin builds ./cmd/dolphin into the test's folder.
func buildDolphin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "dolphin")
	out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "github.com/dolphin-operator/dolphin/cmd/dolphin").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./cmd/dolphin: %v: %s", err, tailLines(string(out), 5))
	}
	return bin
}

// mysqlSeries are the identities (name and labels) of the mysql_* samples.
func mysqlSeries(families map[string]*dto.MetricFamily) []string {
	var out []string
	for name, mf := range families {
		if !strings.HasPrefix(name, "mysql_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, lp.GetName()+"="+strconv.Quote(lp.GetValue()))
			}
			sort.Strings(labels)
			out = append(out, name+"{"+strings.Join(labels, ",")+"}")
		}
	}
	sort.Strings(out)
	return out
}

// difference is what of a (sorted) is not in b (sorted).
func difference(a, b []string) []string {
	var out []string
	for _, s := range a {
		if _, found := slices.BinarySearch(b, s); !found {
			out = append(out, s)
		}
	}
	return out
}

func firstN(s []string, n int) []string { return s[:min(n, len(s))] }

func p50ms(d []time.Duration) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[len(s)/2].Microseconds()) / 1000
}

var lineEnd = regexp.MustCompile(`\n+$`)

func tailLines(s string, n int) string {
	lines := strings.Split(lineEnd.ReplaceAllString(s, ""), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
