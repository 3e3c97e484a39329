package pki

import (
	"crypto/x509"
	"net"
	"testing"
	"time"
)

func TestIssueUnderCA(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	caPEM, caKey, err := NewCA("test-ca", 48*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _, err := Issue(caPEM, caKey, Leaf{CommonName: "db", DNSNames: []string{"db.svc"}, IPs: []net.IP{net.ParseIP("10.0.0.7")}, Validity: 90 * 24 * time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := ParseCert(caPEM)
	cert, err := ParseCert(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !cert.NotAfter.Equal(ca.NotAfter) {
		t.Errorf("a certificate outlives its CA: %s > %s", cert.NotAfter, ca.NotAfter)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	for _, name := range []string{"db.svc", "10.0.0.7"} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, CurrentTime: now}); err != nil {
			t.Errorf("verify as %s: %v", name, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "other.svc", CurrentTime: now}); err == nil {
		t.Error("verified for a name it does not carry")
	}
	if cert.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
		t.Errorf("usage %v, want server auth by default", cert.ExtKeyUsage)
	}
	// Renewal is due two thirds into the validity counted from issue (not from the backdated
	// NotBefore).
	if got, want := RenewAt(cert), now.Add(32*time.Hour); !got.Equal(want) {
		t.Errorf("RenewAt = %s, want %s", got, want)
	}
	_, otherKey, _ := NewCA("other", time.Hour, now)
	if _, _, err := Issue(caPEM, otherKey, Leaf{CommonName: "x"}, now); err == nil {
		t.Error("issued with a key that is not the CA's")
	}
}
