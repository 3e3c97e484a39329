package webhook

import (
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

// CRDs are the names of Dolphin's CustomResourceDefinitions. Those converted by a webhook
// (spec.conversion) are converted by the operator's webhook server at /convert.
var CRDs = []string{"mysqlclusters.mysql.dolphin.dev", "mysqlbackups.mysql.dolphin.dev",
	"mysqlusers.mysql.dolphin.dev", "mysqldatabases.mysql.dolphin.dev"}

// Register adds the validators to the manager's webhook server (made by NewServer with the
// same certs, which runs the certificate manager, or by NewServerFromDir with certs nil) and a
// readiness check that passes once the certificate is served and the server listens.
// watchNamespace is the one namespace the operator manages ("" = all).
func Register(mgr ctrl.Manager, certs *CertManager, watchNamespace string) error {
	secrets := secretChecker{reader: mgr.GetAPIReader()}
	if err := ctrl.NewWebhookManagedBy(mgr, &dolphinv1.MySQLUser{}).WithValidator(UserValidator{secrets: secrets}).Complete(); err != nil {
		return fmt.Errorf("registering the MySQLUser webhook: %w", err)
	}
	// The MySQLCluster builder also serves /convert: every Dolphin kind is convertible (v1alpha1
	// spokes, v1beta1 hub), which the builder finds in the scheme.
	if err := ctrl.NewWebhookManagedBy(mgr, &dolphinv1.MySQLCluster{}).WithValidator(ClusterValidator{secrets: secrets}).Complete(); err != nil {
		return fmt.Errorf("registering the MySQLCluster webhook: %w", err)
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &dolphinv1.MySQLBackupStore{}).WithValidator(BackupStoreValidator{Client: mgr.GetClient(), Namespace: watchNamespace}).Complete(); err != nil {
		return fmt.Errorf("registering the MySQLBackupStore webhook: %w", err)
	}
	if err := ctrl.NewWebhookManagedBy(mgr, &corev1.Secret{}).WithValidator(SecretValidator{Client: mgr.GetClient(), Namespace: watchNamespace}).Complete(); err != nil {
		return fmt.Errorf("registering the Secret webhook: %w", err)
	}
	started := mgr.GetWebhookServer().StartedChecker()
	return mgr.AddReadyzCheck("webhook", func(req *http.Request) error {
		if certs != nil { // nil: the certificate is served from files someone else keeps
			if err := certs.Ready(req); err != nil {
				return err
			}
		}
		return started(req)
	})
}
