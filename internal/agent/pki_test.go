package agent

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"testing"
	"time"

	"github.com/dolphin-operator/dolphin/internal/pki"
)

func TestAgentPKI(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	caPEM, certPEM, keyPEM, err := NewAgentPKI("db", "prod", now)
	if err != nil {
		t.Fatal(err)
	}
	if got := AgentServerName("db", "prod"); got != "db-agent.prod.dolphin.internal" {
		t.Errorf("AgentServerName = %q", got)
	}
	ca, err := pki.ParseCert(caPEM)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParseCert(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !ca.IsCA || ca.NotAfter.Sub(now) != AgentCAValidity {
		t.Errorf("CA: IsCA %v, valid until %s", ca.IsCA, ca.NotAfter)
	}
	if cert.IsCA || cert.NotAfter.Sub(now) != AgentCertValidity || len(cert.DNSNames) != 1 || cert.DNSNames[0] != "db-agent.prod.dolphin.internal" {
		t.Errorf("server certificate: IsCA %v, until %s, DNS %v", cert.IsCA, cert.NotAfter, cert.DNSNames)
	}
	if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		t.Errorf("server key is %T, want ECDSA P-256", cert.PublicKey)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "db-agent.prod.dolphin.internal", CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("the server certificate does not verify: %v", err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "db-agent.other.dolphin.internal", CurrentTime: now}); err == nil {
		t.Error("the server certificate verifies for another namespace")
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Errorf("the server pair does not load: %v", err)
	}
	if na, err := CertNotAfter(certPEM); err != nil || !na.Equal(cert.NotAfter) {
		t.Errorf("CertNotAfter = %s, %v", na, err)
	}

	// A leaf issued late in the CA's life ends with the CA.
	caPEM2, caKey2, err := NewAgentCA("db", now)
	if err != nil {
		t.Fatal(err)
	}
	late := now.Add(AgentCAValidity - 24*time.Hour)
	c2, _, err := IssueAgentCert(caPEM2, caKey2, "db", "prod", late)
	if err != nil {
		t.Fatal(err)
	}
	if na, _ := CertNotAfter(c2); !na.Equal(now.Add(AgentCAValidity)) {
		t.Errorf("a leaf issued a day before the CA expires ends %s, want with the CA", na)
	}
	if _, _, err := IssueAgentCert(caPEM, caKey2, "db", "prod", now); err == nil {
		t.Error("IssueAgentCert with another CA's key succeeded")
	}
}

func TestAgentGenerateToken(t *testing.T) {
	a, err := GenerateToken()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := GenerateToken()
	raw, err := base64.RawURLEncoding.DecodeString(a)
	if err != nil || len(raw) != 32 || a == b {
		t.Errorf("GenerateToken = %q, %q: want distinct base64url of 32 bytes", a, b)
	}
}
