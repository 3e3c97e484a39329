package localcluster

import (
	"strings"
	"testing"

	webhookmanifests "github.com/dolphin-operator/dolphin/config/webhook"
)

// The local webhooks are the shipped ones, each pointed at the operator on this host at its
// own path, with the failure policies and match conditions unchanged.
func TestLocalWebhooks(t *testing.T) {
	cfg, err := LocalWebhooks(webhookmanifests.Manifests, 19443)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Name != "dolphin-validating-webhooks" || len(cfg.Webhooks) < 3 {
		t.Fatalf("configuration %s with %d webhooks", cfg.Name, len(cfg.Webhooks))
	}
	for _, w := range cfg.Webhooks {
		cc := w.ClientConfig
		if cc.Service != nil || cc.URL == nil || !strings.HasPrefix(*cc.URL, "https://127.0.0.1:19443/validate-") {
			t.Errorf("%s: client config %+v", w.Name, cc)
		}
		if w.FailurePolicy == nil || w.SideEffects == nil {
			t.Errorf("%s: failure policy or side effects lost", w.Name)
		}
	}
}
