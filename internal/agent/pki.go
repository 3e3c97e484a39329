package agent

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/dolphin-operator/dolphin/internal/pki"
)

// Validity of the agent certificates. The CA lives long; the server certificate a year, after
// which the operator issues a new one (IssueAgentCert with the same CA, or a whole new set
// with NewAgentPKI while the client trusts both CAs).
const (
	AgentCAValidity   = 10 * 365 * 24 * time.Hour
	AgentCertValidity = 365 * 24 * time.Hour
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
	return pki.NewCA("dolphin-agent-ca "+clusterName, AgentCAValidity, now)
}

// IssueAgentCert issues a server certificate for a cluster's agents under the CA
// (caPEM/caKeyPEM from NewAgentCA): ECDSA P-256, valid AgentCertValidity from now (never past
// the CA), DNS name AgentServerName(clusterName, namespace).
func IssueAgentCert(caPEM, caKeyPEM []byte, clusterName, namespace string, now time.Time) (certPEM, keyPEM []byte, err error) {
	name := AgentServerName(clusterName, namespace)
	return pki.Issue(caPEM, caKeyPEM, pki.Leaf{CommonName: name, DNSNames: []string{name}, Validity: AgentCertValidity}, now)
}

// CertNotAfter returns when the first certificate in certPEM expires, for deciding when to
// renew it.
func CertNotAfter(certPEM []byte) (time.Time, error) { return pki.NotAfter(certPEM) }

// GenerateToken returns a new bearer token: 32 random bytes, base64url without padding.
func GenerateToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating a token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}
