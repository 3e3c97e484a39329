package operator_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/controller"
	"github.com/dolphin-operator/dolphin/internal/operator"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// kustomizeBuild builds a kustomization under config/ with the kubectl that
// hack/control-plane.sh builds next to kube-apiserver (KUBEBUILDER_ASSETS).
func kustomizeBuild(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	kubectl := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
	out, err := exec.Command(kubectl, "kustomize", filepath.Join("..", "..", dir)).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, ee.Stderr)
		}
		t.Fatalf("kubectl kustomize %s: %v", dir, err)
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("decoding the output of kubectl kustomize %s: %v", dir, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// TestEnvtestNamespacedInstall applies the RBAC of config/namespaced (built with kustomize)
// and runs the operator as its ServiceAccount with --watch-namespace: with only that Role and
// the small ClusterRole it takes its Lease, labels a Secret an earlier operator created
// without CredentialsLabel (instead of failing to re-create it), and brings up the cluster
// in its namespace, while it cannot even read Secrets elsewhere and leaves clusters there
// alone.
func TestEnvtestNamespacedInstall(t *testing.T) {
	env, admin := startEnvtest(t)
	ctx := context.Background()
	const ns = "dolphin"

	objs := kustomizeBuild(t, "config/namespaced")
	var deployment, hooks *unstructured.Unstructured
	for _, o := range objs {
		switch o.GetKind() {
		case "CustomResourceDefinition": // installed by envtest; the built one converts through this install
			if svc, _, _ := unstructured.NestedString(o.Object, "spec", "conversion", "webhook", "clientConfig", "service", "namespace"); o.GetName() == "mysqlclusters.mysql.dolphin.dev" && svc != ns {
				t.Errorf("the namespaced install's MySQLCluster CRD converts through a Service in namespace %q, want %q", svc, ns)
			}
		case "Deployment":
			deployment = o
		case "ValidatingWebhookConfiguration":
			hooks = o // created once the objects of an earlier operator are there (below)
		default:
			if err := admin.Create(ctx, o); err != nil {
				t.Fatalf("creating %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	}
	if deployment == nil || deployment.GetNamespace() != ns {
		t.Fatalf("config/namespaced builds no Deployment in namespace %s: %v", ns, deployment)
	}
	var dep appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(deployment.Object, &dep); err != nil {
		t.Fatal(err)
	}
	container := dep.Spec.Template.Spec.Containers[0]
	for _, arg := range []string{"--watch-namespace=$(POD_NAMESPACE)", "--leader-election-namespace=$(POD_NAMESPACE)",
		"--webhook-port=9443", "--webhook-configuration=dolphin-validating-webhooks-$(POD_NAMESPACE)"} {
		if !slices.Contains(container.Args, arg) {
			t.Errorf("the namespaced Deployment lacks %s: %v", arg, container.Args)
		}
	}
	if len(container.Env) == 0 || container.Env[0].Name != "POD_NAMESPACE" || container.Env[0].ValueFrom == nil ||
		container.Env[0].ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
		t.Errorf("the namespaced Deployment does not set POD_NAMESPACE from the downward API: %+v", container.Env)
	}

	// A cluster whose generated Secret an earlier operator created, without CredentialsLabel.
	legacy := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "legacy"}}
	if err := admin.Create(ctx, legacy); err != nil {
		t.Fatal(err)
	}
	old := resources.GeneratedCredentialsSecret(legacy, resources.NewPassword)
	old.Labels = resources.CommonLabels(legacy)
	if err := admin.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	// A cluster in another namespace, which this install must not touch.
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"}}); err != nil {
		t.Fatal(err)
	}
	other := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "elsewhere", Name: "other"}}
	if err := admin.Create(ctx, other); err != nil {
		t.Fatal(err)
	}

	// The install's own webhook configuration: named after the namespace, seeing only it.
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	if hooks == nil {
		t.Fatal("config/namespaced builds no ValidatingWebhookConfiguration")
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(hooks.Object, &vwc); err != nil {
		t.Fatal(err)
	}
	if vwc.Name != "dolphin-validating-webhooks-"+ns {
		t.Errorf("webhook configuration %s, want one named after the namespace", vwc.Name)
	}
	port := freePort(t)
	for i := range vwc.Webhooks {
		w := &vwc.Webhooks[i]
		if sel := w.NamespaceSelector; sel == nil || sel.MatchLabels["kubernetes.io/metadata.name"] != ns {
			t.Errorf("webhook %s sees namespaces %v, want only %s", w.Name, sel, ns)
		}
		if svc := w.ClientConfig.Service; svc == nil || svc.Namespace != ns || svc.Path == nil {
			t.Fatalf("webhook %s calls %+v, want the Service in %s", w.Name, svc, ns)
		}
		// The test's API server runs on this host: the operator, not the Service, answers.
		w.ClientConfig.URL = ptr.To("https://127.0.0.1:" + strconv.Itoa(port) + *w.ClientConfig.Service.Path)
		w.ClientConfig.Service = nil
	}
	if err := admin.Create(ctx, &vwc); err != nil {
		t.Fatal(err)
	}

	sa, err := env.AddUser(envtest.User{
		Name:   "system:serviceaccount:" + ns + ":dolphin-operator",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}, env.Config)
	if err != nil {
		t.Fatal(err)
	}
	scheme, err := operator.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	asOperator, err := client.New(sa.Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := asOperator.List(ctx, &corev1.SecretList{}, client.InNamespace("elsewhere")); !apierrors.IsForbidden(err) {
		t.Errorf("the namespaced operator listing Secrets in another namespace: %v, want Forbidden", err)
	}

	logs := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("operator logs:\n%s", logs)
		}
	})
	opts := operator.DefaultOptions()
	opts.RESTConfig = sa.Config()
	opts.WatchNamespace = ns
	opts.LeaderElectionNamespace = ns
	opts.MetricsBindAddress = "0"
	opts.HealthProbeBindAddress = "0"
	opts.GracefulShutdownTimeout = 10 * time.Second
	opts.Zap.Development = true
	opts.Zap.DestWriter = logs
	opts.SkipControllerNameValidation = true
	opts.WebhookPort, opts.WebhookHost, opts.WebhookIPs = port, "127.0.0.1", []string{"127.0.0.1"}
	opts.WebhookConfiguration = vwc.Name
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- operator.Run(runCtx, opts) }()

	eventually(t, 30*time.Second, "the legacy cluster brought up by the namespaced operator", func() (bool, error) {
		select {
		case err := <-done:
			t.Fatalf("Run returned early: %v", err)
		default:
		}
		var sts appsv1.StatefulSet
		if err := admin.Get(ctx, client.ObjectKeyFromObject(legacy), &sts); err != nil {
			return false, err
		}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(legacy), legacy); err != nil {
			return false, err
		}
		if legacy.Status.Phase != dolphinv1.PhasePending {
			return false, fmt.Errorf("phase %q, conditions %+v", legacy.Status.Phase, legacy.Status.Conditions)
		}
		return true, nil
	})
	var s corev1.Secret
	if err := admin.Get(ctx, client.ObjectKeyFromObject(old), &s); err != nil {
		t.Fatal(err)
	}
	if s.Labels[resources.CredentialsLabel] != "true" {
		t.Errorf("the earlier operator's Secret was not labelled: %v", s.Labels)
	}
	for _, k := range resources.CredentialKeys {
		if !bytes.Equal(s.Data[k], old.Data[k]) {
			t.Errorf("password %s of the existing Secret changed", k)
		}
	}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(other), other); err != nil {
		t.Fatal(err)
	}
	if controllerutil.ContainsFinalizer(other, controller.Finalizer) || other.Status.Phase != "" {
		t.Errorf("the namespaced operator touched a cluster in another namespace: %+v", other)
	}

	// Its webhooks answer for its namespace (the CA written into its configuration by the
	// operator with only the ClusterRole's resourceNames rule) and leave other namespaces alone.
	weakUser := func(namespace string) error {
		if err := admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "weak"},
			StringData: map[string]string{"password": "password123"}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		u := &dolphinv1.MySQLUser{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: "weak-"},
			Spec: dolphinv1.MySQLUserSpec{Cluster: "legacy", Name: "weak", PasswordSecretKeyRef: &dolphinv1.SecretKeyReference{Name: "weak"},
				Grants: []dolphinv1.Grant{{Privileges: []dolphinv1.Privilege{"SELECT"}, Database: "app"}}}}
		return admin.Create(ctx, u)
	}
	eventually(t, 30*time.Second, "a weak password refused by the namespaced install's webhook", func() (bool, error) {
		err := weakUser(ns)
		if err == nil {
			return false, errors.New("admitted")
		}
		return strings.Contains(err.Error(), "admission webhook") && strings.Contains(err.Error(), "the password is too weak"), err
	})
	if err := weakUser("elsewhere"); err != nil {
		t.Errorf("a MySQLUser in a namespace this install does not manage was refused: %v", err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v after cancellation, want nil", err)
		}
	case <-time.After(opts.GracefulShutdownTimeout + 5*time.Second):
		t.Fatal("Run did not return after cancellation")
	}
}
