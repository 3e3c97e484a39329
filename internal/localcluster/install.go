package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// applyOrder puts the kinds an install needs first ahead of what uses them (a Deployment's
// ServiceAccount must exist before its pods are created).
var applyOrder = []string{"Namespace", "ServiceAccount", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding",
	"ConfigMap", "Secret", "Service", "Deployment", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"}

// ApplyManifests server-side applies every object of the YAML documents through kubeconfig, as
// FieldManager, kinds in dependency order (Namespaces first, webhook configurations last).
// It returns the objects applied as "Kind namespace/name".
func ApplyManifests(ctx context.Context, kubeconfig string, docs ...[]byte) ([]string, error) {
	var objs []*unstructured.Unstructured
	for _, d := range docs {
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(d), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, fmt.Errorf("parsing a manifest: %w", err)
			}
			if len(u.Object) > 0 {
				objs = append(objs, u)
			}
		}
	}
	rank := func(u *unstructured.Unstructured) int {
		if i := slices.Index(applyOrder, u.GetKind()); i >= 0 {
			return i
		}
		return len(applyOrder)
	}
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int { return rank(a) - rank(b) })
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", kubeconfig, err)
	}
	c, err := newUnstructuredClient(cfg)
	if err != nil {
		return nil, err
	}
	var applied []string
	for _, u := range objs {
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
			return applied, fmt.Errorf("applying %s %s: %w", u.GetKind(), u.GetName(), err)
		}
		name := u.GetName()
		if ns := u.GetNamespace(); ns != "" {
			name = ns + "/" + name
		}
		applied = append(applied, u.GetKind()+" "+name)
	}
	return applied, nil
}

// newUnstructuredClient is a client for any kind the API server serves (a dynamic REST mapper).
func newUnstructuredClient(cfg *rest.Config) (client.Client, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to the API server: %w", err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		return nil, fmt.Errorf("connecting to the API server: %w", err)
	}
	c, err := client.New(cfg, client.Options{HTTPClient: hc, Mapper: mapper})
	if err != nil {
		return nil, fmt.Errorf("connecting to the API server: %w", err)
	}
	return c, nil
}
