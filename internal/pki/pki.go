// Package pki issues the small private PKIs Dolphin runs: a self-signed CA per purpose (the
// agents of a cluster, the admission webhook) and the certificates it signs. Keys are ECDSA
// P-256; everything is PEM ("CERTIFICATE", "EC PRIVATE KEY").
package pki

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
	"time"
)

// Backdate is how far before now certificates start, to tolerate clocks a little behind.
const Backdate = time.Hour

// NewCA generates a self-signed CA valid for validity from now, as PEM certificate and key.
func NewCA(commonName string, validity time.Duration, now time.Time) (caPEM, caKeyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating the key of CA %q: %w", commonName, err)
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-Backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := sign(tmpl, key.Public(), nil, key)
	if err != nil {
		return nil, nil, fmt.Errorf("self-signing CA %q: %w", commonName, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// Leaf describes a certificate to issue.
type Leaf struct {
	CommonName string
	DNSNames   []string
	IPs        []net.IP
	// Validity from now; never past the CA's own end.
	Validity time.Duration
	// Usage is what the certificate is for (server auth when empty).
	Usage []x509.ExtKeyUsage
}

// Issue signs a new key's certificate for leaf with the CA (caPEM/caKeyPEM from NewCA).
func Issue(caPEM, caKeyPEM []byte, leaf Leaf, now time.Time) (certPEM, keyPEM []byte, err error) {
	ca, err := ParseCert(caPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("the CA: %w", err)
	}
	block, _ := pem.Decode(caKeyPEM)
	if block == nil || block.Type != "EC PRIVATE KEY" {
		return nil, nil, errors.New("the CA key is not a PEM EC private key")
	}
	caKey, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing the CA key: %w", err)
	}
	if !caKey.PublicKey.Equal(ca.PublicKey) {
		return nil, nil, errors.New("the CA key does not match the CA certificate")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating the key of %q: %w", leaf.CommonName, err)
	}
	notAfter := now.Add(leaf.Validity)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	usage := leaf.Usage
	if len(usage) == 0 {
		usage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: leaf.CommonName},
		DNSNames:    leaf.DNSNames,
		IPAddresses: leaf.IPs,
		NotBefore:   now.Add(-Backdate),
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: usage,
	}
	der, err := sign(tmpl, key.Public(), ca, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("signing the certificate of %q: %w", leaf.CommonName, err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// ParseCert parses the first PEM certificate in b.
func ParseCert(b []byte) (*x509.Certificate, error) {
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

// NotAfter returns when the first certificate in certPEM expires.
func NotAfter(certPEM []byte) (time.Time, error) {
	c, err := ParseCert(certPEM)
	if err != nil {
		return time.Time{}, err
	}
	return c.NotAfter, nil
}

// RenewAt is when a certificate issued here should be replaced: once two thirds of its
// validity passed (counted from when it was issued, Backdate after its NotBefore).
func RenewAt(c *x509.Certificate) time.Time {
	issued := c.NotBefore.Add(Backdate)
	return issued.Add(c.NotAfter.Sub(issued) * 2 / 3)
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
