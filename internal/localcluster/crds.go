package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strconv"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// FieldManager is the server-side apply field manager of `dolphin local`.
const FieldManager = "dolphin-local"

// crdEstablishTimeout bounds the wait for applied CRDs to be served.
const crdEstablishTimeout = 30 * time.Second

// InstallCRDs server-side applies every CustomResourceDefinition in the *.yaml files at the
// root of crds (config/crd.Bases(), or a folder) through kubeconfig, then waits until each is
// Established and every served version of it is listed by discovery. It returns the names of the CRDs it applied. A CRD converted by a webhook is
// pointed at https://127.0.0.1:webhookPort (the operator on this host) instead of the
// operator's Service, as the admission webhooks are (LocalWebhooks); its caBundle is the
// operator's to write, and is kept. Port 0 keeps the operator's Service (the operator runs in
// the cluster).
func InstallCRDs(ctx context.Context, kubeconfig string, crds fs.FS, webhookPort int) ([]string, error) {
	objs, err := readCRDs(crds)
	if err != nil {
		return nil, err
	}
	if len(objs) == 0 {
		return nil, errors.New("no CustomResourceDefinition in *.yaml")
	}
	for _, u := range objs {
		if err := localConversion(u, webhookPort); err != nil {
			return nil, err
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", kubeconfig, err)
	}
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("registering apiextensions types: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("connecting to the API server: %w", err)
	}
	names := make([]string, 0, len(objs))
	for _, u := range objs {
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u),
			client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
			return names, fmt.Errorf("applying CRD %s: %w", u.GetName(), err)
		}
		names = append(names, u.GetName())
	}
	ctx, cancel := context.WithTimeout(ctx, crdEstablishTimeout)
	defer cancel()
	for _, name := range names {
		if err := waitEstablished(ctx, c, name); err != nil {
			return names, err
		}
	}
	// Established is not yet served: the API server's discovery follows a moment later, and
	// an operator started in between fails to map its kinds ("no matches for kind", seen once
	// in a make test run with the CPUs busy).
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return names, fmt.Errorf("connecting to the API server: %w", err)
	}
	if err := waitDiscovered(ctx, dc, objs); err != nil {
		return names, err
	}
	return names, nil
}

// waitDiscovered polls discovery the way controller-runtime's REST mapper reads it (aggregated
// discovery: every group and resource in one answer) until every served version of every CRD
// in objs lists its resource.
func waitDiscovered(ctx context.Context, dc *discovery.DiscoveryClient, objs []*unstructured.Unstructured) error {
	want := map[schema.GroupVersion][]string{}
	for _, u := range objs {
		plural, _, _ := unstructured.NestedString(u.Object, "spec", "names", "plural")
		for _, gv := range servedVersions(u) {
			want[gv] = append(want[gv], plural)
		}
	}
	for {
		missing, err := undiscovered(dc, want)
		if err == nil && missing == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("CRDs not served by discovery: %w (missing %s; last error: %w)", ctx.Err(), missing, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// servedVersions returns the group versions the CRD u serves.
func servedVersions(u *unstructured.Unstructured) []schema.GroupVersion {
	group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
	versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
	var out []schema.GroupVersion
	for _, v := range versions {
		m, _ := v.(map[string]any)
		name, _ := m["name"].(string)
		if served, _ := m["served"].(bool); served && name != "" {
			out = append(out, schema.GroupVersion{Group: group, Version: name})
		}
	}
	return out
}

// undiscovered returns the first wanted resource that discovery does not list ("" when none).
func undiscovered(dc *discovery.DiscoveryClient, want map[schema.GroupVersion][]string) (string, error) {
	_, resources, _, err := dc.GroupsAndMaybeResources()
	if err != nil {
		return "", err
	}
	for gv, plurals := range want {
		var listed []metav1.APIResource
		if resources != nil {
			if l := resources[gv]; l != nil {
				listed = l.APIResources
			}
		} else if l, err := dc.ServerResourcesForGroupVersion(gv.String()); err == nil {
			listed = l.APIResources // a server without aggregated discovery
		}
		for _, p := range plurals {
			if !slices.ContainsFunc(listed, func(r metav1.APIResource) bool { return r.Name == p }) {
				return gv.String() + " " + p, nil
			}
		}
	}
	return "", nil
}

// readCRDs decodes every CustomResourceDefinition document of *.yaml in crds, skipping other
// kinds.
func readCRDs(crds fs.FS) ([]*unstructured.Unstructured, error) {
	files, err := fs.Glob(crds, "*.yaml")
	if err != nil {
		return nil, fmt.Errorf("listing CRD manifests: %w", err)
	}
	var objs []*unstructured.Unstructured
	for _, f := range files {
		data, err := fs.ReadFile(crds, f)
		if err != nil {
			return nil, fmt.Errorf("reading CRDs: %w", err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, fmt.Errorf("decoding %s: %w", f, err)
			}
			if u.GetKind() == "CustomResourceDefinition" {
				objs = append(objs, u)
			}
		}
	}
	return objs, nil
}

// waitEstablished polls the CRD until its Established condition is True.
func waitEstablished(ctx context.Context, c client.Client, name string) error {
	for {
		var crd apiextensionsv1.CustomResourceDefinition
		err := c.Get(ctx, client.ObjectKey{Name: name}, &crd)
		if err == nil {
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("CRD %s not established: %w (last error: %w)", name, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// localConversion points the conversion webhook of u, if it has one, at
// https://127.0.0.1:port<path>; port 0 keeps the Service.
func localConversion(u *unstructured.Unstructured, port int) error {
	if port == 0 { // the operator runs in the cluster: its Service, as the CRD names it
		return nil
	}
	strategy, _, _ := unstructured.NestedString(u.Object, "spec", "conversion", "strategy")
	if strategy != string(apiextensionsv1.WebhookConverter) {
		return nil
	}
	path, found, err := unstructured.NestedString(u.Object, "spec", "conversion", "webhook", "clientConfig", "service", "path")
	if err != nil || !found {
		return fmt.Errorf("CRD %s: webhook conversion without a Service path", u.GetName())
	}
	url := "https://127.0.0.1:" + strconv.Itoa(port) + path
	return unstructured.SetNestedField(u.Object, map[string]any{"url": url}, "spec", "conversion", "webhook", "clientConfig")
}
