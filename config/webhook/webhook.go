// Package webhook embeds Dolphin's admission webhook manifests (manifests.yaml), so that
// `dolphin local up` registers the same webhooks a real install does, pointed at the operator
// on the host.
package webhook

import _ "embed"

// Manifests is config/webhook/manifests.yaml: the webhook Service and the
// ValidatingWebhookConfiguration.
//
//go:embed manifests.yaml
var Manifests []byte
