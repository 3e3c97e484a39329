package localcluster

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestPKIChainsAndNames(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	p, err := EnsurePKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	ca := readCert(t, p.CACert())
	if !ca.IsCA {
		t.Fatal("the CA certificate is not a CA")
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)

	crt, _ := p.CertKey("apiserver")
	serving := readCert(t, crt)
	for _, name := range []string{"localhost", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"} {
		if _, err := serving.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
			t.Errorf("serving certificate for %q: %v", name, err)
		}
	}
	for _, ip := range []string{"127.0.0.1", "10.0.0.1", "::1"} {
		if _, err := serving.Verify(x509.VerifyOptions{Roots: roots, DNSName: ip}); err != nil {
			t.Errorf("serving certificate for %s: %v", ip, err)
		}
	}
	if _, err := serving.Verify(x509.VerifyOptions{Roots: roots, DNSName: "example.com"}); err == nil {
		t.Error("serving certificate verifies for example.com")
	}

	for _, tc := range []struct {
		name, cn string
		groups   []string
	}{
		{"admin", AdminUser, []string{"system:masters"}},
		{"kube-controller-manager", ControllerManagerUser, nil},
		{"kube-scheduler", SchedulerUser, nil},
	} {
		crt, _ := p.CertKey(tc.name)
		c := readCert(t, crt)
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s: not a client certificate of the CA: %v", tc.name, err)
		}
		if c.Subject.CommonName != tc.cn || !slices.Equal(c.Subject.Organization, tc.groups) {
			t.Errorf("%s: subject CN=%q O=%q, want CN=%q O=%q", tc.name, c.Subject.CommonName, c.Subject.Organization, tc.cn, tc.groups)
		}
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
			t.Errorf("%s: a client certificate also verifies for server auth", tc.name)
		}
	}

	if _, err := os.Stat(p.SAPub()); err != nil {
		t.Errorf("service-account public key: %v", err)
	}

	// A complete PKI is reused as it is (kubeconfigs handed out stay valid).
	again, err := EnsurePKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !readCert(t, again.CACert()).Equal(ca) {
		t.Error("EnsurePKI regenerated a complete, valid PKI")
	}
	// A broken one is regenerated.
	if err := os.Remove(p.SAKey()); err != nil {
		t.Fatal(err)
	}
	fixed, err := EnsurePKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	if readCert(t, fixed.CACert()).Equal(ca) {
		t.Error("EnsurePKI kept an incomplete PKI")
	}
}

func TestChoosePortsReusesFreeRecordedPorts(t *testing.T) {
	free, err := FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	cp := &ControlPlane{state: &state{Ports: Ports{EtcdClient: free[0], APIServer: free[1]}}}
	if err := cp.choosePorts(Ports{Scheduler: 1}); err != nil {
		t.Fatal(err)
	}
	got := cp.state.Ports
	if got.EtcdClient != free[0] || got.APIServer != free[1] || got.Scheduler != 1 {
		t.Errorf("ports %+v: want recorded etcd %d and API server %d, explicit scheduler 1", got, free[0], free[1])
	}
	seen := map[int]bool{}
	for _, p := range got.list() {
		if *p == 0 || seen[*p] {
			t.Errorf("ports %+v: zero or duplicate", got)
		}
		seen[*p] = true
	}
}
