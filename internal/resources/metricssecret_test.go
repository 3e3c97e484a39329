package resources

import (
	"bytes"
	"encoding/pem"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/dolphin-operator/dolphin/internal/pki"
)

// The metrics Secret holds the agents' current CA and, after a renewal, the one before it —
// kept through later reconciles, replaced at the next renewal.
func TestMetricsSecretKeepsThePreviousCAAcrossARenewal(t *testing.T) {
	newCA := func(name string) []byte {
		ca, _, err := pki.NewCA(name, time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return ca
	}
	first, second, third := newCA("first"), newCA("second"), newCA("third")
	agentSecret := func(ca []byte) *corev1.Secret {
		return &corev1.Secret{Data: map[string][]byte{AgentCAKey: ca, AgentMetricsTokenKey: []byte("tok")}}
	}
	cas := func(bundle []byte) [][]byte {
		var out [][]byte
		for rest := bundle; ; {
			b, next := pem.Decode(rest)
			if b == nil {
				return out
			}
			out = append(out, pem.EncodeToMemory(b))
			rest = next
		}
	}
	want := func(step string, data map[string][]byte, in ...[]byte) {
		t.Helper()
		got := cas(data[MetricsCAKey])
		if len(got) != len(in) || string(data[MetricsTokenKey]) != "tok" {
			t.Fatalf("%s: %d CAs, token %q; want %d", step, len(got), data[MetricsTokenKey], len(in))
		}
		for i := range in {
			if !bytes.Equal(bytes.TrimSpace(got[i]), bytes.TrimSpace(in[i])) {
				t.Errorf("%s: CA %d is not the expected one", step, i)
			}
		}
	}

	d := MetricsSecretData(agentSecret(first), nil)
	want("new", d, first)
	d = MetricsSecretData(agentSecret(first), d)
	want("unchanged", d, first)
	d = MetricsSecretData(agentSecret(second), d)
	want("renewed", d, second, first)
	d = MetricsSecretData(agentSecret(second), d)
	want("after the renewal", d, second, first)
	d = MetricsSecretData(agentSecret(third), d)
	want("renewed again", d, third, second)
}
