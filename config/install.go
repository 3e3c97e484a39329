// Package config embeds the manifests of a real install of Dolphin (config/default without the
// CRDs, which config/crd embeds): RBAC, the operator's Namespace and Deployment, the webhook
// Service and configuration — the files each folder's kustomization.yaml lists, so that
// `dolphin local up` on the real node installs exactly what a user applies.
package config

import (
	"embed"
	"fmt"
	"path"

	"sigs.k8s.io/yaml"
)

//go:embed rbac/*.yaml manager/*.yaml webhook/*.yaml
var install embed.FS

// DevImage is the image config/manager names: Dolphin's image as `make images` tags a
// development build (IMAGE_TAG=dev). An install of another build replaces it.
const DevImage = "ghcr.io/dolphin-operator/dolphin:dev"

// operatorFolders are the folders of config/default after ../crd, in its order.
var operatorFolders = []string{"rbac", "manager", "webhook"}

// OperatorManifests returns the YAML files of the operator's install (RBAC, Deployment,
// webhooks), in the order of config/default's kustomization.
func OperatorManifests() ([][]byte, error) {
	var out [][]byte
	for _, dir := range operatorFolders {
		k, err := install.ReadFile(path.Join(dir, "kustomization.yaml"))
		if err != nil {
			return nil, fmt.Errorf("reading %s/kustomization.yaml: %w", dir, err)
		}
		var kust struct {
			Resources []string `json:"resources"`
		}
		if err := yaml.Unmarshal(k, &kust); err != nil {
			return nil, fmt.Errorf("parsing %s/kustomization.yaml: %w", dir, err)
		}
		for _, r := range kust.Resources {
			b, err := install.ReadFile(path.Join(dir, r))
			if err != nil {
				return nil, fmt.Errorf("%s/kustomization.yaml lists %s: %w", dir, r, err)
			}
			out = append(out, b)
		}
	}
	return out, nil
}
