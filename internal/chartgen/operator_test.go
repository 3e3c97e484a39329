package chartgen

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// valuesFiles are a chart's test values (<chart>/ci), by file name, and the chart's defaults
// under "default".
func valuesFiles(t *testing.T, chart string) map[string]map[string]any {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, chart, "ci", "*-values.yaml"))
	if err != nil || len(files) < 2 {
		t.Fatalf("%d values files in %s/ci (%v), want at least 2", len(files), chart, err)
	}
	out := map[string]map[string]any{"default": {}}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		vals := map[string]any{}
		if err := yaml.Unmarshal(b, &vals); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[filepath.Base(f)] = vals
	}
	return out
}

// Helm's lint passes for the defaults and every test values file, and values.schema.json
// refuses what would otherwise install something else than the user meant.
func TestOperatorChartLints(t *testing.T) {
	dir := filepath.Join(root, OperatorChart)
	for name, vals := range valuesFiles(t, OperatorChart) {
		if l := lint.RunAll(dir, vals, "dolphin-system"); l.HighestSeverity >= support.WarningSev {
			for _, m := range l.Messages {
				t.Errorf("%s: helm lint: %s", name, m)
			}
		}
	}
	for _, bad := range []struct {
		what string
		vals map[string]any
	}{
		{"an unknown scope", map[string]any{"scope": "Everywhere"}},
		{"a misspelt key", map[string]any{"replica": 3}},
		{"no replica", map[string]any{"replicas": 0}},
		{"an unknown certificate mode", map[string]any{"webhook": map[string]any{"certificates": "Vault"}}},
		{"an argument that is no flag", map[string]any{"extraArgs": []any{"sql-resync-interval=5m"}}},
		{"a malformed digest", map[string]any{"image": map[string]any{"digest": "latest"}}},
		{"a log level the operator does not know", map[string]any{"logLevel": "verbose"}},
		{"a reader without namespace", map[string]any{"metrics": map[string]any{"readers": []any{map[string]any{"name": "prometheus"}}}}},
	} {
		if l := lint.RunAll(dir, bad.vals, "dolphin-system"); l.HighestSeverity < support.ErrorSev {
			t.Errorf("helm lint took %s (%v): the schema must refuse it", bad.what, bad.vals)
		}
	}
}

// objectsByKind indexes rendered objects by "Kind/name".
func objectsByKind(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	out := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		out[o.GetKind()+"/"+o.GetName()] = o
	}
	return out
}

// as converts a rendered object to its type, failing the test when it is missing or does not fit.
func as[T any](t *testing.T, objs map[string]*unstructured.Unstructured, key string) *T {
	t.Helper()
	u, ok := objs[key]
	if !ok {
		keys := make([]string, 0, len(objs))
		for k := range objs {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		t.Fatalf("no %s rendered; rendered: %s", key, strings.Join(keys, ", "))
	}
	var out T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &out, true); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return &out
}

// readObject reads the object of kind in a file of config/.
func readObject[T any](t *testing.T, file, kind string) *T {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var probe struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &probe); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if probe.Kind == kind {
			var out T
			if err := yaml.UnmarshalStrict([]byte(doc), &out); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			return &out
		}
	}
	t.Fatalf("no %s in %s", kind, file)
	return nil
}

// container is the operator's container of a rendered Deployment.
func container(t *testing.T, d *appsv1.Deployment) (args []string, image string) {
	t.Helper()
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want the operator's", len(d.Spec.Template.Spec.Containers))
	}
	c := d.Spec.Template.Spec.Containers[0]
	return c.Args, c.Image
}

// Released as "dolphin" in dolphin-system, the chart installs what config/default does: the
// same names, RBAC rules, webhooks and operator container (its arguments a superset of
// config/manager's); scoped to a namespace, what config/namespaced does.
func TestOperatorChartInstallsWhatConfigDoes(t *testing.T) {
	dir := filepath.Join(root, OperatorChart)
	rel, list := renderChart(t, dir, "dolphin", "dolphin-system", nil)
	objs := objectsByKind(list)
	checkReleaseSize(t, rel)

	role := as[rbacv1.ClusterRole](t, objs, "ClusterRole/dolphin-operator")
	if want := readObject[rbacv1.ClusterRole](t, "config/rbac/role.yaml", "ClusterRole"); !equality.Semantic.DeepEqual(role.Rules, want.Rules) {
		t.Errorf("the chart's ClusterRole rules differ from config/rbac/role.yaml's")
	}
	as[rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding/dolphin-operator")
	reader := as[rbacv1.ClusterRole](t, objs, "ClusterRole/dolphin-metrics-reader")
	if want := readObject[rbacv1.ClusterRole](t, "config/rbac/metrics_reader_role.yaml", "ClusterRole"); !equality.Semantic.DeepEqual(reader.Rules, want.Rules) {
		t.Errorf("the chart's metrics reader role differs from config/rbac's")
	}
	hooks := as[admissionregistrationv1.ValidatingWebhookConfiguration](t, objs, "ValidatingWebhookConfiguration/dolphin-validating-webhooks")
	wantHooks := readObject[admissionregistrationv1.ValidatingWebhookConfiguration](t, "config/webhook/manifests.yaml", "ValidatingWebhookConfiguration")
	if !equality.Semantic.DeepEqual(hooks.Webhooks, wantHooks.Webhooks) {
		t.Errorf("the chart's webhooks differ from config/webhook's:\n%v\n%v", hooks.Webhooks, wantHooks.Webhooks)
	}
	as[corev1.Service](t, objs, "Service/dolphin-webhook")
	d := as[appsv1.Deployment](t, objs, "Deployment/dolphin-operator")
	wantD := readObject[appsv1.Deployment](t, "config/manager/manager.yaml", "Deployment")
	args, image := container(t, d)
	wantArgs, _ := container(t, wantD)
	for _, a := range wantArgs {
		if strings.HasPrefix(a, "--agent-image=") {
			a = "--agent-image=" + image // the chart's image, not config's placeholder
		}
		if !slices.Contains(args, a) {
			t.Errorf("the chart's operator lacks config/manager's argument %s (has %v)", a, args)
		}
	}
	if image != "ghcr.io/dolphin-operator/dolphin:"+rel.Chart.Metadata.AppVersion {
		t.Errorf("image %s, want the chart's appVersion", image)
	}
	got, want := d.Spec.Template.Spec.Containers[0], wantD.Spec.Template.Spec.Containers[0]
	if !equality.Semantic.DeepEqual(got.SecurityContext, want.SecurityContext) || !equality.Semantic.DeepEqual(got.Resources, want.Resources) ||
		!equality.Semantic.DeepEqual(d.Spec.Template.Spec.SecurityContext, wantD.Spec.Template.Spec.SecurityContext) ||
		!equality.Semantic.DeepEqual(got.Command, want.Command) || *d.Spec.Replicas != *wantD.Spec.Replicas {
		t.Errorf("the chart's Deployment differs from config/manager's in command, replicas, resources or security contexts")
	}

	// One namespace, as config/namespaced installs it in namespace "dolphin".
	_, list = renderChart(t, dir, "dolphin", "dolphin", map[string]any{"scope": "Namespace"})
	objs = objectsByKind(list)
	r := as[rbacv1.Role](t, objs, "Role/dolphin-operator")
	if want := readObject[rbacv1.Role](t, "config/namespaced/role.yaml", "Role"); !equality.Semantic.DeepEqual(r.Rules, want.Rules) {
		t.Errorf("the chart's Role rules differ from config/namespaced/role.yaml's")
	}
	cr := as[rbacv1.ClusterRole](t, objs, "ClusterRole/dolphin-operator-dolphin")
	if want := readObject[rbacv1.ClusterRole](t, "config/namespaced/cluster_role.yaml", "ClusterRole"); !equality.Semantic.DeepEqual(cr.Rules, want.Rules) {
		t.Errorf("the chart's namespaced ClusterRole rules differ from config/namespaced/cluster_role.yaml's:\n%v\n%v", cr.Rules, want.Rules)
	}
	if _, ok := objs["ClusterRole/dolphin-operator"]; ok {
		t.Error("a namespaced install grants the cluster-wide ClusterRole")
	}
	hooks = as[admissionregistrationv1.ValidatingWebhookConfiguration](t, objs, "ValidatingWebhookConfiguration/dolphin-validating-webhooks-dolphin")
	for _, w := range hooks.Webhooks {
		if w.NamespaceSelector == nil || w.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "dolphin" {
			t.Errorf("webhook %s sees namespaces %v, want only dolphin", w.Name, w.NamespaceSelector)
		}
	}
	args, _ = container(t, as[appsv1.Deployment](t, objs, "Deployment/dolphin-operator"))
	for _, a := range []string{"--watch-namespace=dolphin", "--leader-election-namespace=dolphin", "--webhook-configuration=dolphin-validating-webhooks-dolphin"} {
		if !slices.Contains(args, a) {
			t.Errorf("a namespaced operator lacks %s (has %v)", a, args)
		}
	}
}

// Each test values file renders what it asks for, and nothing it did not.
func TestOperatorChartValuesFiles(t *testing.T) {
	dir := filepath.Join(root, OperatorChart)
	files := valuesFiles(t, OperatorChart)
	render := func(name string) (map[string]*unstructured.Unstructured, []string) {
		t.Helper()
		_, list := renderChart(t, dir, "dolphin", "db-ops", files[name])
		objs := objectsByKind(list)
		d := as[appsv1.Deployment](t, objs, "Deployment/"+map[bool]string{true: "db-operator-operator", false: "dolphin-operator"}[name == "single-insecure-values.yaml"])
		args, _ := container(t, d)
		return objs, args
	}
	has := func(what string, objs map[string]*unstructured.Unstructured, keys ...string) {
		t.Helper()
		for _, k := range keys {
			if _, ok := objs[k]; !ok {
				t.Errorf("%s: no %s rendered", what, k)
			}
		}
	}
	hasNot := func(what string, objs map[string]*unstructured.Unstructured, keys ...string) {
		t.Helper()
		for _, k := range keys {
			if _, ok := objs[k]; ok {
				t.Errorf("%s: %s rendered, not asked for", what, k)
			}
		}
	}
	argsHave := func(what string, args []string, want ...string) {
		t.Helper()
		for _, a := range want {
			if !slices.Contains(args, a) {
				t.Errorf("%s: the operator lacks %s (has %v)", what, a, args)
			}
		}
	}

	objs, args := render("default")
	has("defaults", objs, "PodDisruptionBudget/dolphin-operator", "Service/dolphin-metrics", "ClusterRole/dolphin-metrics-reader", "ServiceAccount/dolphin-operator")
	hasNot("defaults", objs, "ServiceMonitor/dolphin-operator", "PodMonitor/dolphin-operator", "Certificate/dolphin-webhook-cert", "ClusterRoleBinding/dolphin-metrics-reader")
	argsHave("defaults", args, "--leader-elect=true", "--metrics-secure=true", "--webhook-cert-secret=dolphin-webhook-cert",
		"--webhook-dns-names=dolphin-webhook.db-ops.svc,dolphin-webhook.db-ops.svc.cluster.local")

	objs, args = render("cert-manager-values.yaml")
	cert := objs["Certificate/dolphin-webhook-cert"]
	if cert == nil {
		t.Fatal("cert-manager: no Certificate rendered")
	}
	if ref, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "name"); ref != "platform-ca" {
		t.Errorf("cert-manager: the Certificate is issued by %q, want the ClusterIssuer of the values", ref)
	}
	hasNot("cert-manager with an issuer", objs, "Issuer/dolphin-selfsigned")
	argsHave("cert-manager", args, "--webhook-cert-dir=/etc/dolphin/webhook-cert")
	if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--webhook-cert-secret") }) {
		t.Error("cert-manager: the operator is also told to issue its own certificate")
	}
	if got := objs["ValidatingWebhookConfiguration/dolphin-validating-webhooks"].GetAnnotations()["cert-manager.io/inject-ca-from"]; got != "db-ops/dolphin-webhook-cert" {
		t.Errorf("cert-manager: the webhooks' CA comes from %q, want db-ops/dolphin-webhook-cert", got)
	}

	objs, _ = render("monitoring-values.yaml")
	has("monitoring", objs, "ServiceMonitor/dolphin-operator", "PodMonitor/dolphin-operator", "Issuer/dolphin-selfsigned",
		"ServiceAccount/dolphin-metrics-scraper", "Secret/dolphin-metrics-scraper", "ClusterRoleBinding/dolphin-metrics-reader")
	binding := as[rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding/dolphin-metrics-reader")
	if len(binding.Subjects) != 2 || binding.Subjects[0].Name != "prometheus-k8s" || binding.Subjects[1].Name != "dolphin-metrics-scraper" {
		t.Errorf("monitoring: the metrics reader is bound to %v, want the listed reader and the chart's scraper", binding.Subjects)
	}
	eps, _, _ := unstructured.NestedSlice(objs["ServiceMonitor/dolphin-operator"].Object, "spec", "endpoints")
	if len(eps) != 1 || eps[0].(map[string]any)["scheme"] != "https" || eps[0].(map[string]any)["interval"] != "15s" || eps[0].(map[string]any)["honorLabels"] != true {
		t.Errorf("monitoring: ServiceMonitor endpoints %v, want one over https every 15s keeping the metrics' namespace labels", eps)
	}
	pms, _, _ := unstructured.NestedSlice(objs["PodMonitor/dolphin-operator"].Object, "spec", "podMetricsEndpoints")
	if len(pms) != 1 || pms[0].(map[string]any)["honorLabels"] != true {
		t.Errorf("monitoring: PodMonitor endpoints %v, want honorLabels (the alerts select the clusters' namespace)", pms)
	}
	d := as[appsv1.Deployment](t, objs, "Deployment/dolphin-operator")
	if img := d.Spec.Template.Spec.Containers[0].Image; !strings.HasSuffix(img, "@sha256:943322e94ccdea6ba033ac100eb8879f90cf90811c9f39fdc4db7aa63184246c") {
		t.Errorf("monitoring: image %s, want the digest", img)
	}
	if d.Spec.Template.Spec.PriorityClassName != "system-cluster-critical" || len(d.Spec.Template.Spec.Tolerations) != 1 ||
		len(d.Spec.Template.Spec.TopologySpreadConstraints) != 1 || d.Spec.Template.Spec.NodeSelector["node-role.kubernetes.io/infra"] != "" ||
		d.Spec.Template.Annotations["example.com/team"] != "databases" || d.Spec.Template.Spec.Containers[0].Env[0].Name != "GOMEMLIMIT" {
		t.Errorf("monitoring: placement, annotations or environment not as the values say: %+v", d.Spec.Template.Spec)
	}

	objs, args = render("single-insecure-values.yaml")
	hasNot("one replica", objs, "PodDisruptionBudget/db-operator-operator", "ServiceAccount/ops-robot", "ClusterRole/db-operator-metrics-reader")
	has("one replica", objs, "PodMonitor/db-operator-operator", "Service/db-operator-webhook")
	// Leader election stays on: an upgrade's rolling update runs the new pod beside the old.
	argsHave("one replica", args, "--leader-elect=true", "--metrics-secure=false", "--zap-log-level=debug")
	if sa := as[appsv1.Deployment](t, objs, "Deployment/db-operator-operator").Spec.Template.Spec.ServiceAccountName; sa != "ops-robot" {
		t.Errorf("one replica: ServiceAccount %s, want the existing ops-robot", sa)
	}
	pm, _, _ := unstructured.NestedSlice(objs["PodMonitor/db-operator-operator"].Object, "spec", "podMetricsEndpoints")
	if len(pm) != 1 || pm[0].(map[string]any)["scheme"] != "http" || pm[0].(map[string]any)["authorization"] != nil {
		t.Errorf("one replica: PodMonitor endpoints %v, want plain http without a token", pm)
	}
}
