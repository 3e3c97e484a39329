package controller

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/agent"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// agentCertRenewBefore is how long before its expiry the agent's certificate is replaced.
const agentCertRenewBefore = 30 * 24 * time.Hour

// reconcileAgentSecret makes sure `<name>-agent` holds a CA, a server certificate signed by it
// and a bearer token for the instance agents (internal/agent), the token scrapers of their
// /metrics present, and the monitor account's password the agents' metrics collectors log in
// with. The PKI and token are generated once and replaced, whole, only when a key is missing
// or the certificate is about to expire; the metrics token is kept across that; the monitor
// password follows the credentials Secret. The agents reload the files, and the operator
// reads the Secret before every call.
func (r *MySQLClusterReconciler) reconcileAgentSecret(ctx context.Context, c *dolphinv1.MySQLCluster) error {
	monitorPassword, err := r.credentialFor(ctx, c, resources.MonitorPasswordKey)
	if err != nil {
		return err
	}
	key := types.NamespacedName{Namespace: c.Namespace, Name: resources.AgentSecretName(c)}
	var s corev1.Secret
	err = r.Client.Get(ctx, key, &s)
	switch {
	case apierrors.IsNotFound(err):
		data, err := newAgentSecretData(c, time.Now())
		if err != nil {
			return err
		}
		if err := withMetricsKeys(data, nil, monitorPassword); err != nil {
			return err
		}
		s = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace,
				Labels: resources.CredentialsSecretLabels(c), OwnerReferences: []metav1.OwnerReference{resources.OwnerReference(c)}},
			Type: corev1.SecretTypeOpaque,
			Data: data,
		}
		if err := r.Client.Create(ctx, &s); err != nil {
			return fmt.Errorf("creating Secret %s: %w", key, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("reading Secret %s: %w", key, err)
	}
	data := maps.Clone(s.Data)
	why := agentSecretStale(&s, time.Now())
	if why != "" {
		if data, err = newAgentSecretData(c, time.Now()); err != nil {
			return err
		}
	}
	if err := withMetricsKeys(data, s.Data, monitorPassword); err != nil {
		return err
	}
	if why == "" && maps.EqualFunc(data, s.Data, bytes.Equal) {
		return nil
	}
	patch := client.MergeFromWithOptions(s.DeepCopy(), client.MergeFromWithOptimisticLock{})
	s.Data = data
	if err := r.Client.Patch(ctx, &s, patch); err != nil {
		return fmt.Errorf("updating Secret %s: %w", key, err)
	}
	if why != "" {
		r.event(c, corev1.EventTypeNormal, "AgentCertificateRenewed", "Update", "renewed the agent certificate in Secret %s: %s", key.Name, why)
	}
	return nil
}

// withMetricsKeys sets the metrics keys of the agent Secret data: the metrics token of
// previous (a new one when it has none) and the monitor account's password.
func withMetricsKeys(data, previous map[string][]byte, monitorPassword []byte) error {
	token := previous[resources.AgentMetricsTokenKey]
	if len(token) == 0 {
		t, err := agent.GenerateToken()
		if err != nil {
			return fmt.Errorf("generating the metrics token: %w", err)
		}
		token = []byte(t)
	}
	data[resources.AgentMetricsTokenKey] = token
	data[resources.MonitorPasswordKey] = monitorPassword
	return nil
}

func newAgentSecretData(c *dolphinv1.MySQLCluster, now time.Time) (map[string][]byte, error) {
	ca, cert, key, err := agent.NewAgentPKI(c.Name, c.Namespace, now)
	if err != nil {
		return nil, fmt.Errorf("generating the agent certificate: %w", err)
	}
	token, err := agent.GenerateToken()
	if err != nil {
		return nil, fmt.Errorf("generating the agent token: %w", err)
	}
	return map[string][]byte{
		resources.AgentCAKey: ca, resources.AgentCertKey: cert, resources.AgentKeyKey: key,
		resources.AgentTokenKey: []byte(token),
	}, nil
}

// agentSecretStale says why the agent Secret must be regenerated, or "" when it is fine.
func agentSecretStale(s *corev1.Secret, now time.Time) string {
	for _, k := range []string{resources.AgentCAKey, resources.AgentCertKey, resources.AgentKeyKey, resources.AgentTokenKey} {
		if len(s.Data[k]) == 0 {
			return "key " + k + " is missing"
		}
	}
	block, _ := pem.Decode(s.Data[resources.AgentCertKey])
	if block == nil {
		return "the certificate is not PEM"
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "the certificate does not parse: " + err.Error()
	}
	if now.Add(agentCertRenewBefore).After(cert.NotAfter) {
		return "the certificate expires at " + cert.NotAfter.UTC().Format(time.RFC3339)
	}
	return ""
}
