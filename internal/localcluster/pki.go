package localcluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Identities of the certificates the control plane uses. The groups are what RBAC's bootstrap
// policy binds: system:masters is cluster-admin; the component users have their own roles.
const (
	AdminUser             = "dolphin-admin"
	ControllerManagerUser = "system:kube-controller-manager"
	SchedulerUser         = "system:kube-scheduler"
	// apiserverKubeletClient is the identity kube-apiserver presents to kubelets (logs, exec).
	apiserverKubeletClient = "kube-apiserver-kubelet-client"
	groupMasters           = "system:masters"
)

const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 365 * 24 * time.Hour
	// renewBefore is how close to expiry a certificate may be before the PKI is regenerated.
	renewBefore = 30 * 24 * time.Hour
)

// ServingDNSNames and ServingIPs are the subject alternative names of the kube-apiserver
// serving certificate: the host's loopback names plus the in-cluster names and the first
// address of the service range (10.0.0.0/24), which is the `kubernetes` Service.
var (
	ServingDNSNames = []string{
		"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
		"kubernetes.default.svc.cluster.local",
	}
	ServingIPs = []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), net.ParseIP("10.0.0.1")}
)

// PKI is the set of keys and certificates of a local cluster, as files in one folder. Every
// file is PEM; keys are ECDSA P-256.
type PKI struct {
	// Dir is the folder holding the files.
	Dir string

	ca    *x509.Certificate
	caKey crypto.Signer
}

// Paths of the files in the PKI folder.
func (p *PKI) path(name string) string { return filepath.Join(p.Dir, name) }

// CACert is the path of the cluster CA certificate (client CA, signing CA, root CA).
func (p *PKI) CACert() string { return p.path("ca.crt") }

// CAKey is the path of the cluster CA key (kube-controller-manager signs CSRs with it).
func (p *PKI) CAKey() string { return p.path("ca.key") }

// CertKey returns the certificate and key paths of the named pair (e.g. "apiserver", "admin").
func (p *PKI) CertKey(name string) (cert, key string) {
	return p.path(name + ".crt"), p.path(name + ".key")
}

// SAKey and SAPub are the service-account token signing key and its public key.
func (p *PKI) SAKey() string { return p.path("sa.key") }

// SAPub is the public half of SAKey, with which kube-apiserver verifies tokens.
func (p *PKI) SAPub() string { return p.path("sa.pub") }

// clientCerts names the client certificate pairs EnsurePKI issues: file name → CN and groups.
var clientCerts = []struct {
	name   string
	cn     string
	groups []string
}{
	{"admin", AdminUser, []string{groupMasters}},
	{"kube-controller-manager", ControllerManagerUser, nil},
	{"kube-scheduler", SchedulerUser, nil},
	{"apiserver-kubelet-client", apiserverKubeletClient, []string{groupMasters}},
}

// EnsurePKI loads the PKI in dir when it is complete and valid for at least 30 more days,
// and otherwise generates a new one (a new CA, so every kubeconfig must be rewritten).
// Reusing it keeps kubeconfigs that users copied working across `up`/`down`.
func EnsurePKI(dir string) (*PKI, error) {
	p := &PKI{Dir: dir}
	if err := p.load(); err == nil {
		return p, nil
	}
	if err := p.generate(); err != nil {
		return nil, err
	}
	return p, nil
}

// load reads the CA and checks that every file exists and that the leaf certificates chain to
// the CA and are not about to expire.
func (p *PKI) load() error {
	ca, key, err := readPair(p.CACert(), p.CAKey())
	if err != nil {
		return err
	}
	p.ca, p.caKey = ca, key
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	names := []string{"apiserver"}
	for _, c := range clientCerts {
		names = append(names, c.name)
	}
	for _, n := range names {
		cert, _, err := readPair(p.CertKey(n))
		if err != nil {
			return err
		}
		if time.Until(cert.NotAfter) < renewBefore {
			return fmt.Errorf("%s expires at %s", n, cert.NotAfter)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			return fmt.Errorf("verifying %s: %w", n, err)
		}
	}
	for _, f := range []string{p.SAKey(), p.SAPub()} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("service-account key: %w", err)
		}
	}
	return nil
}

// generate writes a fresh CA, serving certificate, client certificates and service-account key.
func (p *PKI) generate() error {
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", p.Dir, err)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "dolphin-local-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	ca, err := sign(tmpl, caKey.Public(), nil, caKey)
	if err != nil {
		return fmt.Errorf("self-signing the CA: %w", err)
	}
	if err := writePair(p.CACert(), p.CAKey(), ca, caKey); err != nil {
		return err
	}
	p.ca, p.caKey = ca, caKey

	if err := p.issue("apiserver", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		DNSNames:    ServingDNSNames,
		IPAddresses: ServingIPs,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		return err
	}
	for _, c := range clientCerts {
		if _, _, err := p.IssueClientCert(c.name, c.cn, c.groups...); err != nil {
			return err
		}
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating service-account key: %w", err)
	}
	if err := writeKey(p.SAKey(), saKey); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return fmt.Errorf("encoding service-account public key: %w", err)
	}
	return writePEM(p.SAPub(), "PUBLIC KEY", pub, 0o644)
}

// EnsureServingIPs reissues the kube-apiserver serving certificate when it does not name every
// one of ips (a real node's address, which pods use). kube-apiserver reloads it from the file.
func (p *PKI) EnsureServingIPs(ips ...net.IP) error {
	cert, _, err := readPair(p.CertKey("apiserver"))
	if err != nil {
		return err
	}
	missing := false
	for _, ip := range ips {
		if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
			missing = true
		}
	}
	if !missing {
		return nil
	}
	all := slices.Clone(ServingIPs)
	for _, ip := range append(cert.IPAddresses, ips...) {
		if !slices.ContainsFunc(all, ip.Equal) {
			all = append(all, ip)
		}
	}
	return p.issue("apiserver", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		DNSNames:    ServingDNSNames,
		IPAddresses: all,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}

// IssueClientCert issues a client certificate for user cn in groups (the O= fields), signed by
// the cluster CA, and writes it as <name>.crt/<name>.key. It returns the two paths. A local
// node uses it for its kubelet identity (cn system:node:<name>, group system:nodes).
func (p *PKI) IssueClientCert(name, cn string, groups ...string) (cert, key string, err error) {
	err = p.issue(name, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	cert, key = p.CertKey(name)
	return cert, key, err
}

// issue signs tmpl (subject, SANs, usages) with the CA under a new key and writes the pair.
func (p *PKI) issue(name string, tmpl *x509.Certificate) error {
	if p.ca == nil {
		return errors.New("the PKI has no CA loaded")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating key for %s: %w", name, err)
	}
	now := time.Now()
	tmpl.NotBefore = now.Add(-time.Hour)
	tmpl.NotAfter = now.Add(leafValidity)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	cert, err := sign(tmpl, key.Public(), p.ca, p.caKey)
	if err != nil {
		return fmt.Errorf("signing %s: %w", name, err)
	}
	c, k := p.CertKey(name)
	return writePair(c, k, cert, key)
}

// sign creates the certificate tmpl for pub, signed by parent/parentKey (self-signed when
// parent is nil), with a random 128-bit serial number.
func sign(tmpl *x509.Certificate, pub crypto.PublicKey, parent *x509.Certificate, parentKey crypto.Signer) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	tmpl.SerialNumber = serial
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, parentKey)
	if err != nil {
		return nil, fmt.Errorf("creating certificate: %w", err)
	}
	return x509.ParseCertificate(der)
}

func writePair(certPath, keyPath string, cert *x509.Certificate, key *ecdsa.PrivateKey) error {
	if err := writeKey(keyPath, key); err != nil {
		return err
	}
	return writePEM(certPath, "CERTIFICATE", cert.Raw, 0o644)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	return writePEM(path, "EC PRIVATE KEY", der, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	data := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, data, mode); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// readPair reads a PEM certificate and its PEM EC private key.
func readPair(certPath, keyPath string) (*x509.Certificate, crypto.Signer, error) {
	cb, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, fmt.Errorf("reading certificate: %w", err)
	}
	block, _ := pem.Decode(cb)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, nil, fmt.Errorf("%s holds no PEM certificate", certPath)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing %s: %w", certPath, err)
	}
	kb, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, fmt.Errorf("reading key: %w", err)
	}
	block, _ = pem.Decode(kb)
	if block == nil || block.Type != "EC PRIVATE KEY" {
		return nil, nil, fmt.Errorf("%s holds no PEM EC private key", keyPath)
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing %s: %w", keyPath, err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, nil, fmt.Errorf("%s does not match %s", keyPath, certPath)
	}
	return cert, key, nil
}
