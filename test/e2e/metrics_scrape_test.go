package e2e

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/dashboard"
)

// scrapeOperator scrapes the operator leader's secure metrics endpoint as Prometheus does with
// the chart's monitors: with the token of a ServiceAccount bound to the metrics reader role
// (config/rbac/metrics_reader_role.yaml), at the pod's address. It returns the exposition text.
func (s *stack) scrapeOperator() string {
	s.t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNS, Name: "e2e-scraper"}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-scraper"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "dolphin-metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: operatorNS, Name: sa.Name}}}
	for _, o := range []client.Object{sa, binding} {
		if err := s.c.Create(s.ctx, o); err != nil {
			s.t.Fatal(err)
		}
	}
	cs := kubernetes.NewForConfigOrDie(s.cfg)
	tok, err := cs.CoreV1().ServiceAccounts(operatorNS).CreateToken(s.ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	var pod corev1.Pod
	if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: operatorNS, Name: s.operatorLeader()}, &pod); err != nil {
		s.t.Fatal(err)
	}
	// The operator's serving certificate is its own, self-signed: trusted as the chart's
	// monitors do (insecureSkipVerify); what is checked is the token's authorization.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // as the monitors scrape
	get := func(token string) (int, string) {
		return s.scrapeWith(hc, fmt.Sprintf("https://%s:8443/metrics", pod.Status.PodIP), token)
	}
	if code, _ := get(""); code != http.StatusUnauthorized && code != http.StatusForbidden {
		s.t.Errorf("a scrape without a token: HTTP %d, want refused", code)
	}
	code, body := get(tok.Status.Token)
	if code != http.StatusOK {
		s.t.Fatalf("a scrape with the metrics reader's token: HTTP %d: %.300s", code, body)
	}
	return body
}

// scrapeWith GETs url through hc with the bearer token (none when empty) and returns the
// status and body, whatever the status.
func (s *stack) scrapeWith(hc *http.Client, url, token string) (int, string) {
	s.t.Helper()
	req, _ := http.NewRequestWithContext(s.ctx, http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		s.t.Fatalf("scraping %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// seriesOf returns the exposition's series of metric whose labels include every want.
func seriesOf(exposition, metric string, want ...string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(exposition))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric+"{") && !strings.HasPrefix(line, metric+" ") {
			continue
		}
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(line, w)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}

// dashboardMetricsMissing lists the dashboard's metrics without a series in the operator's
// exposition or, for an instance's metrics, in instance's, but for those only an event
// creates (named in notYet).
func dashboardMetricsMissing(operator, instance string, notYet []string) ([]string, error) {
	d, err := dashboard.Build()
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, m := range dashboard.Metrics(d) {
		if slices.Contains(notYet, m) {
			continue
		}
		exposition := instance
		if dashboard.IsOperatorMetric(m) {
			exposition = operator
		}
		if len(seriesOf(exposition, m)) == 0 {
			missing = append(missing, m)
		}
	}
	return missing, nil
}

// scrapeInstances scrapes every pod's agent of cluster as the dolphin-cluster chart's
// PodMonitor does: with the token and CA of the Secret <cluster>-metrics only, verifying the
// agent's server name, at the pod's address. It checks that the Secret holds nothing else
// and that a scrape without the token is refused, and returns each pod's exposition.
func (s *stack) scrapeInstances(cluster string) map[string]string {
	s.t.Helper()
	var secret corev1.Secret
	if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: cluster + "-metrics"}, &secret); err != nil {
		s.t.Fatalf("the metrics Secret: %v", err)
	}
	if len(secret.Data) != 2 || len(secret.Data["token"]) == 0 || len(secret.Data["ca.crt"]) == 0 {
		s.t.Fatalf("the metrics Secret holds keys %v, want token and ca.crt only", slices.Sorted(maps.Keys(secret.Data)))
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(secret.Data["ca.crt"]) {
		s.t.Fatal("the metrics Secret's ca.crt holds no certificate")
	}
	hc := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: roots, ServerName: agent.AgentServerName(cluster, s.ns), MinVersion: tls.VersionTLS12}}}
	defer hc.CloseIdleConnections()
	out := map[string]string{}
	for _, pod := range s.clusterPods(cluster) {
		get := func(token string) (int, string) {
			return s.scrapeWith(hc, fmt.Sprintf("https://%s:9443/metrics", pod.Status.PodIP), token)
		}
		if code, _ := get(""); code != http.StatusUnauthorized {
			s.t.Errorf("%s: a scrape without the token: HTTP %d, want 401", pod.Name, code)
		}
		code, body := get(string(secret.Data["token"]))
		if code != http.StatusOK {
			s.t.Fatalf("%s: a scrape with the metrics token: HTTP %d: %.300s", pod.Name, code, body)
		}
		out[pod.Name] = body
	}
	return out
}
