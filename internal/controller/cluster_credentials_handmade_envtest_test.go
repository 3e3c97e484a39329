package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestEnvtestHandMadeGeneratedSecretIsAdopted: a `<name>-credentials` Secret that someone
// created by hand before the cluster (without Dolphin's label, so outside the operator's
// cache) is labelled and used, never replaced, and its passwords become the current
// credentials generation.
func TestEnvtestHandMadeGeneratedSecretIsAdopted(t *testing.T) {
	needEnvtest(t)
	live := directClient(t, nil)
	ctx := context.Background()
	ns := newNamespace(t)
	data := map[string][]byte{}
	for _, k := range resources.CredentialKeys {
		data[k] = []byte("hand-made-" + k)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "made-credentials"}, Data: data}
	if err := live.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	startCachedManager(t)
	key := createCluster(t, live, ns, "made", dolphinv1.MySQLClusterSpec{})
	want := resources.CredentialsGeneration(data)
	testenv.Eventually(t, 30*time.Second, "hand-made Secret labelled and used", func() error {
		var s corev1.Secret
		if err := live.Get(ctx, client.ObjectKey{Namespace: ns, Name: "made-credentials"}, &s); err != nil {
			return err
		}
		if s.Labels[resources.CredentialsLabel] != "true" {
			return fmt.Errorf("not labelled: %v", s.Labels)
		}
		if string(s.Data[resources.OperatorPasswordKey]) != "hand-made-operator-password" {
			return fmt.Errorf("passwords replaced")
		}
		var h corev1.Secret
		if err := live.Get(ctx, client.ObjectKey{Namespace: ns, Name: "made-credentials-history"}, &h); err != nil {
			return err
		}
		if gens := resources.ReadCredentialHistory(&h).Generations; len(gens) == 0 || gens[0] != want {
			return fmt.Errorf("history generations %v, want %s first", gens, want)
		}
		c := getCluster(t, live, key)
		if c.Status.Phase == dolphinv1.PhaseFailed {
			return fmt.Errorf("cluster failed: %+v", c.Status.Conditions)
		}
		return nil
	})
}
