package agent

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// Validity of the agent certificates. The CA lives long; the server certificate a year, after
// which the operator issues a new one (IssueAgentCert with the same CA, or a whole new set
// with NewAgentPKI while the client trusts both CAs).
const (
	AgentCAValidity   = 10 * 365 * 24 * time.Hour
	AgentCertValidity = 365 * 24 * time.Hour
	// backdate tolerates clocks a little behind the operator's.
	backdate = time.Hour
)

// AgentServerName is the DNS name in the agent certificate of a cluster, which the client
// verifies whatever address it dials: "<cluster>-agent.<namespace>.dolphin.internal". It is
// not resolvable, and need not be.
func AgentServerName(clusterName, namespace string) string {
	return clusterName + "-agent." + namespace + ".dolphin.internal"
}

// NewAgentPKI generates the TLS material of a cluster's agents: a self-signed CA (ECDSA P-256,
// valid AgentCAValidity from now) and a server certificate it signed (ECDSA P-256, valid
// AgentCertValidity, DNS name AgentServerName(clusterName, namespace), server auth only). The
// CA key is not returned, so this CA signs nothing else: renew by generating a new set and
// letting the client trust the old and the new CA until every agent has the new certificate
// (or use NewAgentCA and IssueAgentCert to keep the CA). All three are PEM; the key is an
// "EC PRIVATE KEY".
func NewAgentPKI(clusterName, namespace string, now time.Time) (caPEM, certPEM, keyPEM []byte, err error) {
	caPEM, caKeyPEM, err := NewAgentCA(clusterName, now)
	if err != nil {
		return nil, nil, nil, err
	}
	certPEM, keyPEM, err = IssueAgentCert(caPEM, caKeyPEM, clusterName, namespace, now)
	if err != nil {
		return nil, nil, nil, err
	}
	return caPEM, certPEM, keyPEM, nil
}

// NewAgentCA generates a self-signed CA for a cluster's agents (ECDSA P-256, valid
// AgentCAValidity from now), as PEM certificate and PEM key.
func NewAgentCA(clusterName string, now time.Time) (caPEM, caKeyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating the agent CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "dolphin-agent-ca " + clusterName},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(AgentCAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := sign(tmpl, key.Public(), nil, key)
	if err != nil {
		return nil, nil, fmt.Errorf("self-signing the agent CA: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// IssueAgentCert issues a server certificate for a cluster's agents under the CA
// (caPEM/caKeyPEM from NewAgentCA): ECDSA P-256, valid AgentCertValidity from now (never past
// the CA), DNS name AgentServerName(clusterName, namespace).
func IssueAgentCert(caPEM, caKeyPEM []byte, clusterName, namespace string, now time.Time) (certPEM, keyPEM []byte, err error) {
	ca, err := parseCertPEM(caPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("the agent CA: %w", err)
	}
	block, _ := pem.Decode(caKeyPEM)
	if block == nil || block.Type != "EC PRIVATE KEY" {
		return nil, nil, errors.New("the agent CA key is not a PEM EC private key")
	}
	caKey, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing the agent CA key: %w", err)
	}
	if !caKey.PublicKey.Equal(ca.PublicKey) {
		return nil, nil, errors.New("the agent CA key does not match the CA certificate")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating the agent key: %w", err)
	}
	name := AgentServerName(clusterName, namespace)
	notAfter := now.Add(AgentCertValidity)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		DNSNames:    []string{name},
		NotBefore:   now.Add(-backdate),
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := sign(tmpl, key.Public(), ca, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("signing the agent certificate: %w", err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// CertNotAfter returns when the first certificate in certPEM expires, for deciding when to
// renew it.
func CertNotAfter(certPEM []byte) (time.Time, error) {
	c, err := parseCertPEM(certPEM)
	if err != nil {
		return time.Time{}, err
	}
	return c.NotAfter, nil
}

// GenerateToken returns a new bearer token: 32 random bytes, base64url without padding.
func GenerateToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating a token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// sign creates the certificate tmpl for pub, signed by parent/parentKey (self-signed when
// parent is nil), with a random 128-bit serial number, and returns its DER.
func sign(tmpl *x509.Certificate, pub crypto.PublicKey, parent *x509.Certificate, parentKey crypto.Signer) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	tmpl.SerialNumber = serial
	if parent == nil {
		parent = tmpl
	}
	return x509.CreateCertificate(rand.Reader, tmpl, parent, pub, parentKey)
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding the key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func parseCertPEM(b []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing the certificate: %w", err)
	}
	return c, nil
}
