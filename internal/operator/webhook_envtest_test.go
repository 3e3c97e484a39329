package operator_test

import (
	"context"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	webhookmanifests "github.com/dolphin-operator/dolphin/config/webhook"
	"github.com/dolphin-operator/dolphin/internal/freeport"
	"github.com/dolphin-operator/dolphin/internal/localcluster"
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
