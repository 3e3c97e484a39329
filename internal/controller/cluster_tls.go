package controller

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/metrics"
	"github.com/dolphin-operator/dolphin/internal/pki"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// reconcileTLS gives the instances their certificate when spec.tls.enabled: a CA of the
// cluster (<name>-ca, created once) and a certificate it signs for the pods and Services
// (<name>-tls, renewed after two thirds of its life or when a name is missing), or the user's
// own Secret, checked. The outcome goes to status.tls.
func (r *MySQLClusterReconciler) reconcileTLS(ctx context.Context, c *dolphinv1.MySQLCluster) error {
	if !c.Spec.TLS.Enabled {
		c.Status.TLS = nil
		metrics.CertificateExpiry.DeleteLabelValues(c.Namespace, c.Name)
		return nil
	}
	var (
		s   *corev1.Secret
		err error
	)
	if c.Spec.TLS.CertificateSecret != "" {
		s, err = r.userTLSSecret(ctx, c)
	} else {
		s, err = r.issuedTLSSecret(ctx, c, time.Now())
	}
	if err != nil {
		return err
	}
	cert, _ := pki.ParseCert(s.Data[resources.TLSCertKey])
	c.Status.TLS = &dolphinv1.TLSStatus{Secret: s.Name, NotAfter: &metav1.Time{Time: cert.NotAfter}}
	metrics.CertificateExpiry.WithLabelValues(c.Namespace, c.Name).Set(float64(cert.NotAfter.Unix()))
	return nil
}

// userTLSSecret reads and checks the Secret named in spec.tls.certificateSecret.
func (r *MySQLClusterReconciler) userTLSSecret(ctx context.Context, c *dolphinv1.MySQLCluster) (*corev1.Secret, error) {
	name := c.Spec.TLS.CertificateSecret
	s, err := r.readUserSecret(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name})
	if apierrors.IsNotFound(err) {
		return nil, &pollingUserError{after: userSecretPollInterval, err: &userError{Reason: "TLSCertificateNotFound", Message: fmt.Sprintf(
			"Secret %q named in spec.tls.certificateSecret does not exist: create it with tls.crt, tls.key and ca.crt", name)}}
	}
	if err != nil {
		return nil, fmt.Errorf("reading Secret %s: %w", name, err)
	}
	if err := r.labelUserSecret(ctx, c, s); err != nil {
		return nil, err
	}
	if problem := resources.CheckServerCertificate(c, s.Data, time.Now()); problem != "" {
		return nil, &userError{Reason: "TLSCertificateInvalid", Message: fmt.Sprintf(
			"the certificate in Secret %q (spec.tls.certificateSecret) %s: replace it with one for %s", name, problem,
			strings.Join(resources.ServerCertificateNames(c), ", "))}
	}
	return s, nil
}

// issuedTLSSecret makes sure the cluster's CA and the certificate it signs exist and are
// current, and returns the certificate's Secret.
func (r *MySQLClusterReconciler) issuedTLSSecret(ctx context.Context, c *dolphinv1.MySQLCluster, now time.Time) (*corev1.Secret, error) {
	var ca corev1.Secret
	caKey := types.NamespacedName{Namespace: c.Namespace, Name: resources.TLSCASecretName(c)}
	switch err := r.Client.Get(ctx, caKey, &ca); {
	case apierrors.IsNotFound(err):
		certPEM, keyPEM, err := pki.NewCA("dolphin "+c.Namespace+"/"+c.Name, resources.TLSCAValidity, now)
		if err != nil {
			return nil, err
		}
		ca = *resources.TLSSecret(c, caKey.Name, map[string][]byte{resources.TLSCAKey: certPEM, resources.TLSCAPrivKey: keyPEM})
		if err := r.Client.Create(ctx, &ca); err != nil {
			return nil, fmt.Errorf("creating CA Secret %s: %w", caKey, err)
		}
		r.event(c, corev1.EventTypeNormal, "CACreated", "Create", "created the cluster's CA in Secret %s (clients verify the servers against its ca.crt)", caKey.Name)
	case err != nil:
		return nil, fmt.Errorf("reading CA Secret %s: %w", caKey, err)
	}
	var s corev1.Secret
	key := types.NamespacedName{Namespace: c.Namespace, Name: resources.TLSSecretName(c)}
	err := r.Client.Get(ctx, key, &s)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading TLS Secret %s: %w", key, err)
	}
	exists := err == nil
	why := "no certificate yet"
	if exists {
		why = resources.CheckServerCertificate(c, s.Data, now)
		if why == "" && !bytes.Equal(s.Data[resources.TLSCAKey], ca.Data[resources.TLSCAKey]) {
			why = "is signed by another CA"
		}
		if cert, err := pki.ParseCert(s.Data[resources.TLSCertKey]); why == "" && err == nil {
			if !now.Before(pki.RenewAt(cert)) {
				why = "is two thirds through its life"
			} else if n := resources.MissingExtraName(c, cert); n != "" {
				why = "lacks the name " + n + " of spec.tls.extraNames"
			}
		}
		if why == "" {
			return &s, nil
		}
	}
	certPEM, keyPEM, err := pki.Issue(ca.Data[resources.TLSCAKey], ca.Data[resources.TLSCAPrivKey], resources.ServerCertificate(c), now)
	if err != nil {
		return nil, fmt.Errorf("issuing the server certificate with CA Secret %s: %w", caKey.Name, err)
	}
	data := map[string][]byte{resources.TLSCertKey: certPEM, resources.TLSKeyKey: keyPEM, resources.TLSCAKey: ca.Data[resources.TLSCAKey]}
	if !exists {
		s = *resources.TLSSecret(c, key.Name, data)
		if err := r.Client.Create(ctx, &s); err != nil {
			return nil, fmt.Errorf("creating TLS Secret %s: %w", key, err)
		}
		r.event(c, corev1.EventTypeNormal, "CertificateIssued", "Create", "issued the instances' certificate into Secret %s", key.Name)
		return &s, nil
	}
	patch := client.MergeFromWithOptions(s.DeepCopy(), client.MergeFromWithOptimisticLock{})
	s.Data = data
	if err := r.Client.Patch(ctx, &s, patch); err != nil {
		return nil, fmt.Errorf("renewing TLS Secret %s: %w", key, err)
	}
	r.event(c, corev1.EventTypeNormal, "CertificateRenewed", "Update", "renewed the instances' certificate in Secret %s: the old one %s", key.Name, why)
	return &s, nil
}
