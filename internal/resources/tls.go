package resources

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"path"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/pki"
)

// TLSDir is where an instance's certificate is mounted (tls.crt, tls.key, ca.crt).
const TLSDir = "/etc/mysql/tls"

// Keys of a TLS Secret (the kubernetes.io/tls keys, and the CA).
const (
	TLSCertKey   = "tls.crt"
	TLSKeyKey    = "tls.key"
	TLSCAKey     = "ca.crt"
	TLSCAPrivKey = "ca.key" // in the CA Secret only
)

// Validity of what Dolphin issues for a cluster's TLS: the CA lives long (clients keep its
// ca.crt), the server certificate 90 days, renewed once two thirds have passed.
const (
	TLSCAValidity   = 10 * 365 * 24 * time.Hour
	TLSCertValidity = 90 * 24 * time.Hour
)

const volumeTLS = "tls"

// MaxInstances is the most instances a cluster can have (spec.instances is at most 9).
const MaxInstances = 9

// TLSSecretName is the Secret with the instances' certificate: the user's, or the one
// Dolphin issues (<name>-tls).
func TLSSecretName(c *dolphinv1.MySQLCluster) string {
	if c.Spec.TLS.CertificateSecret != "" {
		return c.Spec.TLS.CertificateSecret
	}
	return c.Name + "-tls"
}

// TLSCASecretName is the Secret with the CA Dolphin issues a cluster's certificates with.
func TLSCASecretName(c *dolphinv1.MySQLCluster) string { return c.Name + "-ca" }

// ServerCertificateNames are the DNS names the instances' certificate must carry: every pod
// behind the headless Service, both Services in their short and namespaced forms, and
// localhost (for port-forwarding and local clients).
func ServerCertificateNames(c *dolphinv1.MySQLCluster) []string {
	n, ns := NamesFor(c), c.Namespace
	names := []string{
		"*." + n.HeadlessService + "." + ns + ".svc",
		"*." + n.HeadlessService + "." + ns + ".svc.cluster.local",
	}
	// Every pod's name as well, not only the wildcard: a replica checks its source's name
	// (MASTER_SSL_VERIFY_SERVER_CERT) with the server's own matching, which a name spelled
	// out does not depend on. All the ordinals a cluster can have, so scaling needs no renewal.
	for i := range MaxInstances {
		pod := PodName(c, i) + "." + n.HeadlessService + "." + ns + ".svc"
		names = append(names, pod, pod+".cluster.local")
	}
	for _, svc := range []string{n.PrimaryService, n.ReplicaService} {
		names = append(names, svc, svc+"."+ns, svc+"."+ns+".svc", svc+"."+ns+".svc.cluster.local")
	}
	names = append(names, "localhost")
	for _, e := range c.Spec.TLS.ExtraNames {
		if net.ParseIP(e) == nil {
			names = append(names, e)
		}
	}
	return names
}

// ServerCertificateIPs are the addresses the certificate carries: 127.0.0.1, for
// port-forwarding and clients on the instance's host, and the addresses of
// spec.tls.extraNames.
func ServerCertificateIPs(c *dolphinv1.MySQLCluster) []net.IP {
	ips := []net.IP{net.ParseIP("127.0.0.1")}
	for _, e := range c.Spec.TLS.ExtraNames {
		if ip := net.ParseIP(e); ip != nil {
			ips = append(ips, ip)
		}
	}
	return ips
}

// MissingExtraName returns the first of spec.tls.extraNames cert does not carry, or "".
func MissingExtraName(c *dolphinv1.MySQLCluster, cert *x509.Certificate) string {
	for _, e := range c.Spec.TLS.ExtraNames {
		if ip := net.ParseIP(e); ip != nil {
			if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
				return e
			}
		} else if !slices.Contains(cert.DNSNames, e) {
			return e
		}
	}
	return ""
}

// ServerCertificate is what Dolphin issues for a cluster's instances.
func ServerCertificate(c *dolphinv1.MySQLCluster) pki.Leaf {
	return pki.Leaf{CommonName: NamesFor(c).PrimaryService + "." + c.Namespace + ".svc",
		DNSNames: ServerCertificateNames(c), IPs: ServerCertificateIPs(c), Validity: TLSCertValidity}
}

// TLSSecret is a Secret of a cluster's TLS material (the CA's or the instances'), owned by
// the cluster and labelled for the operator's cache.
func TLSSecret(c *dolphinv1.MySQLCluster, name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: c.Namespace,
			Labels:    CredentialsSecretLabels(c),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: dolphinv1.GroupVersion.String(), Kind: "MySQLCluster", Name: c.Name, UID: c.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Type: corev1.SecretTypeOpaque,
		Data: data,
	}
}

// tlsVolume is the certificate's volume, readable by the server's group only.
func tlsVolume(c *dolphinv1.MySQLCluster) *corev1ac.VolumeApplyConfiguration {
	return corev1ac.Volume().WithName(volumeTLS).WithSecret(
		corev1ac.SecretVolumeSource().WithSecretName(TLSSecretName(c)).WithDefaultMode(0o440))
}

// InstanceDNSName is the DNS name of the instance with the given ordinal behind the headless
// Service, which the cluster's certificate covers.
func InstanceDNSName(c *dolphinv1.MySQLCluster, ordinal int) string {
	return PodName(c, ordinal) + "." + NamesFor(c).HeadlessService + "." + c.Namespace + ".svc"
}

// PodServesTLS reports whether the pod's server was started with a TLS certificate (its
// server container's command has --ssl-cert). A pod's command cannot change while it runs, so
// this is what the server does, also in the middle of a rollout that turns TLS on or off.
func PodServesTLS(pod *corev1.Pod) bool {
	for _, ctr := range pod.Spec.Containers {
		if ctr.Name != ContainerMySQLD {
			continue
		}
		for _, a := range append(slices.Clone(ctr.Command), ctr.Args...) {
			if strings.HasPrefix(a, "--ssl-cert=") {
				return true
			}
		}
	}
	return false
}

// tlsArgs are the server's TLS options: on the command line, so that no mysqlConfig setting
// can point them elsewhere.
func tlsArgs() []string {
	return []string{
		"--ssl-ca=" + path.Join(TLSDir, TLSCAKey),
		"--ssl-cert=" + path.Join(TLSDir, TLSCertKey),
		"--ssl-key=" + path.Join(TLSDir, TLSKeyKey),
	}
}

// CheckServerCertificate says what is wrong with the TLS material in data (tls.crt, tls.key,
// ca.crt) for cluster c's instances — missing, malformed, not matching its key, expired, or not
// verifying for the primary Service and the pods — or "" when nothing is.
func CheckServerCertificate(c *dolphinv1.MySQLCluster, data map[string][]byte, now time.Time) string {
	for _, k := range []string{TLSCertKey, TLSKeyKey, TLSCAKey} {
		if len(data[k]) == 0 {
			return "lacks the key " + k
		}
	}
	cert, err := pki.ParseCert(data[TLSCertKey])
	if err != nil {
		return "is not a PEM certificate (" + err.Error() + ")"
	}
	if _, err := tls.X509KeyPair(data[TLSCertKey], data[TLSKeyKey]); err != nil {
		return "does not match its key (" + err.Error() + ")"
	}
	if now.After(cert.NotAfter) {
		return "expired on " + cert.NotAfter.UTC().Format(time.RFC3339)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data[TLSCAKey]) {
		return "comes with a ca.crt that is not a PEM certificate"
	}
	for _, name := range []string{NamesFor(c).PrimaryService + "." + c.Namespace + ".svc",
		PodName(c, 0) + "." + NamesFor(c).HeadlessService + "." + c.Namespace + ".svc"} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, CurrentTime: now}); err != nil {
			return fmt.Sprintf("does not verify for %s against its ca.crt (%v)", name, err)
		}
	}
	return ""
}
