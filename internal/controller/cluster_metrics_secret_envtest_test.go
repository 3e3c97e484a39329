package controller

import (
	"bytes"
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// TestEnvtestMetricsSecretFollowsTheAgentSecret: the agent Secret carries the metrics token
// and the monitor account's password (following the credentials Secret), and the metrics
// Secret a scraper is given holds exactly the token and the CA — through a password change,
// a certificate renewal (the token is kept), an agent Secret written before these keys
// existed, and a hand-edited metrics Secret.
func TestEnvtestMetricsSecretFollowsTheAgentSecret(t *testing.T) {
	needEnvtest(t)
	c := directClient(t, nil)
	ctx := context.Background()
	key := createCluster(t, c, newNamespace(t), "scraped", dolphinv1.MySQLClusterSpec{})
	cl := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}
	get := func(name string) *corev1.Secret {
		t.Helper()
		var s corev1.Secret
		if err := c.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: name}, &s); err != nil {
			t.Fatal(err)
		}
		return &s
	}
	update := func(s *corev1.Secret) {
		t.Helper()
		if err := c.Update(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	reconcile := func() {
		t.Helper()
		if err := reconcileOnce(t, c, key); err != nil {
			t.Fatal(err)
		}
	}
	agentName, metricsName, credsName := resources.AgentSecretName(cl), resources.MetricsSecretName(cl), resources.CredentialsSecretName(cl)
	check := func(when string) (token []byte) {
		t.Helper()
		agentSecret, metrics, creds := get(agentName), get(metricsName), get(credsName)
		token = agentSecret.Data[resources.AgentMetricsTokenKey]
		if len(token) < 32 {
			t.Errorf("%s: the agent Secret's metrics token is %q", when, token)
		}
		if !bytes.Equal(agentSecret.Data[resources.MonitorPasswordKey], creds.Data[resources.MonitorPasswordKey]) {
			t.Errorf("%s: the agent Secret's monitor password is not the credentials Secret's", when)
		}
		if len(metrics.Data) != 2 {
			t.Errorf("%s: the metrics Secret holds keys %v, want only token and ca.crt", when, keysOf(metrics.Data))
		}
		if !bytes.Equal(metrics.Data[resources.MetricsTokenKey], token) {
			t.Errorf("%s: the metrics Secret's token is not the agent Secret's", when)
		}
		if !bytes.HasPrefix(metrics.Data[resources.MetricsCAKey], agentSecret.Data[resources.AgentCAKey]) {
			t.Errorf("%s: the metrics Secret's CA bundle does not start with the agents' CA", when)
		}
		return token
	}

	reconcile()
	token := check("created")

	creds := get(credsName)
	creds.Data[resources.MonitorPasswordKey] = []byte("rotated-monitor-password-1")
	update(creds)
	reconcile()
	if got := check("monitor password changed"); !bytes.Equal(got, token) {
		t.Error("the metrics token changed with the monitor password")
	}

	agentSecret := get(agentName)
	oldCA := agentSecret.Data[resources.AgentCAKey]
	agentSecret.Data[resources.AgentCertKey] = []byte("not PEM")
	update(agentSecret)
	reconcile()
	if got := check("certificate renewed"); !bytes.Equal(got, token) {
		t.Error("the metrics token changed with the certificate renewal: every scraper would fail until it reads the new one")
	}
	if bytes.Equal(get(agentName).Data[resources.AgentCAKey], oldCA) {
		t.Error("the renewal kept the CA; this test meant to follow a new one")
	}
	if !bytes.Contains(get(metricsName).Data[resources.MetricsCAKey], bytes.TrimSpace(oldCA)) {
		t.Error("the metrics Secret dropped the old CA at the renewal: scrapers would refuse the agents until they serve the new certificate")
	}

	agentSecret = get(agentName)
	delete(agentSecret.Data, resources.AgentMetricsTokenKey)
	delete(agentSecret.Data, resources.MonitorPasswordKey)
	apiToken := agentSecret.Data[resources.AgentTokenKey]
	update(agentSecret)
	reconcile()
	token = check("agent Secret of an older operator")
	if !bytes.Equal(get(agentName).Data[resources.AgentTokenKey], apiToken) {
		t.Error("adding the metrics keys replaced the agents' API token")
	}

	metrics := get(metricsName)
	metrics.Data[resources.MetricsTokenKey] = []byte("edited")
	metrics.Data["extra"] = []byte("x")
	update(metrics)
	reconcile()
	if got := check("metrics Secret edited by hand"); !bytes.Equal(got, token) {
		t.Error("restoring the metrics Secret changed the token")
	}
}

func keysOf(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A Secret named <cluster>-metrics that is not the cluster's is left alone, and the reconcile
// goes on: metrics never hold a cluster up.
func TestEnvtestMetricsSecretNotOwnedIsLeftAlone(t *testing.T) {
	needEnvtest(t)
	c := directClient(t, nil)
	ctx := context.Background()
	ns := newNamespace(t)
	theirs := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken-metrics"}, Data: map[string][]byte{"mine": []byte("x")}}
	if err := c.Create(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	key := createCluster(t, c, ns, "taken", dolphinv1.MySQLClusterSpec{})
	for range 2 {
		if err := reconcileOnce(t, c, key); err != nil {
			t.Fatalf("reconcile with a foreign %s: %v", theirs.Name, err)
		}
	}
	var got corev1.Secret
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: theirs.Name}, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Data) != 1 || string(got.Data["mine"]) != "x" || metav1.GetControllerOf(&got) != nil {
		t.Errorf("the user's Secret was changed: %v, owner %v", keysOf(got.Data), metav1.GetControllerOf(&got))
	}
}
