package resources

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// minimal is a cluster as a user writes it first: everything else defaulted.
func minimal() *dolphinv1.MySQLCluster {
	return Defaulted(&dolphinv1.MySQLCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "shop", UID: types.UID("0a1b2c3d-0000-4000-8000-000000000001")},
	})
}

// customised exercises every spec field a builder reads.
func customised() *dolphinv1.MySQLCluster {
	c := minimal()
	c.Name = "billing"
	s := &c.Spec
	s.Engine = dolphinv1.EngineSpec{Flavor: dolphinv1.FlavorMySQL, Version: "8.4.3", Image: "registry.example/mysql:8.4.3"}
	s.Instances = 5
	s.Storage = dolphinv1.StorageSpec{Size: ptr.To(resource.MustParse("50Gi")), StorageClassName: ptr.To("fast"), DeletePolicy: dolphinv1.VolumeDelete}
	s.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
	}
	s.MySQLConfig = map[string]dolphinv1.MySQLConfigValue{"innodb_buffer_pool_size": "512M", "max_connections": "500"}
	s.PrimaryService = dolphinv1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
		Annotations: map[string]string{"lb.example/internal": "true"}, Labels: map[string]string{"team": "billing"}}
	s.PodTemplate = dolphinv1.PodTemplateOverrides{
		Labels:            map[string]string{"team": "billing"},
		Annotations:       map[string]string{"example.com/scrape": "true"},
		NodeSelector:      map[string]string{"disk": "ssd"},
		PriorityClassName: "databases",
		Tolerations:       []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "db", Effect: corev1.TaintEffectNoSchedule}},
		Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a", "b"}}}}},
		}}},
		TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "zone", WhenUnsatisfiable: corev1.DoNotSchedule}},
	}
	return c
}

// golden compares v, rendered as YAML, with testdata/name.yaml (rewritten with -update).
func golden(t *testing.T, name string, v any) {
	t.Helper()
	got, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", name+".yaml")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `go test ./internal/resources -update` to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (review, then `go test ./internal/resources -update`):\n--- got\n%s", path, got)
	}
}

// restored is a cluster bootstrapped from a backup in a bucket with a private CA.
func restored() *dolphinv1.MySQLCluster {
	c := minimal()
	c.Name = "orders-copy"
	store := dolphinv1.BackupStore{S3: &dolphinv1.S3Store{Endpoint: "https://s3.example", Bucket: "backups", Prefix: "prod/",
		Region: "eu-west-1", ForcePathStyle: true, CredentialsSecret: "s3-creds", CASecret: "s3-ca", PartSize: ptr.To(resource.MustParse("32Mi"))}}
	c.Spec.Bootstrap = &dolphinv1.BootstrapSpec{Backup: &dolphinv1.BackupReference{Name: "nightly"}}
	c.Status.RestoredFrom = &dolphinv1.RestoreStatus{Backup: "nightly", Store: store, Path: "shop/orders/nightly-20261201T023000Z/", GTIDPosition: "0-1-42"}
	return c
}

// production is a cluster with the pod template a production team asks for: a private
// registry, its own service account (IRSA), extra environment for the server, resources
// on every container with requests equal to limits (Guaranteed QoS, a quota that requires
// limits), and the user, groups, seccomp profile and SELinux level its platform assigns.
func production() *dolphinv1.MySQLCluster {
	c := minimal()
	c.Name = "ledger"
	guaranteed := func(cpu, mem string) corev1.ResourceRequirements {
		l := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
		return corev1.ResourceRequirements{Requests: l, Limits: l}
	}
	c.Spec.Resources = guaranteed("2", "4Gi")
	c.Spec.PodTemplate = dolphinv1.PodTemplateOverrides{
		ImagePullSecrets:   []corev1.LocalObjectReference{{Name: "registry-creds"}},
		ImagePullPolicy:    corev1.PullIfNotPresent,
		ServiceAccountName: "ledger-db",
		Env: []corev1.EnvVar{{Name: "TZ", Value: "Europe/Berlin"},
			{Name: "LICENSE", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "plugin"}, Key: "license"}}}},
		AgentResources: ptr.To(guaranteed("100m", "128Mi")),
		Volumes: []dolphinv1.ExtraVolume{{Name: "plugins", ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "ledger-plugins"}}}, {Name: "scratch", EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		VolumeMounts: []corev1.VolumeMount{{Name: "plugins", MountPath: "/etc/mysql/plugins.d", ReadOnly: true}},
		Sidecars: []dolphinv1.ExtraContainer{{Name: "exporter", Image: "registry.example/mysqld-exporter:0.17",
			Args:      []string{"--mysqld.address=127.0.0.1:3306"},
			Ports:     []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9104}},
			Resources: ptr.To(guaranteed("50m", "64Mi"))}},
		InitContainers: []dolphinv1.ExtraContainer{{Name: "fetch-plugins", Image: "registry.example/fetch:1",
			Resources:    ptr.To(guaranteed("50m", "64Mi")),
			VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}}},
		SecurityContext: &dolphinv1.PodSecurity{RunAsUser: ptr.To[int64](1000650000), RunAsGroup: ptr.To[int64](0),
			FSGroup: ptr.To[int64](1000650000), SupplementalGroups: []int64{5000},
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("profiles/mariadb.json")},
			SELinuxOptions: &corev1.SELinuxOptions{Level: "s0:c26,c5"}},
	}
	return c
}

func TestBuildersGolden(t *testing.T) {
	for name, c := range map[string]*dolphinv1.MySQLCluster{"minimal": minimal(), "customised": customised(), "restored": restored(), "production": production()} {
		t.Run(name, func(t *testing.T) {
			sts, err := StatefulSet(c, BuildOptions{AgentImage: "ghcr.io/dolphin-operator/dolphin:test"})
			if err != nil {
				t.Fatal(err)
			}
			cm, err := ConfigMap(c)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, name+"-statefulset", sts)
			if name == "minimal" {
				// The template of the releases before generations (and their StatefulSets).
				first, err := StatefulSet(c, BuildOptions{AgentImage: "ghcr.io/dolphin-operator/dolphin:test", TemplateGeneration: generationInitial})
				if err != nil {
					t.Fatal(err)
				}
				golden(t, name+"-generation1-statefulset", first)
			}
			golden(t, name+"-configmap", cm)
			golden(t, name+"-services", []any{HeadlessService(c), PrimaryService(c, false), ReplicaService(c)})
			golden(t, name+"-pdb", PodDisruptionBudget(c))
			golden(t, name+"-serviceaccount", ServiceAccount(c))
		})
	}
}

func TestEveryChildIsOwnedByTheCluster(t *testing.T) {
	c := minimal()
	sts, _ := StatefulSet(c, BuildOptions{AgentImage: "ghcr.io/dolphin-operator/dolphin:test"})
	cm, _ := ConfigMap(c)
	owners := map[string][]metav1.OwnerReference{}
	for name, obj := range map[string]any{
		"statefulset": sts, "configmap": cm, "headless": HeadlessService(c), "primary": PrimaryService(c, false),
		"replicas": ReplicaService(c), "pdb": PodDisruptionBudget(c), "sa": ServiceAccount(c),
	} {
		var m struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		b, _ := json.Marshal(obj)
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		owners[name] = m.Metadata.OwnerReferences
	}
	owners["secret"] = GeneratedCredentialsSecret(c, NewPassword).OwnerReferences
	for name, refs := range owners {
		if len(refs) != 1 || refs[0].UID != c.UID || refs[0].Kind != "MySQLCluster" || !ptr.Deref(refs[0].Controller, false) {
			t.Errorf("%s: owner references %+v, want the cluster as controller", name, refs)
		}
	}
}

func TestServicesSelectOnRole(t *testing.T) {
	c := minimal()
	if got := PrimaryService(c, false).Spec.Selector[RoleLabel]; got != "primary" {
		t.Errorf("primary Service selects role %q before the topology reporter points it at a pod", got)
	}
	if sel := PrimaryService(c, true).Spec.Selector; sel != nil {
		t.Errorf("primary Service's selector %v is applied by the reconciler once the topology reporter owns it", sel)
	}
	sel := PrimaryPodSelector(c.Name, c.Name+"-2")
	if pod, ok := SelectsOnePod(sel); !ok || pod != c.Name+"-2" {
		t.Errorf("PrimaryPodSelector %v: SelectsOnePod = %q, %v", sel, pod, ok)
	}
	for k, v := range SelectorLabels(c) {
		if sel[k] != v {
			t.Errorf("PrimaryPodSelector %v lacks the cluster's selector label %s=%s", sel, k, v)
		}
	}
	if _, ok := SelectsOnePod(RoleSelector(c, dolphinv1.RolePrimary)); ok {
		t.Error("the role selector is not a one-pod selector")
	}
	if got := ReplicaService(c).Spec.Selector[RoleLabel]; got != "replica" {
		t.Errorf("replica Service selects role %q", got)
	}
	if _, ok := HeadlessService(c).Spec.Selector[RoleLabel]; ok {
		t.Error("headless Service must select every instance, whatever its role")
	}
}

func TestPodTemplateStability(t *testing.T) {
	template := func(c *dolphinv1.MySQLCluster) string {
		sts, err := StatefulSet(c, BuildOptions{AgentImage: "ghcr.io/dolphin-operator/dolphin:test"})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(sts.Spec.Template)
		return string(b)
	}
	base := minimal()
	same := []func(c *dolphinv1.MySQLCluster){
		func(c *dolphinv1.MySQLCluster) { c.Spec.Instances = 7 },
		func(c *dolphinv1.MySQLCluster) { c.Spec.PrimaryService.Type = corev1.ServiceTypeNodePort },
		func(c *dolphinv1.MySQLCluster) { c.Spec.Failover.Detection.Attempts = 9 },
		func(c *dolphinv1.MySQLCluster) { c.Status.Phase = dolphinv1.PhaseRunning; c.Generation = 42 },
		// Settings the server takes at run time are applied with SET GLOBAL, not a restart.
		func(c *dolphinv1.MySQLCluster) {
			c.Spec.MySQLConfig = map[string]dolphinv1.MySQLConfigValue{"max_connections": "300", "long_query_time": "2"}
		},
	}
	for i, mutate := range same {
		c := base.DeepCopy()
		mutate(c)
		if template(c) != template(base) {
			t.Errorf("change %d must not touch the pod template (it would restart every instance)", i)
		}
	}
	changed := []func(c *dolphinv1.MySQLCluster){
		func(c *dolphinv1.MySQLCluster) {
			c.Spec.MySQLConfig = map[string]dolphinv1.MySQLConfigValue{"performance_schema": "ON"} // static
		},
		func(c *dolphinv1.MySQLCluster) {
			// MariaDB cannot raise the buffer pool above its start-up size at run time.
			c.Spec.MySQLConfig = map[string]dolphinv1.MySQLConfigValue{"innodb_buffer_pool_size": "1G"}
		},
		func(c *dolphinv1.MySQLCluster) {
			c.Spec.MySQLConfig = map[string]dolphinv1.MySQLConfigValue{"loose_some_plugin_option": "1"} // unknown: static
		},
		func(c *dolphinv1.MySQLCluster) { c.Spec.Engine.Version = "11.4" },
	}
	for i, mutate := range changed {
		c := base.DeepCopy()
		mutate(c)
		if ConfigHash(c) == ConfigHash(base) {
			t.Errorf("change %d needs a restart: the config hash must change", i)
		}
	}
	if a, b := ConfigHash(customised()), ConfigHash(customised()); a != b {
		t.Errorf("config hash is not stable: %s vs %s", a, b)
	}
}

// TestInitScriptPerFlavor: the exact text of the init script (per-instance config) and of
// the install script with which each flavor initialises an empty data directory and creates
// Dolphin's operator account. The MariaDB scripts also run on a real server
// (TestServerInitScriptOperatorAccount); the MySQL ones are checked as text only: no MySQL
// server can be installed here.
func TestInitScriptPerFlavor(t *testing.T) {
	for _, tc := range []struct {
		name          string
		c             *dolphinv1.MySQLCluster
		init, install string
	}{{"mariadb", minimal(), initScriptMariaDB, installScriptMariaDB}, {"mysql", customised(), initScriptMySQL, installScriptMySQL}} {
		if got := InitScript(tc.c); got != tc.init {
			t.Errorf("%s init script:\n%s\nwant:\n%s", tc.name, got, tc.init)
		}
		if got := InstallScript(tc.c); got != tc.install {
			t.Errorf("%s install script:\n%s\nwant:\n%s", tc.name, got, tc.install)
		}
	}
}

const initScriptMariaDB = `#!/bin/sh
# Generated by Dolphin; do not edit. Writes the per-instance config before the server starts.
set -eu
ordinal="${POD_NAME##*-}"
case "$ordinal" in
  ''|*[!0-9]*) echo "dolphin-init: cannot derive an ordinal from POD_NAME=$POD_NAME" >&2; exit 1 ;;
esac
cat > /etc/mysql/dolphin-instance/instance.cnf <<EOF
[mysqld]
server_id=$((1000 + ordinal))
report_host=$POD_NAME.orders-instances.$POD_NAMESPACE.svc
EOF
echo "dolphin-init: instance $ordinal configured"
`

const initScriptMySQL = `#!/bin/sh
# Generated by Dolphin; do not edit. Writes the per-instance config before the server starts.
set -eu
ordinal="${POD_NAME##*-}"
case "$ordinal" in
  ''|*[!0-9]*) echo "dolphin-init: cannot derive an ordinal from POD_NAME=$POD_NAME" >&2; exit 1 ;;
esac
cat > /etc/mysql/dolphin-instance/instance.cnf <<EOF
[mysqld]
server_id=$((1000 + ordinal))
report_host=$POD_NAME.billing-instances.$POD_NAMESPACE.svc
EOF
echo "dolphin-init: instance $ordinal configured"
`

const installScriptMariaDB = `#!/bin/sh
# Generated by Dolphin; do not edit. Initialises an empty data directory (the seed init
# container runs it when the operator says the instance starts empty).
set -eu
if [ ! -e /var/lib/mysql/.dolphin-initialized ]; then
  echo "dolphin-install: initialising the data directory /var/lib/mysql"
  # The initialisation skips its flushes when the seed offers "$DOLPHIN_NOSYNC" nosync and
  # both it and this image's sync -f (syncfs) work here; otherwise it flushes as usual.
  nosync=
  if [ -n "${DOLPHIN_NOSYNC:-}" ] && "$DOLPHIN_NOSYNC" nosync -- sync -f /var/lib/mysql 2>/dev/null; then
    nosync=1
  fi
  initialise() {
    if [ -n "$nosync" ]; then "$DOLPHIN_NOSYNC" nosync -- "$@"; else "$@"; fi
  }
  pw=$(printf '%s.' "$DOLPHIN_OPERATOR_PASSWORD" | sed -e ':a' -e '$!N' -e '$!ba' -e 's/\\/\\\\/g' -e "s/'/''/g" -e 's/\n/\\n/g')
  pw=${pw%.}
  (umask 077 && printf "FLUSH PRIVILEGES;\nCREATE USER IF NOT EXISTS '%s'@'%%' IDENTIFIED BY '%s';\nGRANT ALL PRIVILEGES ON *.* TO '%s'@'%%' WITH GRANT OPTION;\n" \
    "$DOLPHIN_OPERATOR_USER" "$pw" "$DOLPHIN_OPERATOR_USER" > /tmp/dolphin-install.sql)
  initialise mariadb-install-db --defaults-file=/etc/mysql/dolphin/my.cnf --auth-root-authentication-method=normal --skip-test-db --extra-file=/tmp/dolphin-install.sql || { rm -f /tmp/dolphin-install.sql; exit 1; }
  rm -f /tmp/dolphin-install.sql
  if [ -n "$nosync" ]; then
    # Durable before the marker says so; an error stops here. A crash before this leaves no
    # marker, and the seed clears the directory and starts again.
    sync -f /var/lib/mysql
  fi
  touch /var/lib/mysql/.dolphin-initialized
  sync /var/lib/mysql/.dolphin-initialized /var/lib/mysql 2>/dev/null || sync
fi
`

const installScriptMySQL = `#!/bin/sh
# Generated by Dolphin; do not edit. Initialises an empty data directory (the seed init
# container runs it when the operator says the instance starts empty).
set -eu
if [ ! -e /var/lib/mysql/.dolphin-initialized ]; then
  echo "dolphin-install: initialising the data directory /var/lib/mysql"
  # The initialisation skips its flushes when the seed offers "$DOLPHIN_NOSYNC" nosync and
  # both it and this image's sync -f (syncfs) work here; otherwise it flushes as usual.
  nosync=
  if [ -n "${DOLPHIN_NOSYNC:-}" ] && "$DOLPHIN_NOSYNC" nosync -- sync -f /var/lib/mysql 2>/dev/null; then
    nosync=1
  fi
  initialise() {
    if [ -n "$nosync" ]; then "$DOLPHIN_NOSYNC" nosync -- "$@"; else "$@"; fi
  }
  pw=$(printf '%s.' "$DOLPHIN_OPERATOR_PASSWORD" | sed -e ':a' -e '$!N' -e '$!ba' -e 's/\\/\\\\/g' -e "s/'/''/g" -e 's/\n/\\n/g')
  pw=${pw%.}
  (umask 077 && printf "SET SESSION sql_log_bin = 0;\nCREATE USER IF NOT EXISTS '%s'@'%%' IDENTIFIED BY '%s';\nGRANT ALL PRIVILEGES ON *.* TO '%s'@'%%' WITH GRANT OPTION;\n" \
    "$DOLPHIN_OPERATOR_USER" "$pw" "$DOLPHIN_OPERATOR_USER" > /tmp/dolphin-init.sql)
  initialise mysqld --defaults-file=/etc/mysql/dolphin/my.cnf --initialize-insecure --init-file=/tmp/dolphin-init.sql || { rm -f /tmp/dolphin-init.sql; exit 1; }
  rm -f /tmp/dolphin-init.sql
  if [ -n "$nosync" ]; then
    # Durable before the marker says so; an error stops here. A crash before this leaves no
    # marker, and the seed clears the directory and starts again.
    sync -f /var/lib/mysql
  fi
  touch /var/lib/mysql/.dolphin-initialized
  sync /var/lib/mysql/.dolphin-initialized /var/lib/mysql 2>/dev/null || sync
fi
`

// TestServerRollsBackItsTailOnlyWithReplicas: MariaDB rolls back an uncommitted binlog tail
// after a crash only when replicas exist to hold what was acknowledged; a single instance and
// MySQL (no such option) never do. From template generation 2 exactly those servers run under
// crashOnStop, with the same server command line as their arguments.
func TestServerRollsBackItsTailOnlyWithReplicas(t *testing.T) {
	single := minimal()
	single.Spec.Instances = 1
	tls := minimal()
	tls.Spec.TLS.Enabled = true
	for _, tc := range []struct {
		name string
		c    *dolphinv1.MySQLCluster
		want bool
	}{{"mariadb, 3 instances", minimal(), true}, {"mariadb, tls", tls, true}, {"mariadb, 1 instance", single, false}, {"mysql, 5 instances", customised(), false}} {
		for _, generation := range []int{generationInitial, generationCrashOnStop, generationCrashOnStopStatus} {
			cmd := serverCommand(tc.c, generation)
			if got := slices.Contains(cmd, "--init-rpl-role=SLAVE"); got != tc.want {
				t.Errorf("%s, generation %d: command %v: --init-rpl-role=SLAVE present %v, want %v", tc.name, generation, cmd, got, tc.want)
			}
			script := crashOnStop
			if generation == generationCrashOnStop {
				script = crashOnStopGeneration2
			}
			supervised := slices.Equal(cmd[:min(len(cmd), 4)], []string{"/bin/sh", "-c", script, "crash-on-stop"})
			if want := tc.want && generation >= generationCrashOnStop; supervised != want {
				t.Errorf("%s, generation %d: command %q: under crashOnStop %v, want %v", tc.name, generation, cmd, supervised, want)
			}
			if plain := serverCommand(tc.c, generationInitial); supervised && !slices.Equal(cmd[4:], plain) {
				t.Errorf("%s: supervised server command %q, want the plain one %q", tc.name, cmd[4:], plain)
			}
		}
	}
	if strings.Contains(crashOnStop, "$(") || strings.Contains(crashOnStopGeneration2, "$(") {
		t.Errorf("crashOnStop holds $(, which the kubelet would expand")
	}
}

func TestGeneratedCredentials(t *testing.T) {
	s := GeneratedCredentialsSecret(minimal(), NewPassword)
	if missing := MissingCredentialKeys(s); len(missing) != 0 {
		t.Fatalf("generated Secret lacks %v", missing)
	}
	seen := map[string]bool{}
	for _, k := range CredentialKeys {
		p := string(s.Data[k])
		if len(p) < 26 || seen[p] {
			t.Errorf("%s: weak or repeated password %q", k, p)
		}
		seen[p] = true
	}
	if s.Name != "orders-credentials" {
		t.Errorf("name %q", s.Name)
	}
	delete(s.Data, MonitorPasswordKey)
	s.Data[RootPasswordKey] = nil
	if got := MissingCredentialKeys(s); strings.Join(got, ",") != RootPasswordKey+","+MonitorPasswordKey {
		t.Errorf("missing keys %v", got)
	}
}

func TestDefaultedFillsEverything(t *testing.T) {
	c := minimal()
	if c.Spec.Instances != 3 || c.Spec.Engine.Flavor != dolphinv1.FlavorMariaDB || c.Spec.Engine.Version != "10.11" ||
		c.Spec.Storage.Size.String() != "1Gi" || c.Spec.Storage.DeletePolicy != dolphinv1.VolumeRetain ||
		!*c.Spec.Failover.Enabled || c.Spec.Failover.Detection.Interval.Duration.String() != "1s" ||
		c.Spec.Failover.Detection.Attempts != 3 || c.Spec.PrimaryService.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("defaults not applied: %+v", c.Spec)
	}
	if Image(c) != "docker.io/library/mariadb:10.11" || Image(customised()) != "registry.example/mysql:8.4.3" {
		t.Errorf("images: %s, %s", Image(c), Image(customised()))
	}
}

// TestPodsMeetRestrictedPodSecurity evaluates the instance pod with the Pod Security
// Admission library at level "restricted", as a namespace labelled
// pod-security.kubernetes.io/enforce=restricted would.
func TestPodsMeetRestrictedPodSecurity(t *testing.T) {
	evaluator, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*dolphinv1.MySQLCluster{"minimal": minimal(), "customised": customised()} {
		sts, err := StatefulSet(c, BuildOptions{AgentImage: "ghcr.io/dolphin-operator/dolphin:test"})
		if err != nil {
			t.Fatal(err)
		}
		var tmpl corev1.PodTemplateSpec
		if err := convert(sts.Spec.Template, &tmpl); err != nil {
			t.Fatal(err)
		}
		results := evaluator.EvaluatePod(api.LevelVersion{Level: api.LevelRestricted, Version: api.LatestVersion()}, &tmpl.ObjectMeta, &tmpl.Spec)
		if len(results) == 0 {
			t.Fatal("no checks ran")
		}
		for _, r := range results {
			if !r.Allowed {
				t.Errorf("%s: restricted check failed: %s: %s", name, r.ForbiddenReason, r.ForbiddenDetail)
			}
		}
	}
}

func TestDynamicVariablesAndUnknownKeys(t *testing.T) {
	c := minimal()
	c.Spec.MySQLConfig = map[string]dolphinv1.MySQLConfigValue{
		"max_connections": "200", "long_query_time": "0.5", "performance_schema": "ON",
		"max_allowed_packet": "64M", "no_such_setting": "1", "loose_no_such_plugin": "2",
	}
	vars, err := DynamicVariables(c)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"max_connections": "200", "long_query_time": "0.5", "max_allowed_packet": "67108864",
		"character_set_server": "'utf8mb4'"} { // Dolphin's tunable default is applied too
		if vars[name] != want {
			t.Errorf("%s = %q, want %q (all: %v)", name, vars[name], want, vars)
		}
	}
	for _, static := range []string{"performance_schema", "no_such_setting", "loose_no_such_plugin"} {
		if _, ok := vars[static]; ok {
			t.Errorf("%s must not be set at run time", static)
		}
	}
	if got := UnknownConfigKeys(c); !slices.Equal(got, []string{"no_such_setting"}) {
		t.Errorf("unknown keys %v, want [no_such_setting] (loose_ keys pass unchecked)", got)
	}
}

// A value of the wrong form for its setting is never sent to a server with SET GLOBAL, and
// InvalidConfigValues tells one mysqld would not start with (a word for a number) from one it
// would misread (a boolean it takes as OFF).
func TestWrongValuesAreNotSetAtRunTime(t *testing.T) {
	c := minimal()
	c.Spec.MySQLConfig = map[string]dolphinv1.MySQLConfigValue{"max_connections": "many", "slow_query_log": "yes", "long_query_time": "2"}
	vars, err := DynamicVariables(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := vars["max_connections"]; ok {
		t.Errorf("max_connections=many set at run time: %v", vars)
	}
	if _, ok := vars["slow_query_log"]; ok {
		t.Errorf("slow_query_log=yes set at run time: %v", vars)
	}
	if vars["long_query_time"] != "2" {
		t.Errorf("the valid key beside them: long_query_time = %q", vars["long_query_time"])
	}
	refused, misread := InvalidConfigValues(c)
	if len(refused) != 1 || !strings.HasPrefix(refused[0], "max_connections must be a whole number") ||
		len(misread) != 1 || !strings.HasPrefix(misread[0], "slow_query_log must be ON or OFF") {
		t.Errorf("refused %q, misread %q", refused, misread)
	}
}

// The verification pod replays the cluster's binlog archive only when asked to (continuous
// archiving on): --archive-prefix with the archive's prefix in the backup's store.
func TestVerifyPodArchivePrefix(t *testing.T) {
	c := minimal()
	store := restored().Status.RestoredFrom.Store
	b := &dolphinv1.MySQLBackup{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: "nightly", UID: "u1"},
		Status: dolphinv1.MySQLBackupStatus{Store: &store, Path: "shop/orders/nightly/"}}
	for _, prefix := range []string{"", BinlogArchivePrefix(c)} {
		pod := VerifyPod(c, b, "", prefix, BuildOptions{AgentImage: "ghcr.io/dolphin-operator/dolphin:test"})
		cmd := strings.Join(pod.Spec.Containers[0].Command, " ")
		has := strings.Contains(cmd, "--archive-prefix")
		if prefix == "" && has || prefix != "" && !strings.Contains(cmd, "--archive-prefix "+prefix) {
			t.Errorf("archive prefix %q: command %q", prefix, cmd)
		}
	}
}
