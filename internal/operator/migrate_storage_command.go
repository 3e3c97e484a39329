package operator

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dolphin-operator/dolphin/internal/storagemigration"
	"github.com/dolphin-operator/dolphin/internal/webhook"
)

// NewMigrateStorageCommand returns `dolphin migrate-storage`, which a cluster administrator
// runs from their machine (docs/upgrading.md).
func NewMigrateStorageCommand() *cobra.Command {
	var kubeconfig string
	var settle time.Duration
	cmd := &cobra.Command{
		Use:   "migrate-storage",
		Short: "Rewrite every stored Dolphin object in the storage version and trim the CRDs' storedVersions",
		Long: "An operator that manages every namespace does this itself at start. Operators installed\n" +
			"for one namespace (config/namespaced) rewrite only their own namespace and cannot tell\n" +
			"whether objects elsewhere are still stored in an older version; a cluster administrator\n" +
			"runs this once after upgrading them all, before a release that stops serving that version.\n" +
			"It needs list and update on Dolphin's kinds in every namespace, and get and\n" +
			"patch of customresourcedefinitions/status. Safe to repeat.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadKubeconfig(kubeconfig)
			if err != nil {
				return err
			}
			scheme, err := NewScheme()
			if err != nil {
				return err
			}
			c, err := client.New(cfg, client.Options{Scheme: scheme})
			if err != nil {
				return fmt.Errorf("connecting to the API server: %w", err)
			}
			m := &storagemigration.Migrator{Client: c, Reader: c, CRDs: webhook.CRDs, Settle: settle}
			results, err := m.Migrate(cmd.Context())
			for _, r := range results {
				state := fmt.Sprintf("%d objects rewritten", r.Rewritten)
				if r.Skipped {
					state = "nothing to do"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: stored in %s, %s, storedVersions %v\n", r.CRD, r.StorageVersion, state, r.StoredVersions)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "Path to a kubeconfig; empty means $KUBECONFIG, ~/.kube/config or in-cluster.")
	cmd.Flags().DurationVar(&settle, "settle", 15*time.Second,
		"Wait between two rewrites of every object before storedVersions is trimmed (API servers of an HA control plane learn of a CRD change one by one); 0 rewrites once.")
	return cmd
}

// loadKubeconfig is the client configuration of --kubeconfig, or the usual search
// ($KUBECONFIG, ~/.kube/config, in-cluster) when it is empty.
func loadKubeconfig(path string) (*rest.Config, error) {
	if path == "" {
		cfg, err := ctrl.GetConfig()
		if err != nil {
			return nil, fmt.Errorf("loading Kubernetes client config: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %s: %w", path, err)
	}
	return cfg, nil
}
