package controller

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/pki"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// conditionWithReason returns the cluster's condition with that reason, or nil.
func conditionWithReason(c *dolphinv1.MySQLCluster, reason string) *metav1.Condition {
	for i := range c.Status.Conditions {
		if c.Status.Conditions[i].Reason == reason {
			return &c.Status.Conditions[i]
		}
	}
	return nil
}

// TestEnvtestTLSCertificates: with spec.tls.enabled Dolphin creates the cluster's CA and a
// certificate it signs for every pod and Service name (and localhost), mounts it, records it
// in status.tls, and leaves it alone on the next reconcile; a user-supplied certificate that
// is missing, lacks the names or expired is reported with what to change.
func TestEnvtestTLSCertificates(t *testing.T) {
	needEnvtest(t)
	c := directClient(t, nil)
	ctx := context.Background()
	ns := newNamespace(t)
	key := createCluster(t, c, ns, "sec", dolphinv1.MySQLClusterSpec{TLS: dolphinv1.TLSSpec{Enabled: true}})
	for range 2 {
		_ = reconcileOnce(t, c, key)
	}
	var caS, certS corev1.Secret
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "sec-ca"}, &caS); err != nil {
		t.Fatalf("CA Secret: %v", err)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "sec-tls"}, &certS); err != nil {
		t.Fatalf("TLS Secret: %v", err)
	}
	if _, ok := certS.Data[resources.TLSCAPrivKey]; ok {
		t.Error("the CA's private key is in the Secret mounted into the pods")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caS.Data[resources.TLSCAKey]) {
		t.Fatal("no CA certificate")
	}
	cert, err := pki.ParseCert(certS.Data[resources.TLSCertKey])
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sec-primary." + ns + ".svc", "sec-replicas", "sec-2.sec-instances." + ns + ".svc", "localhost", "127.0.0.1"} {
		// Verify checks an address against the certificate's IP addresses.
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: name}); err != nil {
			t.Errorf("certificate for %s: %v", name, err)
		}
	}
	var sts appsv1.StatefulSet
	if err := c.Get(ctx, key, &sts); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, v := range sts.Spec.Template.Spec.Volumes {
		found = found || (v.Secret != nil && v.Secret.SecretName == "sec-tls")
	}
	if !found {
		t.Error("the StatefulSet does not mount sec-tls")
	}
	cl := getCluster(t, c, key)
	if cl.Status.TLS == nil || cl.Status.TLS.Secret != "sec-tls" || cl.Status.TLS.NotAfter == nil ||
		!cl.Status.TLS.NotAfter.Time.Equal(cert.NotAfter.Truncate(time.Second)) {
		t.Errorf("status.tls %+v, want sec-tls until %s", cl.Status.TLS, cert.NotAfter)
	}
	// Nothing is reissued when nothing is due.
	rv := certS.ResourceVersion
	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "sec-tls"}, &certS); err != nil || certS.ResourceVersion != rv {
		t.Errorf("the certificate was rewritten without a reason (%v)", err)
	}

	// The user's own certificate: missing, then for other names, then expired.
	caPEM, caKey, err := pki.NewCA("users-ca", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	userKey := createCluster(t, c, ns, "own", dolphinv1.MySQLClusterSpec{TLS: dolphinv1.TLSSpec{Enabled: true, CertificateSecret: "own-cert"}})
	expect := func(reason, text string) {
		t.Helper()
		_ = reconcileOnce(t, c, userKey)
		_ = reconcileOnce(t, c, userKey)
		cond := conditionWithReason(getCluster(t, c, userKey), reason)
		if cond == nil || !strings.Contains(cond.Message, text) {
			t.Errorf("condition %s: %+v, want a message with %q", reason, cond, text)
		}
	}
	expect("TLSCertificateNotFound", `Secret "own-cert" named in spec.tls.certificateSecret does not exist`)
	put := func(leaf pki.Leaf, now time.Time) {
		t.Helper()
		certPEM, keyPEM, err := pki.Issue(caPEM, caKey, leaf, now)
		if err != nil {
			t.Fatal(err)
		}
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "own-cert"}}
		_ = c.Delete(ctx, s)
		s.Data = map[string][]byte{resources.TLSCertKey: certPEM, resources.TLSKeyKey: keyPEM, resources.TLSCAKey: caPEM}
		if err := c.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	put(pki.Leaf{CommonName: "elsewhere", DNSNames: []string{"elsewhere.example"}, Validity: time.Hour}, time.Now())
	expect("TLSCertificateInvalid", "does not verify for own-primary."+ns+".svc")
	put(pki.Leaf{CommonName: "own", DNSNames: []string{"*.own-instances." + ns + ".svc", "own-primary." + ns + ".svc"}, Validity: time.Minute},
		time.Now().Add(-30*time.Minute))
	expect("TLSCertificateInvalid", "expired on")
	put(pki.Leaf{CommonName: "own", DNSNames: []string{"*.own-instances." + ns + ".svc", "own-primary." + ns + ".svc"}, Validity: time.Hour}, time.Now())
	_ = reconcileOnce(t, c, userKey)
	cl = getCluster(t, c, userKey)
	if cl.Status.TLS == nil || cl.Status.TLS.Secret != "own-cert" {
		t.Errorf("a valid certificate of the user's: status.tls %+v", cl.Status.TLS)
	}
	// It expires within the hour: reported before it does.
	if cond := conditionWithReason(cl, "ExpiresSoon"); cond == nil || cond.Type != ConditionCertificateExpiring || cond.Status != metav1.ConditionTrue {
		t.Errorf("a certificate expiring within the hour: %+v, want CertificateExpiring True ExpiresSoon", cond)
	}
	if cond := conditionWithReason(getCluster(t, c, key), "Valid"); cond == nil || cond.Status != metav1.ConditionFalse {
		t.Errorf("Dolphin's 90-day certificate: %+v, want CertificateExpiring False Valid", cond)
	}
}
