// Package webhook serves Dolphin's admission webhooks: validation that CEL cannot do because it
// reads other objects (the password in a referenced Secret). It also issues and rotates the
// webhook's own serving certificate, so that an install needs no cert-manager.
package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dolphin-operator/dolphin/internal/pki"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// Keys of the webhook certificate Secret.
const (
	CABundleKey = "ca.crt" // every CA the API server should trust (the current one first)
	CAKeyKey    = "ca.key"
	CertKey     = "tls.crt"
	KeyKey      = "tls.key"
)

// Validity of the webhook PKI. The serving certificate is renewed after two thirds of its
// life; the CA when it would end before a new serving certificate does.
const (
	CAValidity   = 10 * 365 * 24 * time.Hour
	CertValidity = 90 * 24 * time.Hour
)

// CertManager keeps the webhook's serving certificate in a Secret, serves it from memory
// (GetCertificate) and puts its CA into the webhook configurations (caBundle). Every operator
// replica runs one (webhooks are served by all replicas, leader or not); they share the
// Secret, and whichever renews first writes it, with optimistic locking.
type CertManager struct {
	// Client writes the Secret and the webhook configurations.
	Client client.Client
	// Reader reads them live (neither is in the operator's cache).
	Reader client.Reader
	// Namespace and SecretName locate the Secret.
	Namespace, SecretName string
	// DNSNames and IPs are the names the API server reaches the webhook by (the Service's
	// DNS names; 127.0.0.1 when it runs on the API server's host).
	DNSNames []string
	IPs      []net.IP
	// Configurations are the ValidatingWebhookConfigurations whose caBundle is kept.
	Configurations []string
	// ConversionCRDs are CustomResourceDefinitions whose conversion webhook's caBundle is kept
	// when it points at this operator: at a Service in Namespace, or at a URL (the local stack).
	// A CRD without webhook conversion, or converted by an install in another namespace, is
	// left alone.
	ConversionCRDs []string
	// Interval is how often the Secret is checked (a minute when zero).
	Interval time.Duration
	// CAValidity and CertValidity override the validity of new CAs and certificates
	// (CAValidity, CertValidity when zero; tests shorten them to see renewals).
	CAValidity, CertValidity time.Duration
	// Now is the clock (time.Now when nil); tests move it to force a renewal.
	Now func() time.Time
	Log logr.Logger

	current  atomic.Pointer[tls.Certificate]
	injected atomic.Bool
}

// NeedLeaderElection is false: every replica serves webhooks.
func (m *CertManager) NeedLeaderElection() bool { return false }

// Start keeps the certificate until ctx ends.
func (m *CertManager) Start(ctx context.Context) error {
	interval := m.Interval
	if interval <= 0 {
		interval = time.Minute
	}
	for {
		wait := interval
		if err := m.Sync(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			m.Log.Error(err, "webhook certificate")
			wait = min(interval, 5*time.Second)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// GetCertificate serves the current certificate; before the first one is loaded TLS
// handshakes fail, so nothing is answered without a certificate the API server trusts.
func (m *CertManager) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := m.current.Load(); c != nil {
		return c, nil
	}
	return nil, errors.New("the webhook certificate is not ready yet")
}

// Ready is nil once a certificate is served and its CA is in every webhook configuration and
// conversion webhook (a readiness check: the operator's pod is not an endpoint of the webhook Service before).
func (m *CertManager) Ready(*http.Request) error {
	if m.current.Load() == nil {
		return errors.New("the webhook certificate is not ready yet")
	}
	if !m.injected.Load() {
		return errors.New("the webhook CA is not in the webhook configurations yet")
	}
	return nil
}

func (m *CertManager) validity() (ca, cert time.Duration) {
	ca, cert = CAValidity, CertValidity
	if m.CAValidity > 0 {
		ca = m.CAValidity
	}
	if m.CertValidity > 0 {
		cert = m.CertValidity
	}
	return ca, cert
}

func (m *CertManager) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// Sync makes sure the Secret holds a valid certificate for the names, renewing it (or the
// CA) when due, loads it and injects the CA bundle. The bundle in the Secret is injected
// before anything changes, so a CA prepared by an earlier round is trusted by the API server
// before a certificate it signed is served.
func (m *CertManager) Sync(ctx context.Context) error {
	key := types.NamespacedName{Namespace: m.Namespace, Name: m.SecretName}
	var s corev1.Secret
	err := m.Reader.Get(ctx, key, &s)
	switch {
	case apierrors.IsNotFound(err):
		data, err := m.fresh()
		if err != nil {
			return err
		}
		s = corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: m.SecretName,
			Labels: map[string]string{resources.LabelManagedBy: resources.ManagedBy, resources.LabelComponent: "webhook"}},
			Type: corev1.SecretTypeOpaque, Data: data}
		if err := m.Client.Create(ctx, &s); err != nil {
			return fmt.Errorf("creating webhook certificate Secret %s: %w", key, err) // AlreadyExists: another replica won; next round reads it
		}
		m.Log.Info("issued the webhook certificate", "secret", key.String(), "dnsNames", m.DNSNames)
	case err != nil:
		return fmt.Errorf("reading webhook certificate Secret %s: %w", key, err)
	default:
		if err := m.inject(ctx, s.Data[CABundleKey]); err != nil {
			return err
		}
		data, why, err := m.next(s.Data)
		if err != nil {
			return err
		}
		if data != nil {
			patch := client.MergeFromWithOptions(s.DeepCopy(), client.MergeFromWithOptimisticLock{})
			s.Data = data
			if err := m.Client.Patch(ctx, &s, patch); err != nil {
				return fmt.Errorf("renewing the webhook certificate (%s): %w", why, err)
			}
			m.Log.Info("renewed the webhook certificate", "reason", why, "secret", key.String())
		}
	}
	pair, err := tls.X509KeyPair(s.Data[CertKey], s.Data[KeyKey])
	if err != nil {
		return fmt.Errorf("webhook certificate Secret %s: %w", key, err)
	}
	m.current.Store(&pair)
	if err := m.inject(ctx, s.Data[CABundleKey]); err != nil {
		return err
	}
	m.injected.Store(true)
	return nil
}

// Keys of the CA prepared for the rollover (in the bundle already, signing nothing yet).
const (
	nextCAKey    = "next-ca.crt"
	nextCAKeyKey = "next-ca.key"
)

// fresh is a new CA and a certificate it signed.
func (m *CertManager) fresh() (map[string][]byte, error) {
	caValidity, _ := m.validity()
	ca, caKey, err := pki.NewCA("dolphin-webhook-ca", caValidity, m.now())
	if err != nil {
		return nil, err
	}
	return m.withLeaf(map[string][]byte{CABundleKey: ca, CAKeyKey: caKey}, ca, caKey)
}

// withLeaf adds a certificate signed by ca/caKey to data.
func (m *CertManager) withLeaf(data map[string][]byte, ca, caKey []byte) (map[string][]byte, error) {
	_, certValidity := m.validity()
	name := "dolphin-webhook"
	if len(m.DNSNames) > 0 {
		name = m.DNSNames[0]
	}
	cert, key, err := pki.Issue(ca, caKey, pki.Leaf{CommonName: name, DNSNames: m.DNSNames, IPs: m.IPs, Validity: certValidity}, m.now())
	if err != nil {
		return nil, err
	}
	data[CertKey], data[KeyKey] = cert, key
	return data, nil
}

// next decides the Secret's next data (nil: nothing to change) and says why. The CA is
// rolled over in two rounds: when it ends within two certificate lives a next CA is made and
// added to the bundle (signing nothing); when it ends within one, the next CA becomes the
// active one and signs a new certificate, the old CA staying in the bundle while valid.
func (m *CertManager) next(old map[string][]byte) (map[string][]byte, string, error) {
	now := m.now()
	_, certValidity := m.validity()
	caPEM := firstPEM(old[CABundleKey])
	ca, err := pki.ParseCert(caPEM)
	if err != nil || len(old[CAKeyKey]) == 0 {
		data, err := m.fresh()
		return data, "no valid CA", err
	}
	data := map[string][]byte{}
	for k, v := range old {
		data[k] = v
	}
	_, nextErr := pki.ParseCert(old[nextCAKey])
	switch {
	case nextErr == nil && len(old[nextCAKeyKey]) > 0 && ca.NotAfter.Before(now.Add(certValidity)):
		bundle := append([]byte(nil), old[nextCAKey]...)
		if now.Before(ca.NotAfter) {
			bundle = append(bundle, caPEM...)
		}
		data[CABundleKey], data[CAKeyKey] = bundle, old[nextCAKeyKey]
		delete(data, nextCAKey)
		delete(data, nextCAKeyKey)
		data, err := m.withLeaf(data, old[nextCAKey], old[nextCAKeyKey])
		return data, "the CA ends within a certificate's life: the next CA signs now", err
	case nextErr != nil && ca.NotAfter.Before(now.Add(2*certValidity)):
		caValidity, _ := m.validity()
		n, nKey, err := pki.NewCA("dolphin-webhook-ca", caValidity, now)
		if err != nil {
			return nil, "", err
		}
		data[nextCAKey], data[nextCAKeyKey] = n, nKey
		data[CABundleKey] = append(append([]byte(nil), caPEM...), n...)
		why := "the CA ends within two certificate lives: the next CA is trusted first"
		if leafWhy := m.renewalReason(old); leafWhy != "" {
			data, err = m.withLeaf(data, caPEM, old[CAKeyKey])
			why += "; " + leafWhy
		}
		return data, why, err
	}
	if why := m.renewalReason(old); why != "" {
		data, err := m.withLeaf(data, caPEM, old[CAKeyKey])
		return data, why, err
	}
	return nil, "", nil
}

// renewalReason says why the certificate in data must be replaced, or "".
func (m *CertManager) renewalReason(data map[string][]byte) string {
	cert, err := pki.ParseCert(data[CertKey])
	if err != nil {
		return "no valid certificate"
	}
	if _, err := tls.X509KeyPair(data[CertKey], data[KeyKey]); err != nil {
		return "the key does not match the certificate"
	}
	now := m.now()
	if !now.Before(pki.RenewAt(cert)) {
		return fmt.Sprintf("two thirds of its validity passed (renew at %s)", pki.RenewAt(cert).Format(time.RFC3339))
	}
	for _, n := range m.DNSNames {
		if !slices.Contains(cert.DNSNames, n) {
			return "it lacks the name " + n
		}
	}
	for _, ip := range m.IPs {
		if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
			return "it lacks the address " + ip.String()
		}
	}
	if pool := x509.NewCertPool(); !pool.AppendCertsFromPEM(data[CABundleKey]) {
		return "no CA bundle"
	} else if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now}); err != nil {
		return "it does not verify against the CA bundle: " + err.Error()
	}
	return ""
}

// firstPEM is the first PEM block of b (the active CA of a bundle).
func firstPEM(b []byte) []byte {
	if i := bytes.Index(b, []byte("-----END CERTIFICATE-----")); i >= 0 {
		return append(bytes.TrimLeft(b[:i], "\n"), []byte("-----END CERTIFICATE-----\n")...)
	}
	return b
}

// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,verbs=get;patch
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,resourceNames=mysqlclusters.mysql.dolphin.dev;mysqlbackups.mysql.dolphin.dev;mysqlusers.mysql.dolphin.dev;mysqldatabases.mysql.dolphin.dev,verbs=get;patch

// inject sets caBundle on every webhook of the configurations and on the conversion webhook
// of the CRDs this operator converts.
func (m *CertManager) inject(ctx context.Context, bundle []byte) error {
	// The validating webhooks first, and whatever the conversion webhooks' fate: a CRD that
	// cannot be patched must not leave the admission webhooks without their CA.
	return errors.Join(m.injectConfigurations(ctx, bundle), m.injectConversion(ctx, bundle))
}

// injectConfigurations sets caBundle on every webhook of the configurations.
func (m *CertManager) injectConfigurations(ctx context.Context, bundle []byte) error {
	for _, name := range m.Configurations {
		var cfg admissionregistrationv1.ValidatingWebhookConfiguration
		if err := m.Reader.Get(ctx, types.NamespacedName{Name: name}, &cfg); err != nil {
			return fmt.Errorf("reading ValidatingWebhookConfiguration %s: %w", name, err)
		}
		patch := client.MergeFromWithOptions(cfg.DeepCopy(), client.MergeFromWithOptimisticLock{})
		changed := false
		for i := range cfg.Webhooks {
			if !bytes.Equal(cfg.Webhooks[i].ClientConfig.CABundle, bundle) {
				cfg.Webhooks[i].ClientConfig.CABundle = bundle
				changed = true
			}
		}
		if !changed {
			continue
		}
		if err := m.Client.Patch(ctx, &cfg, patch); err != nil {
			return fmt.Errorf("setting the CA bundle of ValidatingWebhookConfiguration %s: %w", name, err)
		}
		m.Log.Info("set the webhook CA bundle", "configuration", name)
	}
	return nil
}

// convertedHere reports whether the conversion of crd is served by this operator: webhook
// conversion at a Service in the operator's namespace, or at a URL naming this webhook's
// certificate (the local stack's 127.0.0.1).
func (m *CertManager) convertedHere(crd *apiextensionsv1.CustomResourceDefinition) bool {
	c := crd.Spec.Conversion
	if c == nil || c.Strategy != apiextensionsv1.WebhookConverter || c.Webhook == nil || c.Webhook.ClientConfig == nil {
		return false
	}
	if svc := c.Webhook.ClientConfig.Service; svc != nil {
		return svc.Namespace == m.Namespace
	}
	// A URL is ours only if it names an address or name of this webhook's certificate.
	u, err := url.Parse(ptr.Deref(c.Webhook.ClientConfig.URL, ""))
	if err != nil || u.Hostname() == "" {
		return false
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); ip != nil {
		return slices.ContainsFunc(m.IPs, ip.Equal)
	}
	return slices.Contains(m.DNSNames, host)
}

// injectConversion sets caBundle on the conversion webhook of the CRDs this operator converts.
func (m *CertManager) injectConversion(ctx context.Context, bundle []byte) error {
	for _, name := range m.ConversionCRDs {
		var crd apiextensionsv1.CustomResourceDefinition
		err := m.Reader.Get(ctx, types.NamespacedName{Name: name}, &crd)
		switch {
		case apierrors.IsNotFound(err):
			continue // not installed: nothing converts it
		case err != nil:
			return fmt.Errorf("reading CustomResourceDefinition %s: %w", name, err)
		}
		if !m.convertedHere(&crd) || bytes.Equal(crd.Spec.Conversion.Webhook.ClientConfig.CABundle, bundle) {
			continue
		}
		patch := client.MergeFromWithOptions(crd.DeepCopy(), client.MergeFromWithOptimisticLock{})
		crd.Spec.Conversion.Webhook.ClientConfig.CABundle = bundle
		if err := m.Client.Patch(ctx, &crd, patch); err != nil {
			return fmt.Errorf("setting the CA bundle of the conversion webhook of %s: %w", name, err)
		}
		m.Log.Info("set the conversion webhook CA bundle", "crd", name)
	}
	return nil
}
