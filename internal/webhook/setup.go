package webhook

import (
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1alpha1"
)

// Register adds the validators to the manager's webhook server, the certificate manager to the
// manager, and a readiness check that passes once the certificate is served and the server
// listens. watchNamespace is the one namespace the operator manages ("" = all).
func Register(mgr ctrl.Manager, certs *CertManager, watchNamespace string) error {
	secrets := secretChecker{reader: mgr.GetAPIReader()}
	if err := ctrl.NewWebhookManagedBy(mgr, &dolphinv1.MySQLUser{}).WithValidator(UserValidator{secrets: secrets}).Complete(); err != nil {
		return fmt.Errorf("registering the MySQLUser webhook: %w", err)
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &dolphinv1.MySQLCluster{}).WithValidator(ClusterValidator{secrets: secrets}).Complete(); err != nil {
		return fmt.Errorf("registering the MySQLCluster webhook: %w", err)
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &corev1.Secret{}).WithValidator(SecretValidator{Client: mgr.GetClient(), Namespace: watchNamespace}).Complete(); err != nil {
		return fmt.Errorf("registering the Secret webhook: %w", err)
	}
	if err := mgr.Add(certs); err != nil {
		return fmt.Errorf("adding the webhook certificate manager: %w", err)
	}
	started := mgr.GetWebhookServer().StartedChecker()
	return mgr.AddReadyzCheck("webhook", func(req *http.Request) error {
		if err := certs.Ready(req); err != nil {
			return err
		}
		return started(req)
	})
}
