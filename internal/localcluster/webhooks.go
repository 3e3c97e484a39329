package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LocalWebhooks reads the ValidatingWebhookConfiguration of a real install (config/webhook's
// manifests) and points every webhook at https://127.0.0.1:port instead of the operator's
// Service: the local API server and the operator both run on this host.
func LocalWebhooks(manifests []byte, port int) (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifests), 4096)
	for {
		var cfg admissionregistrationv1.ValidatingWebhookConfiguration
		err := dec.Decode(&cfg)
		if errors.Is(err, io.EOF) {
			return nil, errors.New("no ValidatingWebhookConfiguration in the webhook manifests")
		}
		if err != nil {
			return nil, fmt.Errorf("reading the webhook manifests: %w", err)
		}
		if cfg.Kind != "ValidatingWebhookConfiguration" {
			continue
		}
		for i := range cfg.Webhooks {
			cc := &cfg.Webhooks[i].ClientConfig
			if cc.Service == nil || cc.Service.Path == nil {
				return nil, fmt.Errorf("webhook %s has no Service path", cfg.Webhooks[i].Name)
			}
			u := "https://127.0.0.1:" + strconv.Itoa(port) + *cc.Service.Path
			cc.URL, cc.Service = &u, nil
		}
		return &cfg, nil
	}
}

// EnsureWebhooks creates want through kubeconfig, or updates the existing configuration when
// its webhooks differ in anything but the CA bundle (which the operator writes: it is kept, so
// that an `up` with the operator already running does not leave the API server without it).
func EnsureWebhooks(ctx context.Context, kubeconfig string, want *admissionregistrationv1.ValidatingWebhookConfiguration) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("loading %s: %w", kubeconfig, err)
	}
	scheme := runtime.NewScheme()
	if err := admissionregistrationv1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("connecting to the API server: %w", err)
	}
	var have admissionregistrationv1.ValidatingWebhookConfiguration
	switch err := c.Get(ctx, client.ObjectKeyFromObject(want), &have); {
	case apierrors.IsNotFound(err):
		if err := c.Create(ctx, want.DeepCopy()); err != nil {
			return fmt.Errorf("creating ValidatingWebhookConfiguration %s: %w", want.Name, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("reading ValidatingWebhookConfiguration %s: %w", want.Name, err)
	}
	desired := want.DeepCopy()
	for i := range desired.Webhooks {
		for _, h := range have.Webhooks {
			if h.Name == desired.Webhooks[i].Name {
				desired.Webhooks[i].ClientConfig.CABundle = h.ClientConfig.CABundle
			}
		}
	}
	if equality.Semantic.DeepEqual(have.Webhooks, desired.Webhooks) && equality.Semantic.DeepEqual(have.Labels, desired.Labels) {
		return nil
	}
	have.Webhooks, have.Labels = desired.Webhooks, desired.Labels
	if err := c.Update(ctx, &have); err != nil {
		return fmt.Errorf("updating ValidatingWebhookConfiguration %s: %w", want.Name, err)
	}
	return nil
}
