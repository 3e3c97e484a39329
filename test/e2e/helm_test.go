package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/kube"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/imagebuild/manifest"
	"github.com/dolphin-operator/dolphin/internal/localcluster"
	"github.com/dolphin-operator/dolphin/internal/realnode"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// TestHelmInstallUpgradeUninstall (issue 33): Dolphin installed the way a platform team
// installs it — the dolphin-crds and dolphin charts with Helm (its Go SDK, as the helm
// command runs it) onto the real node started without Dolphin — runs a 3-instance cluster
// made with the dolphin-cluster chart, with the database and account an application writes
// through. Upgrading the operator chart to another image tag replaces the
// operator's pods and restarts no database pod (same pods, containers, servers), and the
// upgraded operator still acts (a changed setting reaches every server). Uninstalling the
// three charts leaves the CRDs, the MySQLCluster, its account, database, pods and data in
// place; installing them again takes the cluster back into the releases, still without a
// restart. No acknowledged
// write is lost.
func TestHelmInstallUpgradeUninstall(t *testing.T) {
	if e2eNode() != nodeReal {
		t.Skip("the charts install Dolphin's image on the real node")
	}
	s := upStackOnWith(t, repoRoot(), nodeReal, "--no-dolphin")
	h := newHelm(t, s)
	images, err := manifest.Read(imagesDir())
	if err != nil {
		t.Fatal(err)
	}
	repo, tag, ok := strings.Cut(images.Dolphin.References[0], ":")
	if !ok {
		t.Fatalf("image %s has no tag", images.Dolphin.References[0])
	}
	operatorValues := func(tag string) map[string]any {
		return map[string]any{"image": map[string]any{"repository": repo, "tag": tag, "pullPolicy": "Never"}}
	}

	h.install("dolphin-crds", "dolphin-crds", operatorNS, nil)
	h.install("dolphin", "dolphin", operatorNS, operatorValues(tag))
	s.wantOperatorImage(repo + ":" + tag)
	t.Logf("helm install: dolphin-crds and dolphin (%s:%s) deployed, operator ready", repo, tag)

	// The cluster, its database and application account from the dolphin-cluster chart (the
	// account's password from a Secret of the application's).
	const name = "helm"
	if err := s.c.Create(s.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name + "-app-password"},
		StringData: map[string]string{"password": appPassword}}); err != nil {
		t.Fatal(err)
	}
	clusterValues := func(maxConnections int) map[string]any {
		return map[string]any{
			"spec": map[string]any{"instances": 3, "storage": map[string]any{"deletePolicy": "Delete"},
				"mysqlConfig": map[string]any{"innodb_buffer_pool_size": "32M", "max_connections": maxConnections}},
			"databases": []any{map[string]any{"name": "app"}},
			"users": []any{map[string]any{"name": appUser, "passwordSecretKeyRef": map[string]any{"name": name + "-app-password", "key": "password"},
				"grants": []any{map[string]any{"database": "app", "privileges": []any{"SELECT", "INSERT", "DELETE", "CREATE"}}}}},
		}
	}
	s.waitWebhookAnswers(name)
	h.install(name, "dolphin-cluster", s.ns, clusterValues(200))
	key := client.ObjectKey{Namespace: s.ns, Name: name}
	s.waitHealthy(key)
	s.waitApplied(&dolphinv1.MySQLDatabase{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name + "-app"}},
		&dolphinv1.MySQLUser{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name + "-app"}})
	s.appTable(name)
	w := s.startSteadyAppWriter(name)
	before := s.podStates(name, 3)

	// An upgrade to another tag of the image (the same build, tagged anew in containerd: a
	// registry would serve a release's new tag the same way).
	const upgradeTag = "e2e-upgrade"
	s.tagImage(repo+":"+tag, repo+":"+upgradeTag)
	h.upgrade("dolphin", "dolphin", operatorNS, operatorValues(upgradeTag))
	s.wantOperatorImage(repo + ":" + upgradeTag)
	s.waitWebhookAnswers(name)
	h.upgrade(name, "dolphin-cluster", s.ns, clusterValues(211)) // a setting changed as a Helm user changes it
	s.waitConfigApplied(key, "max_connections", "211")
	s.wantSamePods(name, before, "after helm upgrade")
	t.Logf("helm upgrade to %s: the operator's pods replaced, the upgraded operator applied max_connections=211, no database pod restarted", upgradeTag)

	h.uninstall(name, s.ns)
	// Helm removes the operator's RBAC with its Deployment: its pods, still ending, are refused
	// (a lease renewal) until they are gone.
	uninstalling := time.Now()
	h.uninstall("dolphin", operatorNS)
	h.uninstall("dolphin-crds", operatorNS)
	var crd apiextensionsv1.CustomResourceDefinition
	if err := s.c.Get(s.ctx, client.ObjectKey{Name: "mysqlclusters.mysql.dolphin.dev"}, &crd); err != nil {
		t.Fatalf("the MySQLCluster CRD after helm uninstall dolphin-crds: %v; want kept", err)
	}
	if err := s.c.Get(s.ctx, key, &dolphinv1.MySQLCluster{}); err != nil {
		t.Fatalf("the MySQLCluster after the charts were uninstalled: %v", err)
	}
	if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: s.ns, Name: name + "-app"}, &dolphinv1.MySQLUser{}); err != nil {
		t.Fatalf("the application's MySQLUser after the charts were uninstalled: %v", err)
	}
	var d appsv1.Deployment
	if err := s.c.Get(s.ctx, client.ObjectKey{Namespace: operatorNS, Name: "dolphin-operator"}, &d); !apierrors.IsNotFound(err) {
		t.Fatalf("the operator's Deployment after helm uninstall: %v; want gone", err)
	}
	testenv.Eventually(t, 120*time.Second, "the operator's pods gone", func() error {
		var pods corev1.PodList
		if err := s.c.List(s.ctx, &pods, client.InNamespace(operatorNS), client.MatchingLabels{"app.kubernetes.io/name": operatorAppName}); err != nil {
			return err
		}
		if n := len(pods.Items); n > 0 {
			return fmt.Errorf("%d operator pods", n)
		}
		return nil
	})
	s.refusalsExpected = append(s.refusalsExpected, refusalWindow{uninstalling, time.Now()})
	time.Sleep(10 * time.Second) // the application keeps writing with no operator
	s.wantSamePods(name, before, "after helm uninstall")
	t.Logf("helm uninstall of the three charts: CRDs, MySQLCluster, its account, database and pods left in place, the application still writing")

	h.install("dolphin-crds", "dolphin-crds", operatorNS, nil)
	h.install("dolphin", "dolphin", operatorNS, operatorValues(upgradeTag))
	s.waitWebhookAnswers(name)
	h.install(name, "dolphin-cluster", s.ns, clusterValues(211)) // takes the kept objects back into the release
	s.waitHealthy(key)
	h.upgrade(name, "dolphin-cluster", s.ns, clusterValues(212))
	s.waitConfigApplied(key, "max_connections", "212")
	s.wantSamePods(name, before, "after installing the charts again")
	w.finish()
	acked, failed := s.wantEveryAckedWrite(key, name, w)
	t.Logf("helm install again: the operator took the cluster back; %d writes acknowledged, %d failed, 0 lost, no database pod restarted", len(acked), failed)
}

// imagesDir is the folder of make images the stack imported.
func imagesDir() string {
	if d := os.Getenv("DOLPHIN_IMAGES"); d != "" {
		return d
	}
	return filepath.Join(localcluster.CacheDir(), "images")
}

// helmClient installs the charts under charts/ into the stack's cluster with Helm's SDK.
type helmClient struct {
	t     *testing.T
	flags *genericclioptions.ConfigFlags
}

func newHelm(t *testing.T, s *stack) *helmClient {
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = ptr.To(filepath.Join(s.dir, "kubeconfig"))
	return &helmClient{t: t, flags: flags}
}

// config is an action configuration for releases in ns (the namespace Helm stores them in).
func (h *helmClient) config(ns string) *action.Configuration {
	h.t.Helper()
	h.flags.Namespace = ptr.To(ns)
	cfg := action.NewConfiguration()
	if err := cfg.Init(h.flags, ns, "secret"); err != nil {
		h.t.Fatal(err)
	}
	return cfg
}

// install is `helm install NAME charts/CHART -n NS --create-namespace --wait`.
func (h *helmClient) install(name, chart, ns string, vals map[string]any) {
	h.t.Helper()
	ch, err := loader.LoadDir(filepath.Join(repoRoot(), "charts", chart))
	if err != nil {
		h.t.Fatal(err)
	}
	i := action.NewInstall(h.config(ns))
	i.ReleaseName, i.Namespace, i.CreateNamespace = name, ns, true
	i.WaitStrategy, i.Timeout = kube.StatusWatcherStrategy, 3*time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if _, err := i.RunWithContext(ctx, ch, vals); err != nil {
		h.t.Fatalf("helm install %s: %v", name, err)
	}
}

// upgrade is `helm upgrade NAME charts/CHART -n NS --wait`.
func (h *helmClient) upgrade(name, chart, ns string, vals map[string]any) {
	h.t.Helper()
	ch, err := loader.LoadDir(filepath.Join(repoRoot(), "charts", chart))
	if err != nil {
		h.t.Fatal(err)
	}
	u := action.NewUpgrade(h.config(ns))
	u.Namespace = ns
	u.WaitStrategy, u.Timeout = kube.StatusWatcherStrategy, 3*time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if _, err := u.RunWithContext(ctx, name, ch, vals); err != nil {
		h.t.Fatalf("helm upgrade %s: %v", name, err)
	}
}

// uninstall is `helm uninstall NAME -n NS --wait`.
func (h *helmClient) uninstall(name, ns string) {
	h.t.Helper()
	u := action.NewUninstall(h.config(ns))
	u.WaitStrategy, u.Timeout = kube.StatusWatcherStrategy, 3*time.Minute
	if _, err := u.Run(name); err != nil {
		h.t.Fatalf("helm uninstall %s: %v", name, err)
	}
}

// tagImage gives an image in the node's containerd another name (ctr images tag).
func (s *stack) tagImage(from, to string) {
	s.t.Helper()
	dir := filepath.Join(s.dir, "realnode")
	opts, err := realnode.LoadOptions(dir)
	if err != nil {
		s.t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(opts.BinDir, "ctr"), "--address", realnode.NewLayout(dir).ContainerdSocket(),
		"--namespace", "k8s.io", "images", "tag", "--force", from, to).CombinedOutput()
	if err != nil {
		s.t.Fatalf("ctr images tag %s %s: %v: %s", from, to, err, out)
	}
}

// wantOperatorImage waits until every pod of the operator's Deployment runs image, ready.
func (s *stack) wantOperatorImage(image string) {
	s.t.Helper()
	testenv.Eventually(s.t, 120*time.Second, "the operator's pods on "+image, func() error {
		var pods corev1.PodList
		if err := s.c.List(s.ctx, &pods, client.InNamespace(operatorNS), client.MatchingLabels{"app.kubernetes.io/name": operatorAppName}); err != nil {
			return err
		}
		if len(pods.Items) != 2 {
			return fmt.Errorf("%d operator pods, want 2", len(pods.Items))
		}
		var errs []error
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || p.Spec.Containers[0].Image != image || !podReady(&p) {
				errs = append(errs, fmt.Errorf("%s: image %s, ready %v", p.Name, p.Spec.Containers[0].Image, podReady(&p)))
			}
		}
		return errors.Join(errs...)
	})
}

// waitWebhookAnswers waits until the admission webhook admits a MySQLCluster (a server-side
// dry run): after an install or upgrade, it refuses (failurePolicy Fail) until
// kube-proxy sends its Service to a ready operator pod, as a user's kubectl would see.
func (s *stack) waitWebhookAnswers(name string) {
	s.t.Helper()
	probe := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name + "-probe"}, Spec: dolphinv1.MySQLClusterSpec{Instances: 1}}
	testenv.Eventually(s.t, 60*time.Second, "the admission webhook answers", func() error {
		return s.c.Create(s.ctx, probe.DeepCopy(), client.DryRunAll)
	})
}

// wantSamePods fails the test when a database pod of the cluster was replaced or restarted,
// or its server is another process, since before.
func (s *stack) wantSamePods(cluster string, before map[string]podState, when string) {
	s.t.Helper()
	now := s.podStates(cluster, len(before))
	for name, b := range before {
		if now[name] != b {
			s.t.Errorf("%s %s: pod %+v, was %+v: a database pod restarted", when, name, now[name], b)
		}
	}
}

func podReady(p *corev1.Pod) bool { return podCondition(p, corev1.PodReady) }
