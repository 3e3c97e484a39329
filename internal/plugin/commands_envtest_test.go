package plugin

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/testenv"
)

// pluginEnv is a real API server with one cluster "db" in namespace "shop" (its status as
// an operator would have written it), and a way to run `kubectl dolphin` against it.
type pluginEnv struct {
	t          *testing.T
	c          client.Client
	kubeconfig string
}

func startPluginEnv(t *testing.T) *pluginEnv {
	t.Helper()
	env := testenv.StartForTest(t)
	s, err := scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, ns := range []string{"shop", "dolphin-system"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	mc := healthyCluster()
	status := mc.Status
	if err := c.Create(ctx, mc); err != nil {
		t.Fatal(err)
	}
	mc.Status = status
	if err := c.Status().Update(ctx, mc); err != nil {
		t.Fatal(err)
	}
	return &pluginEnv{t: t, c: c, kubeconfig: testenv.AdminKubeconfig(t, env.Environment)}
}

// run runs `kubectl dolphin -n shop args…` and returns what it printed and its error.
func (p *pluginEnv) run(args ...string) (string, error) {
	p.t.Helper()
	root := NewRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"--kubeconfig", p.kubeconfig, "-n", "shop"}, args...))
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func (p *pluginEnv) mustRun(args ...string) string {
	p.t.Helper()
	out, err := p.run(args...)
	if err != nil {
		p.t.Fatalf("kubectl dolphin %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (p *pluginEnv) cluster() *dolphinv1.MySQLCluster {
	p.t.Helper()
	var mc dolphinv1.MySQLCluster
	if err := p.c.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: "db"}, &mc); err != nil {
		p.t.Fatal(err)
	}
	return &mc
}

// The requests `kubectl dolphin` makes land on the MySQLCluster as the annotations and fields
// Dolphin acts on, and what cannot be acted on is refused with the reason.
func TestEnvtestPluginRequests(t *testing.T) {
	p := startPluginEnv(t)

	if out := p.mustRun("status", "db"); !strings.Contains(out, "Cluster shop/db: Running, 3/3 ready") || !strings.Contains(out, "db-1      replica  yes") {
		t.Errorf("status:\n%s", out)
	}

	p.mustRun("switchover", "db", "--to", "db-2")
	if got := p.cluster().Annotations[dolphinv1.SwitchoverAnnotation]; got != "db-2" {
		t.Errorf("switchover --to db-2: annotation %q", got)
	}
	p.mustRun("switchover", "db")
	if got := p.cluster().Annotations[dolphinv1.SwitchoverAnnotation]; got != "auto" {
		t.Errorf("switchover: annotation %q, want auto", got)
	}
	for _, bad := range [][]string{{"switchover", "db", "--to", "db-0"}, {"switchover", "db", "--to", "db-7"}, {"switchover", "nosuch"}} {
		if out, err := p.run(bad...); err == nil {
			t.Errorf("%v: accepted\n%s", bad, out)
		}
	}

	// A cluster that follows no server has nothing to cut over.
	if _, err := p.run("cutover", "db"); err == nil || !strings.Contains(err.Error(), "does not follow a server") {
		t.Errorf("cutover of a cluster that follows no server: %v, want refused", err)
	}
	if p.cluster().Annotations[dolphinv1.CutoverAnnotation] != "" {
		t.Error("a refused cutover left its annotation")
	}

	if _, err := p.run("accept-loss", "db", "--instance", "db-0"); err == nil || !strings.Contains(err.Error(), "no failover from") {
		t.Errorf("accept-loss with no failover in progress: %v", err)
	}
	if p.cluster().Annotations[dolphinv1.FailoverAcceptLossAnnotation] != "" {
		t.Error("accept-loss annotated although refused")
	}
	mc := p.cluster()
	mc.Status.Topology.FailoverInProgress = &dolphinv1.FailoverProgress{From: "db-0"}
	mc.Status.Topology.ErrantInstances = []string{"db-2"}
	if err := p.c.Status().Update(context.Background(), mc); err != nil {
		t.Fatal(err)
	}
	p.mustRun("accept-loss", "db", "--instance", "db-0")
	if got := p.cluster().Annotations[dolphinv1.FailoverAcceptLossAnnotation]; got != "db-0" {
		t.Errorf("accept-loss: annotation %q", got)
	}

	for _, bad := range []string{"db-0", "db-9"} { // the primary, no instance
		if _, err := p.run("reclone", "db", "--instance", bad); err == nil {
			t.Errorf("reclone --instance %s: accepted", bad)
		}
	}
	p.mustRun("reclone", "db", "--instance", "db-2")
	p.mustRun("reclone", "db", "--manual")
	a := p.cluster().Annotations
	if a[dolphinv1.RecloneApprovedAnnotation] != "db-2" || a[dolphinv1.RecloneAnnotation] != "manual" {
		t.Errorf("reclone: annotations %v", a)
	}
	p.mustRun("reclone", "db", "--auto")
	if _, ok := p.cluster().Annotations[dolphinv1.RecloneAnnotation]; ok {
		t.Error("reclone --auto left the manual annotation")
	}

	p.mustRun("pause", "db")
	if !p.cluster().Spec.Paused {
		t.Error("pause: spec.paused is false")
	}
	// A switchover would wait, unannounced, until someone resumes: refused while paused.
	if _, err := p.run("switchover", "db", "--to", "db-1"); err == nil || !strings.Contains(err.Error(), "paused") {
		t.Errorf("switchover of a paused cluster: %v, want refused", err)
	}
	// …and resuming says when a request was left waiting (the one made above, before pause).
	if out := p.mustRun("resume", "db"); !strings.Contains(out, "a switchover request") {
		t.Errorf("resume with a switchover request waiting:\n%s", out)
	}
	if p.cluster().Spec.Paused {
		t.Error("resume: spec.paused is true")
	}
}

// Credentials, backups, restore manifests, the version and the support bundle read and write
// what they say.
func TestEnvtestPluginReadsAndWrites(t *testing.T) {
	p := startPluginEnv(t)
	ctx := context.Background()
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db-credentials"}, StringData: map[string]string{"root-password": "r00t-secret"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "mysqluser-db-app"}, StringData: map[string]string{"password": "app-secret"}},
		&dolphinv1.MySQLUser{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db-app"}, Spec: dolphinv1.MySQLUserSpec{Cluster: "db", Name: "app"}},
		&dolphinv1.MySQLUser{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "other-app"}, Spec: dolphinv1.MySQLUserSpec{Cluster: "other", Name: "app"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db-0",
			Labels: map[string]string{"app.kubernetes.io/instance": "db", "app.kubernetes.io/name": "mysql", "app.kubernetes.io/managed-by": "dolphin"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "mysqld", Image: "mariadb"}}}},
		// Another application's pod whose name starts with the cluster's: not the cluster's.
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db-analytics-0", Labels: map[string]string{"app.kubernetes.io/instance": "db-analytics"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db-analytics-token"}, StringData: map[string]string{"token": "t0ken"}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "dolphin-system", Name: "dolphin-operator", Labels: map[string]string{"app.kubernetes.io/name": "dolphin-operator"}},
			Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"a": "b"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "operator", Image: "ghcr.io/dolphin-operator/dolphin:v0.9.1"}}}}}},
	} {
		if err := p.c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	out := p.mustRun("credentials", "db")
	if !regexp.MustCompile(`(?m)^app@%\s+db-app\s+Secret mysqluser-db-app, key password$`).MatchString(out) || strings.Contains(out, "other-app") || strings.Contains(out, "app-secret") {
		t.Errorf("credentials list (accounts of db, no password):\n%s", out)
	}
	if out := p.mustRun("credentials", "db", "app"); !strings.Contains(out, "user: app\npassword: app-secret\nhost: db-primary.shop.svc\nport: 3306") {
		t.Errorf("credentials db app:\n%s", out)
	}
	if out := p.mustRun("credentials", "db", "--root"); !strings.Contains(out, "password: r00t-secret") {
		t.Errorf("credentials --root:\n%s", out)
	}
	if _, err := p.run("credentials", "db", "nobody"); err == nil {
		t.Error("credentials of an account that does not exist: no error")
	}

	out = p.mustRun("backup", "create", "db")
	var backups dolphinv1.MySQLBackupList
	if err := p.c.List(ctx, &backups, client.InNamespace("shop")); err != nil || len(backups.Items) != 1 || backups.Items[0].Spec.Cluster != "db" {
		t.Fatalf("backup create (%s): %v %+v", out, err, backups.Items)
	}
	if out := p.mustRun("backup", "list", "db"); !strings.Contains(out, backups.Items[0].Name) {
		t.Errorf("backup list:\n%s", out)
	}

	out = p.mustRun("restore", "db", "--name", "db-restored", "--to-time", "2026-12-06T07:00:00Z")
	var restored dolphinv1.MySQLCluster
	if err := yaml.UnmarshalStrict([]byte(out), &restored); err != nil {
		t.Fatalf("restore printed no manifest: %v\n%s", err, out)
	}
	if strings.Contains(out, "status:") || strings.Contains(out, "creationTimestamp") {
		t.Errorf("restore manifest carries what the API server fills in:\n%s", out)
	}
	restored.Namespace = "shop"
	if err := p.c.Create(ctx, &restored, client.DryRunAll); err != nil {
		t.Errorf("the API server refuses the restore manifest: %v\n%s", err, out)
	}

	if out := p.mustRun("version"); !strings.Contains(out, "operator v0.9.1 in dolphin-system/dolphin-operator") || !strings.Contains(out, "warning: plugin dev and operator v0.9.1") {
		t.Errorf("version:\n%s", out)
	}

	file := filepath.Join(t.TempDir(), "report.tar.gz")
	p.mustRun("report", "db", "-o", file)
	files := readBundle(t, file)
	for _, want := range []string{"mysqlcluster.yaml", "mysqlbackups.yaml", "mysqlusers.yaml", "pods.yaml", "secrets.txt", "events.txt", "versions.txt", "operator/dolphin-system-dolphin-operator.yaml"} {
		if _, ok := files[want]; !ok {
			t.Errorf("the bundle lacks %s (has %v)", want, keys(files))
		}
	}
	for name, body := range files {
		if strings.Contains(body, "app-secret") || strings.Contains(body, "r00t-secret") {
			t.Errorf("%s of the bundle holds a password", name)
		}
	}
	if !strings.Contains(files["mysqlusers.yaml"], "db-app") || strings.Contains(files["mysqlusers.yaml"], "other-app") {
		t.Errorf("mysqlusers.yaml holds other clusters' accounts or not db's:\n%s", files["mysqlusers.yaml"])
	}
	if !strings.Contains(files["secrets.txt"], "mysqluser-db-app") || !strings.Contains(files["secrets.txt"], "db-credentials") || strings.Contains(files["secrets.txt"], "db-analytics") {
		t.Errorf("secrets.txt (the cluster's Secrets, by name only):\n%s", files["secrets.txt"])
	}
	if strings.Contains(files["pods.yaml"], "db-analytics") || !strings.Contains(files["pods.yaml"], "name: db-0") {
		t.Errorf("pods.yaml holds another application's pod, or not the cluster's:\n%s", files["pods.yaml"])
	}
}

// readBundle reads a support bundle's files as text.
func readBundle(t *testing.T, file string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, f := range testenv.ReadTarGz(t, file) {
		out[name] = string(f.Data)
	}
	return out
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// `kubectl dolphin cutover` asks the cutover of a cluster that follows a server, once.
func TestEnvtestPluginCutover(t *testing.T) {
	p := startPluginEnv(t)
	ctx := context.Background()
	mc := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "moving"},
		Spec: dolphinv1.MySQLClusterSpec{Instances: 2, Engine: dolphinv1.EngineSpec{Flavor: dolphinv1.FlavorMariaDB},
			Bootstrap: &dolphinv1.BootstrapSpec{External: &dolphinv1.ExternalSource{Host: "old-db.example", AccountSecretName: "old-db", Replicate: true}}}}
	if err := p.c.Create(ctx, mc); err != nil {
		t.Fatal(err)
	}
	if out := p.mustRun("verify-copy", "moving"); !strings.Contains(out, "comparison of moving with old-db.example requested") {
		t.Errorf("verify-copy:\n%s", out)
	}
	if _, err := p.run("verify-copy", "db"); err == nil || !strings.Contains(err.Error(), "does not follow a server") {
		t.Errorf("verify-copy of a cluster that follows no server: %v, want refused", err)
	}
	if out := p.mustRun("cutover", "moving"); !strings.Contains(out, "cutover of moving requested: writes move from old-db.example") {
		t.Errorf("cutover:\n%s", out)
	}
	if err := p.c.Get(ctx, client.ObjectKeyFromObject(mc), mc); err != nil || mc.Annotations[dolphinv1.CutoverAnnotation] == "" ||
		mc.Annotations[dolphinv1.VerifyExternalAnnotation] == "" {
		t.Fatalf("the cutover annotation: %v (%v)", mc.Annotations, err)
	}
	mc.Status.Topology = &dolphinv1.TopologyStatus{ExternalSource: &dolphinv1.ExternalReplication{Source: "old-db.example:3306",
		CutOver: &dolphinv1.CutoverRecord{Instance: "moving-0", At: metav1.Now(), Position: "0-9-100"}}}
	if err := p.c.Status().Update(ctx, mc); err != nil {
		t.Fatal(err)
	}
	if _, err := p.run("cutover", "moving"); err == nil || !strings.Contains(err.Error(), "cut over already, to moving-0") {
		t.Errorf("a second cutover: %v, want refused", err)
	}
}

// `kubectl dolphin fall-back` asks the fall back of a cut-over cluster that keeps a way back,
// and refuses one that keeps none, one not cut over, and one that fell back already.
func TestEnvtestPluginFallBack(t *testing.T) {
	p := startPluginEnv(t)
	ctx := context.Background()
	ext := &dolphinv1.ExternalSource{Host: "old-db.example", AccountSecretName: "old-db", Replicate: true,
		Fallback: &dolphinv1.ExternalFallback{PrimaryHost: "10.0.0.9"}}
	mc := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "moved"},
		Spec: dolphinv1.MySQLClusterSpec{Instances: 2, Engine: dolphinv1.EngineSpec{Flavor: dolphinv1.FlavorMariaDB},
			Bootstrap: &dolphinv1.BootstrapSpec{External: ext}}}
	if err := p.c.Create(ctx, mc); err != nil {
		t.Fatal(err)
	}
	if _, err := p.run("fall-back", "moved"); err == nil || !strings.Contains(err.Error(), "was not cut over") {
		t.Errorf("fall-back before the cutover: %v, want refused", err)
	}
	if _, err := p.run("fall-back", "db"); err == nil || !strings.Contains(err.Error(), "keeps no way back") {
		t.Errorf("fall-back of a cluster without a way back: %v, want refused", err)
	}
	mc.Status.Topology = &dolphinv1.TopologyStatus{ExternalSource: &dolphinv1.ExternalReplication{Source: "old-db.example:3306",
		CutOver: &dolphinv1.CutoverRecord{Instance: "moved-0", At: metav1.Now(), Position: "0-9-100"}}}
	if err := p.c.Status().Update(ctx, mc); err != nil {
		t.Fatal(err)
	}
	if out := p.mustRun("fall-back", "moved"); !strings.Contains(out, "fall back of moved requested: writes move back to old-db.example") {
		t.Errorf("fall-back:\n%s", out)
	}
	if err := p.c.Get(ctx, client.ObjectKeyFromObject(mc), mc); err != nil || mc.Annotations[dolphinv1.FallBackAnnotation] == "" {
		t.Fatalf("the fall back annotation: %v (%v)", mc.Annotations, err)
	}
	mc.Status.Topology.ExternalSource.FellBack = &dolphinv1.CutoverRecord{Instance: "old-db.example:3306", At: metav1.Now(), Position: "0-1000-7"}
	if err := p.c.Status().Update(ctx, mc); err != nil {
		t.Fatal(err)
	}
	if _, err := p.run("fall-back", "moved"); err == nil || !strings.Contains(err.Error(), "fell back already, to old-db.example:3306") {
		t.Errorf("a second fall back: %v, want refused", err)
	}
}
