package dashboard

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dolphin-operator/dolphin/internal/metrics"
)

// Exported returns the names of the series Dolphin's metrics can have (a histogram's
// _bucket, _sum and _count), from their descriptors: also the ones no event created yet.
func exported(t *testing.T) []string {
	t.Helper()
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	var out []string
	for _, c := range metrics.Collectors() {
		ch := make(chan *prometheus.Desc, 10)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := fq.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("no name in %s", d)
			}
			out = append(out, m[1])
			if _, ok := c.(*prometheus.HistogramVec); ok {
				out = append(out, m[1]+"_bucket", m[1]+"_sum", m[1]+"_count")
			}
		}
	}
	return out
}

// Every operator metric the dashboard queries is one the operator exports, and it uses most
// of them. (The instances' metrics are checked against a real server's scrape in
// internal/instancemetrics, and both against live scrapes in the e2e.)
func TestDashboardQueriesOnlyDolphinMetrics(t *testing.T) {
	d, err := Build()
	if err != nil {
		t.Fatal(err)
	}
	have := exported(t)
	used := Metrics(d)
	for _, m := range used {
		if IsOperatorMetric(m) && !slices.Contains(have, m) {
			t.Errorf("the dashboard queries %s, which the operator does not export", m)
		}
		if !IsOperatorMetric(m) && slices.Contains(have, m) {
			t.Errorf("the dashboard takes %s, which the operator exports, for an instance's metric", m)
		}
	}
	if len(used) < 15 {
		t.Errorf("the dashboard uses %d metrics: %v", len(used), used)
	}
}

// The JSON is a dashboard Grafana's own types read back, every panel on the datasource
// variable, titled and described.
func TestDashboardJSONReadsBack(t *testing.T) {
	b, err := JSON()
	if err != nil {
		t.Fatal(err)
	}
	plugins.RegisterDefaultPlugins()
	var d dashboard.Dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("the dashboard JSON does not read back: %v", err)
	}
	if d.Uid == nil || *d.Uid != UID || len(d.Panels) < 20 {
		t.Fatalf("uid %v, %d panels", d.Uid, len(d.Panels))
	}
	for _, p := range d.Panels {
		if p.RowPanel != nil {
			continue
		}
		if p.Panel == nil || p.Panel.Title == nil || *p.Panel.Title == "" || p.Panel.Description == nil || len(p.Panel.Targets) == 0 ||
			p.Panel.Datasource == nil || p.Panel.Datasource.Uid == nil || *p.Panel.Datasource.Uid != "${datasource}" {
			t.Errorf("panel %+v: needs a title, a description, queries and the datasource variable", p.Panel)
		}
	}
	if got := Metrics(d); !slices.Equal(got, func() []string { d0, _ := Build(); return Metrics(d0) }()) {
		t.Errorf("the JSON's queries differ from the built dashboard's: %v", got)
	}
	if strings.Contains(string(b), `"expr": ""`) {
		t.Error("a query without expression")
	}
}
