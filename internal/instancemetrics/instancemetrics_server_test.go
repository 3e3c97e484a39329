package instancemetrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/dolphin-operator/dolphin/internal/dashboard"
	"github.com/dolphin-operator/dolphin/internal/dbsql/dbtest"
)

// monitorPassword holds every character the DSN format and SQL quoting treat specially.
const monitorPassword = `m0n'it"or?pw@x:/y\z`

// TestAgentMetricsFromARealServer scrapes a real replica as Dolphin's monitor account over
// the socket: mysqld_exporter's default collectors all succeed with the account's
// privileges, the replica's replication threads are reported, a wrong password is mysql_up 0
// (not an HTTP error), and a rotated password file is read at the next scrape.
func TestAgentMetricsFromARealServer(t *testing.T) {
	c := dbtest.Start(t, dbtest.Options{Instances: 2})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	replica := startReplica(ctx, t, c, monitorPassword)

	pwFile := filepath.Join(t.TempDir(), "monitor-password")
	writeFile(t, pwFile, monitorPassword)
	h, err := Handler(Options{Socket: replica.SocketPath(), User: "dolphin-monitor",
		PasswordFile: pwFile, Logger: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}

	var families map[string]*dto.MetricFamily
	deadline := time.Now().Add(30 * time.Second)
	for {
		families = scrape(t, h)
		if value(families, "mysql_slave_status_slave_io_running", nil) == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := value(families, "mysql_up", nil); got != 1 {
		t.Fatalf("mysql_up = %v, want 1", got)
	}
	for _, name := range []string{"global_status", "global_variables", "slave_status", "info_schema.innodb_cmp",
		"info_schema.innodb_cmpmem", "info_schema.query_response_time"} {
		if got := value(families, "mysql_exporter_collector_success", map[string]string{"collector": "collect." + name}); got != 1 {
			t.Errorf("collector %s succeeded = %v, want 1 (the monitor account lacks a privilege?)", name, got)
		}
	}
	for name, want := range map[string]float64{
		"mysql_slave_status_slave_io_running":  1,
		"mysql_slave_status_slave_sql_running": 1,
		"mysql_global_variables_read_only":     1,
		"mysql_global_variables_server_id":     float64(replica.ServerID()),
	} {
		if got := value(families, name, nil); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if got := value(families, "mysql_global_status_queries", nil); got <= 0 {
		t.Errorf("mysql_global_status_queries = %v, want > 0 (the scrapes' own queries count)", got)
	}
	if got := value(families, "mysql_global_status_commands_total", map[string]string{"command": "select"}); got < 0 {
		t.Errorf("mysql_global_status_commands_total{command=select} missing")
	}
	// Every instance metric the dashboard queries is in a real scrape.
	d, err := dashboard.Build()
	if err != nil {
		t.Fatal(err)
	}
	instanceMetrics := 0
	for _, m := range dashboard.Metrics(d) {
		if dashboard.IsOperatorMetric(m) {
			continue
		}
		instanceMetrics++
		if families[m] == nil {
			t.Errorf("the dashboard queries %s, which a scrape of the agent does not return", m)
		}
	}
	if instanceMetrics < 5 {
		t.Errorf("the dashboard queries %d instance metrics, want its Instances row's", instanceMetrics)
	}
	if n := len(families); n < 100 {
		t.Errorf("%d metric families, want mysqld_exporter's hundreds", n)
	}

	writeFile(t, pwFile, "wrong")
	if got := value(scrape(t, h), "mysql_up", nil); got != 0 {
		t.Errorf("with a wrong password mysql_up = %v, want 0", got)
	}
	writeFile(t, pwFile, monitorPassword)
	if got := value(scrape(t, h), "mysql_up", nil); got != 1 {
		t.Errorf("with the password restored mysql_up = %v, want 1", got)
	}
	if err := os.Remove(pwFile); err != nil {
		t.Fatal(err)
	}
	if got := value(scrape(t, h), "mysql_up", nil); got != 0 {
		t.Errorf("without a password file mysql_up = %v, want 0", got)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// scrape runs one scrape through h and parses the exposition.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", "10")
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape answered %d: %s", rec.Code, rec.Body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(rec.Body.String()))
	if err != nil {
		t.Fatalf("parsing the scrape: %v", err)
	}
	return families
}

// value is the sample of the named metric whose labels include labels, or -1 when absent.
func value(families map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	mf := families[name]
	if mf == nil {
		return -1
	}
next:
	for _, m := range mf.GetMetric() {
		got := map[string]string{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		for k, v := range labels {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Untyped != nil:
			return m.GetUntyped().GetValue()
		}
	}
	return -1
}
