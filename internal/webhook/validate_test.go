package webhook

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// A Secret change is checked for the keys it changes only: a cluster admitted before the
// rule with a weak operator password can still rotate its other passwords.
func TestSecretValidatorChecksChangedKeys(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = dolphinv1.AddToScheme(scheme)
	cluster := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "shop"},
		Spec: dolphinv1.MySQLClusterSpec{Credentials: dolphinv1.CredentialsSpec{SecretName: "creds"}}}
	v := SecretValidator{Client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(cluster).Build()}
	old := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "creds"}, Data: map[string][]byte{
		resources.OperatorPasswordKey: []byte("weak"), resources.MonitorPasswordKey: []byte("M0nitor-Secret-Long")}}
	rotated := old.DeepCopy()
	rotated.Data[resources.MonitorPasswordKey] = []byte("M0nitor-Secret-Longer-2")
	if _, err := v.ValidateUpdate(context.Background(), old, rotated); err != nil {
		t.Errorf("rotating the monitor password: %v (the weak operator password did not change)", err)
	}
	weakened := old.DeepCopy()
	weakened.Data[resources.MonitorPasswordKey] = []byte("monitor")
	_, err := v.ValidateUpdate(context.Background(), old, weakened)
	if err == nil || !strings.Contains(err.Error(), `MySQLCluster shop spec.credentials.secretName: key "monitor-password" of Secret "creds"`) {
		t.Errorf("a weak monitor password: %v, want rejected naming the key", err)
	}
	if err != nil && strings.Contains(err.Error(), "operator-password") {
		t.Errorf("the unchanged operator password was checked: %v", err)
	}
	// Another namespace than the one the operator manages is not checked.
	elsewhere := weakened.DeepCopy()
	elsewhere.Namespace = "other"
	if _, err := (SecretValidator{Client: v.Client, Namespace: "ns"}).ValidateUpdate(context.Background(), old, elsewhere); err != nil {
		t.Errorf("a Secret outside the watched namespace: %v", err)
	}
	labelled := old.DeepCopy()
	labelled.Labels = map[string]string{resources.CredentialsLabel: "true"}
	if _, err := v.ValidateUpdate(context.Background(), old, labelled); err != nil {
		t.Errorf("a label-only change: %v", err)
	}
}
