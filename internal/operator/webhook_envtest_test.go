package operator_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	webhookmanifests "github.com/dolphin-operator/dolphin/config/webhook"
	"github.com/dolphin-operator/dolphin/internal/freeport"
	"github.com/dolphin-operator/dolphin/internal/localcluster"
	"github.com/dolphin-operator/dolphin/internal/operator"
	"github.com/dolphin-operator/dolphin/internal/pki"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// webhookManifest is the ValidatingWebhookConfiguration of config/webhook pointed at a server
// on this host (the test's API server runs here) instead of the Service, as `dolphin local`
// registers it.
func webhookManifest(t *testing.T, port int) *admissionregistrationv1.ValidatingWebhookConfiguration {
	t.Helper()
	cfg, err := localcluster.LocalWebhooks(webhookmanifests.Manifests, port)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// freePort is a port for a server the test starts later, outside the ephemeral range that
// the other tests' client connections take their local ports from (package freeport).
func freePort(t *testing.T) int {
	t.Helper()
	ports, err := freeport.Pick(1)
	if err != nil {
		t.Fatal(err)
	}
	return ports[0]
}

// TestEnvtestOperatorServesWebhooks runs the operator as the binary does with --webhook-port
// and the shipped webhook configuration: it issues its certificate, fills in caBundle, turns
// ready, and the API server rejects a MySQLUser whose Secret holds a weak password through it.
func TestEnvtestOperatorServesWebhooks(t *testing.T) {
	env, c := startEnvtest(t)
	ctx := context.Background()
	runOperatorWithWebhooks(t, env.Config, c, freePort(t))
	var cert corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "dolphin-webhook-cert"}, &cert); err != nil {
		t.Fatalf("the webhook certificate Secret: %v", err)
	}
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "app-pw"},
		StringData: map[string]string{"password": "letmein"}}); err != nil {
		t.Fatal(err)
	}
	err := c.Create(ctx, &dolphinv1.MySQLUser{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "app"},
		Spec: dolphinv1.MySQLUserSpec{Cluster: "shop", PasswordSecretKeyRef: &dolphinv1.SecretKeyReference{Name: "app-pw"}}})
	if err == nil || !strings.Contains(err.Error(), `denied the request: spec.passwordSecretKeyRef: key "password" of Secret "app-pw": the password is too weak`) {
		t.Fatalf("a MySQLUser with a weak password: %v, want denied by the webhook", err)
	}
}

// TestEnvtestOperatorServesWebhooksFromCertDir runs the operator as the chart does with
// webhook.certificates=CertManager: the serving certificate is in files someone else keeps
// (--webhook-cert-dir) and the CA in the configuration was written by them (cert-manager's CA
// injector; the test here). The operator issues nothing, leaves caBundle alone, turns ready and
// serves the webhooks; when the files are replaced by a certificate of another CA (a renewal)
// it serves the new one.
func TestEnvtestOperatorServesWebhooksFromCertDir(t *testing.T) {
	env, c := startEnvtest(t)
	ctx := context.Background()
	dir := t.TempDir()
	ca := writeServingCert(t, dir)
	runOperatorWithWebhooks(t, env.Config, c, freePort(t), func(o *operator.Options, hooks *admissionregistrationv1.ValidatingWebhookConfiguration) {
		o.WebhookCertDir = dir
		for i := range hooks.Webhooks {
			hooks.Webhooks[i].ClientConfig.CABundle = ca
		}
	})
	var hooks admissionregistrationv1.ValidatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: "dolphin-validating-webhooks"}, &hooks); err != nil {
		t.Fatal(err)
	}
	for _, w := range hooks.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, ca) {
			t.Errorf("webhook %s: caBundle changed by the operator, want the injector's", w.Name)
		}
	}
	var secrets corev1.SecretList
	if err := c.List(ctx, &secrets, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		if s.Name == "dolphin-webhook-cert" {
			t.Errorf("the operator issued its own certificate (Secret %s) although told to serve the files in %s", s.Name, dir)
		}
	}
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "app-pw"},
		StringData: map[string]string{"password": "letmein"}}); err != nil {
		t.Fatal(err)
	}
	weakUser := func(name string) error {
		return c.Create(ctx, &dolphinv1.MySQLUser{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: dolphinv1.MySQLUserSpec{Cluster: "shop", PasswordSecretKeyRef: &dolphinv1.SecretKeyReference{Name: "app-pw"}}})
	}
	if err := weakUser("app"); err == nil || !strings.Contains(err.Error(), "the password is too weak") {
		t.Fatalf("a MySQLUser with a weak password: %v, want denied by the webhook", err)
	}

	// A renewal by another CA: the files change, then the injector writes the new CA.
	ca = writeServingCert(t, dir)
	patch := client.MergeFrom(hooks.DeepCopy())
	for i := range hooks.Webhooks {
		hooks.Webhooks[i].ClientConfig.CABundle = ca
	}
	if err := c.Patch(ctx, &hooks, patch); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the renewed certificate served", func() error {
		err := weakUser("app2")
		if err == nil || !strings.Contains(err.Error(), "the password is too weak") {
			return fmt.Errorf("a MySQLUser with a weak password: %v, want denied by the webhook", err)
		}
		return nil
	})
}

// writeServingCert writes tls.crt and tls.key for 127.0.0.1, signed by a new CA, into dir (as
// cert-manager's Secret volume holds them), and returns the CA.
func writeServingCert(t *testing.T, dir string) []byte {
	t.Helper()
	now := time.Now()
	ca, caKey, err := pki.NewCA("test-injector-ca", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := pki.Issue(ca, caKey, pki.Leaf{CommonName: "127.0.0.1", IPs: []net.IP{net.ParseIP("127.0.0.1")}, Validity: time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	// Written beside and renamed, as the kubelet swaps a Secret volume's files.
	for name, b := range map[string][]byte{"tls.key": key, "tls.crt": cert} {
		tmp := filepath.Join(dir, "."+name)
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return ca
}
