package controller

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/mycnf"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// TestEnvtestInvalidSpecsAreRejected sends each invalid spec to the real API server and
// checks that the CRD's validation rejects it with the message that says what to change.
func TestEnvtestInvalidSpecsAreRejected(t *testing.T) {
	needEnvtest(t)
	c := directClient(t, nil)
	ns := newNamespace(t)
	cases := []struct {
		name    string
		spec    dolphinv1.MySQLClusterSpec
		message string
	}{
		{"too many instances", dolphinv1.MySQLClusterSpec{Instances: 10}, "instances must be between 1 and 9"},
		{"negative instances", dolphinv1.MySQLClusterSpec{Instances: -1}, "instances must be between 1 and 9"},
		{"unknown flavor", dolphinv1.MySQLClusterSpec{Engine: dolphinv1.EngineSpec{Flavor: "postgres"}}, `supported values: "mariadb", "mysql"`},
		{"malformed version", dolphinv1.MySQLClusterSpec{Engine: dolphinv1.EngineSpec{Version: "latest"}}, "engine.version must look like MAJOR.MINOR"},
		{"unsupported mariadb version", dolphinv1.MySQLClusterSpec{Engine: dolphinv1.EngineSpec{Flavor: "mariadb", Version: "10.6"}}, "unsupported engine version: use 10.11, 11.4 or 11.8"},
		{"mysql with a mariadb version", dolphinv1.MySQLClusterSpec{Engine: dolphinv1.EngineSpec{Flavor: "mysql", Version: "10.11"}}, "unsupported engine version"},
		{"hyphenated config key", dolphinv1.MySQLClusterSpec{MySQLConfig: map[string]dolphinv1.MySQLConfigValue{"innodb-buffer-pool-size": "1G"}}, "keys must be lower-case mysqld option names with underscores"},
		{"multi-line config value", dolphinv1.MySQLClusterSpec{MySQLConfig: map[string]dolphinv1.MySQLConfigValue{"max_connections": "10\nserver_id=1"}}, "values must be a single line"},
		{"comment in config value", dolphinv1.MySQLClusterSpec{MySQLConfig: map[string]dolphinv1.MySQLConfigValue{"sql_mode": "A#B"}}, "without '#'"},
		{"detection interval too short", dolphinv1.MySQLClusterSpec{Failover: dolphinv1.FailoverSpec{Detection: dolphinv1.DetectionSpec{Interval: &metav1.Duration{Duration: 1}}}}, "failover.detection.interval must be between 100ms and 1m"},
		{"zero detection attempts", dolphinv1.MySQLClusterSpec{Failover: dolphinv1.FailoverSpec{Detection: dolphinv1.DetectionSpec{Attempts: -2}}}, "spec.failover.detection.attempts"},
		{"reserved pod label", dolphinv1.MySQLClusterSpec{PodTemplate: dolphinv1.PodTemplateOverrides{Labels: map[string]string{resources.RoleLabel: "primary"}}}, "pod labels under app.kubernetes.io/ and mysql.dolphin.dev/ are set by Dolphin"},
		{"reserved server env", dolphinv1.MySQLClusterSpec{PodTemplate: dolphinv1.PodTemplateOverrides{Env: []corev1.EnvVar{{Name: "POD_IP", Value: "1.2.3.4"}}}}, "POD_NAME, POD_NAMESPACE and POD_IP are set by Dolphin"},
		{"a sidecar named as Dolphin's", dolphinv1.MySQLClusterSpec{PodTemplate: dolphinv1.PodTemplateOverrides{Sidecars: []dolphinv1.ExtraContainer{{Name: "agent", Image: "x"}}}}, "are Dolphin's containers"},
		{"a volume named as Dolphin's", dolphinv1.MySQLClusterSpec{PodTemplate: dolphinv1.PodTemplateOverrides{Volumes: []dolphinv1.ExtraVolume{{Name: "data", EmptyDir: &corev1.EmptyDirVolumeSource{}}}}}, "are Dolphin's volumes"},
		{"root user", dolphinv1.MySQLClusterSpec{PodTemplate: dolphinv1.PodTemplateOverrides{SecurityContext: &dolphinv1.PodSecurity{RunAsUser: ptr.To[int64](0)}}}, "runAsUser: Invalid value"},
		{"localhost seccomp without a profile", dolphinv1.MySQLClusterSpec{PodTemplate: dolphinv1.PodTemplateOverrides{SecurityContext: &dolphinv1.PodSecurity{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost}}}}, "Localhost with localhostProfile"},
		{"unconfined seccomp", dolphinv1.MySQLClusterSpec{PodTemplate: dolphinv1.PodTemplateOverrides{SecurityContext: &dolphinv1.PodSecurity{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}}}, "Unconfined is refused)"},
		{"a volume without a source", dolphinv1.MySQLClusterSpec{PodTemplate: dolphinv1.PodTemplateOverrides{Volumes: []dolphinv1.ExtraVolume{{Name: "x"}}}}, "exactly one of configMap, secret, emptyDir and persistentVolumeClaim"},
		{"bad pull policy", dolphinv1.MySQLClusterSpec{PodTemplate: dolphinv1.PodTemplateOverrides{ImagePullPolicy: "Sometimes"}}, `supported values: "Always", "IfNotPresent", "Never"`},
		{"reserved service label", dolphinv1.MySQLClusterSpec{PrimaryService: dolphinv1.ServiceSpec{Labels: map[string]string{"app.kubernetes.io/name": "x"}}}, "service labels under app.kubernetes.io/"},
		{"tiny storage", dolphinv1.MySQLClusterSpec{Storage: dolphinv1.StorageSpec{Size: ptr.To(resource.MustParse("1Mi"))}}, "storage.size must be at least 64Mi"},
		{"bad service type", dolphinv1.MySQLClusterSpec{ReplicaService: dolphinv1.ReplicaServiceSpec{ServiceSpec: dolphinv1.ServiceSpec{Type: "ExternalName"}}}, `supported values: "ClusterIP", "NodePort", "LoadBalancer"`},
		{"certificate Secret without TLS", dolphinv1.MySQLClusterSpec{TLS: dolphinv1.TLSSpec{CertificateSecret: "mine"}}, "tls.certificateSecret is used only with tls.enabled: true"},
		{"TLS required without TLS", dolphinv1.MySQLClusterSpec{TLS: dolphinv1.TLSSpec{RequireForClients: true}}, "tls.requireForClients needs tls.enabled: true"},
	}
	// Every key the my.cnf generator reserves must be rejected by the schema as well, so a
	// bad key never gets past the API server to fail in the reconciler.
	for _, k := range append(mycnf.ReservedKeys(), "rpl_semi_sync_master_timeout", "rpl_semi_sync_source_enabled") {
		cases = append(cases, struct {
			name    string
			spec    dolphinv1.MySQLClusterSpec
			message string
		}{"reserved key " + k, dolphinv1.MySQLClusterSpec{MySQLConfig: map[string]dolphinv1.MySQLConfigValue{k: "1"}}, "mysqlConfig may not set replication and durability settings"})
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := &dolphinv1.MySQLCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad-" + strings.Repeat("x", i%3) + string(rune('a'+i%26))}, Spec: tc.spec}
			err := c.Create(context.Background(), obj)
			if err == nil {
				t.Fatalf("accepted; want rejection with %q", tc.message)
			}
			if !strings.Contains(err.Error(), tc.message) {
				t.Errorf("rejected with\n  %v\nwant a message containing\n  %q", err, tc.message)
			}
		})
	}
}

// TestEnvtestImmutableFieldsAreRejected checks the transition rules on updates.
func TestEnvtestImmutableFieldsAreRejected(t *testing.T) {
	needEnvtest(t)
	c := directClient(t, nil)
	ctx := context.Background()
	key := createCluster(t, c, newNamespace(t), "fixed", dolphinv1.MySQLClusterSpec{
		Storage:     dolphinv1.StorageSpec{Size: ptr.To(resource.MustParse("10Gi")), StorageClassName: ptr.To("fast")},
		Credentials: dolphinv1.CredentialsSpec{SecretName: "mine"},
	})
	cases := []struct {
		name    string
		mutate  func(*dolphinv1.MySQLCluster)
		message string
	}{
		{"flavor", func(m *dolphinv1.MySQLCluster) { m.Spec.Engine.Flavor = "mysql"; m.Spec.Engine.Version = "8.4" }, "engine.flavor is immutable"},
		{"storage shrink", func(m *dolphinv1.MySQLCluster) { m.Spec.Storage.Size = ptr.To(resource.MustParse("5Gi")) }, "storage.size cannot shrink"},
		{"storage shrink in other units", func(m *dolphinv1.MySQLCluster) { m.Spec.Storage.Size = ptr.To(resource.MustParse("10G")) }, "storage.size cannot shrink"},
		{"storage class", func(m *dolphinv1.MySQLCluster) { m.Spec.Storage.StorageClassName = ptr.To("slow") }, "storage.storageClassName is immutable"},
		{"storage class removed", func(m *dolphinv1.MySQLCluster) { m.Spec.Storage.StorageClassName = nil }, "storage.storageClassName is immutable"},
		{"credentials secret", func(m *dolphinv1.MySQLCluster) { m.Spec.Credentials.SecretName = "other" }, "credentials.secretName is immutable"},
		{"user set after creation", func(m *dolphinv1.MySQLCluster) {
			m.Spec.PodTemplate.SecurityContext = &dolphinv1.PodSecurity{RunAsUser: ptr.To[int64](1000)}
		}, "runAsUser, runAsGroup and fsGroup cannot change after the cluster is created"},
		{"fsGroup set after creation", func(m *dolphinv1.MySQLCluster) {
			m.Spec.PodTemplate.SecurityContext = &dolphinv1.PodSecurity{FSGroup: ptr.To[int64](1000)}
		}, "runAsUser, runAsGroup and fsGroup cannot change after the cluster is created"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := getCluster(t, c, key)
			tc.mutate(obj)
			err := c.Update(ctx, obj)
			if err == nil || !strings.Contains(err.Error(), tc.message) {
				t.Errorf("update: %v; want a rejection containing %q", err, tc.message)
			}
		})
	}
	t.Run("allowed changes pass", func(t *testing.T) {
		obj := getCluster(t, c, key)
		obj.Spec.Storage.Size = ptr.To(resource.MustParse("20Gi"))
		obj.Spec.Instances = 5
		obj.Spec.Engine.Version = "11.4"
		// The default user and group written out, and a seccomp profile, change no owner.
		obj.Spec.PodTemplate.SecurityContext = &dolphinv1.PodSecurity{RunAsUser: ptr.To[int64](999), FSGroup: ptr.To[int64](999),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
		if err := c.Update(ctx, obj); err != nil {
			t.Errorf("growing storage, scaling, upgrading and naming the default user were rejected: %v", err)
		}
	})
	// A cluster created with its own user keeps it: removing the field (999 again) is a change.
	owned := createCluster(t, c, key.Namespace, "owned", dolphinv1.MySQLClusterSpec{
		PodTemplate: dolphinv1.PodTemplateOverrides{SecurityContext: &dolphinv1.PodSecurity{RunAsUser: ptr.To[int64](1000)}}})
	obj := getCluster(t, c, owned)
	obj.Spec.PodTemplate.SecurityContext = nil
	if err := c.Update(ctx, obj); err == nil || !strings.Contains(err.Error(), "cannot change after the cluster is created") {
		t.Errorf("removing the user set at creation: %v; want refused", err)
	}
	obj = getCluster(t, c, owned)
	obj.Spec.PodTemplate.SecurityContext.SupplementalGroups = []int64{5000}
	if err := c.Update(ctx, obj); err != nil {
		t.Errorf("a supplemental group beside the same user: %v", err)
	}
	// Release series only go forward: 11.4 -> 11.8 and a patch level back within 11.8 pass,
	// 11.8 -> 11.4 and 11.8 -> 10.11 are refused.
	for _, step := range []struct {
		version, refused string
	}{{"11.8.9", ""}, {"11.8.3", ""}, {"11.8", ""}, {"11.4.5", "cannot go back to an older release series"}, {"10.11", "cannot go back to an older release series"}} {
		obj := getCluster(t, c, key)
		obj.Spec.Engine.Version = step.version
		err := c.Update(ctx, obj)
		switch {
		case step.refused == "" && err != nil:
			t.Errorf("engine.version %s after %s: %v", step.version, getCluster(t, c, key).Spec.Engine.Version, err)
		case step.refused != "" && (err == nil || !strings.Contains(err.Error(), step.refused)):
			t.Errorf("engine.version %s after 11.8: %v; want a rejection containing %q", step.version, err, step.refused)
		}
	}
}

// TestEnvtestDefaultsMatchTheCRD checks that resources.Defaulted and the CRD's defaults agree.
func TestEnvtestDefaultsMatchTheCRD(t *testing.T) {
	needEnvtest(t)
	c := directClient(t, nil)
	key := createCluster(t, c, newNamespace(t), "plain", dolphinv1.MySQLClusterSpec{})
	got := getCluster(t, c, key)
	want := resources.Defaulted(&dolphinv1.MySQLCluster{})
	if !equality.Semantic.DeepEqual(got.Spec, want.Spec) {
		t.Errorf("API server defaults differ from resources.Defaulted:\n api server: %+v\n Defaulted:  %+v", got.Spec, want.Spec)
	}
}

// TestEnvtestFieldSelectorOnPhase lists clusters with a field selector on status.phase,
// served by the API server thanks to the CRD's selectableFields.
func TestEnvtestFieldSelectorOnPhase(t *testing.T) {
	needEnvtest(t)
	c := directClient(t, nil)
	ctx := context.Background()
	ns := newNamespace(t)
	for name, phase := range map[string]dolphinv1.Phase{"a": dolphinv1.PhaseFailed, "b": dolphinv1.PhaseRunning, "c": dolphinv1.PhaseFailed, "d": ""} {
		key := createCluster(t, c, ns, name, dolphinv1.MySQLClusterSpec{})
		if phase == "" {
			continue
		}
		obj := getCluster(t, c, key)
		obj.Status.Phase = phase
		if err := c.Status().Update(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	var list dolphinv1.MySQLClusterList
	if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingFields{"status.phase": "Failed"}); err != nil {
		t.Fatalf("field-selector list: %v", err)
	}
	var names []string
	for _, it := range list.Items {
		names = append(names, it.Name)
	}
	if strings.Join(names, ",") != "a,c" {
		t.Errorf("status.phase=Failed returned %v, want [a c]", names)
	}
}

// TestEnvtestUserSuppliedCredentials: a missing or incomplete Secret fails the cluster with
// a message saying what to add; a complete one lets it proceed. Dolphin changes nothing in
// it but adding its CredentialsLabel (once), and does not own it.
func TestEnvtestUserSuppliedCredentials(t *testing.T) {
	needEnvtest(t)
	c := directClient(t, nil)
	ctx := context.Background()
	ns := newNamespace(t)
	key := createCluster(t, c, ns, "byo", dolphinv1.MySQLClusterSpec{Credentials: dolphinv1.CredentialsSpec{SecretName: "byo-secret"}})
	expectFailed := func(reason, message string) {
		t.Helper()
		if err := reconcileOnce(t, c, key); err != nil {
			t.Fatalf("a user error must not be returned as a reconcile error: %v", err)
		}
		st := getCluster(t, c, key).Status
		cond := meta.FindStatusCondition(st.Conditions, "Ready")
		if st.Phase != dolphinv1.PhaseFailed || cond == nil || cond.Reason != reason || !strings.Contains(cond.Message, message) {
			t.Errorf("phase %q Ready=%+v; want Failed/%s mentioning %q", st.Phase, cond, reason, message)
		}
	}
	expectFailed("CredentialsSecretNotFound", `Secret "byo-secret" named in spec.credentials.secretName does not exist`)

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "byo-secret"},
		Data: map[string][]byte{resources.RootPasswordKey: []byte("r"), resources.ReplicationPasswordKey: []byte("p")}}
	if err := c.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	expectFailed("CredentialsSecretIncomplete", "lacks the keys operator-password, monitor-password")

	// A patch, as kubectl apply sends: Dolphin has labelled the Secret since it was read.
	complete := client.MergeFrom(secret.DeepCopy())
	secret.Data[resources.OperatorPasswordKey] = []byte("o")
	secret.Data[resources.MonitorPasswordKey] = []byte("m")
	if err := c.Patch(ctx, secret, complete); err != nil {
		t.Fatal(err)
	}
	data := secret.DeepCopy().Data
	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatal(err)
	}
	if st := getCluster(t, c, key).Status; st.Phase != dolphinv1.PhasePending {
		t.Errorf("with a complete Secret the cluster should proceed to Pending, got %q", st.Phase)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(secret), secret); err != nil {
		t.Fatal(err)
	}
	if secret.Labels[resources.CredentialsLabel] != "true" || len(secret.Labels) != 1 || !equality.Semantic.DeepEqual(secret.Data, data) {
		t.Errorf("the user's Secret should only have gained the label %s=true: labels %v, data changed %v",
			resources.CredentialsLabel, secret.Labels, !equality.Semantic.DeepEqual(secret.Data, data))
	}
	rv := secret.ResourceVersion
	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(secret), secret); err != nil || secret.ResourceVersion != rv {
		t.Errorf("the labelled Secret was modified again (resourceVersion %s -> %s, %v)", rv, secret.ResourceVersion, err)
	}
	if len(secret.OwnerReferences) != 0 {
		t.Errorf("the user's Secret must not be owned by the cluster: %+v", secret.OwnerReferences)
	}
}

// TestEnvtestGeneratedPasswordsAreNeverOverwritten: only a missing key is filled in.
func TestEnvtestGeneratedPasswordsAreNeverOverwritten(t *testing.T) {
	needEnvtest(t)
	c := directClient(t, nil)
	ctx := context.Background()
	key := createCluster(t, c, newNamespace(t), "keep", dolphinv1.MySQLClusterSpec{})
	if err := reconcileOnce(t, c, key); err != nil {
		t.Fatal(err)
	}
	var s corev1.Secret
	sk := client.ObjectKey{Namespace: key.Namespace, Name: "keep-credentials"}
	if err := c.Get(ctx, sk, &s); err != nil {
		t.Fatal(err)
	}
	original := map[string]string{}
	for k, v := range s.Data {
		original[k] = string(v)
	}
	delete(s.Data, resources.MonitorPasswordKey)
	if err := c.Update(ctx, &s); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := reconcileOnce(t, c, key); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Get(ctx, sk, &s); err != nil {
		t.Fatal(err)
	}
	for k, v := range original {
		if k == resources.MonitorPasswordKey {
			if len(s.Data[k]) < 26 || string(s.Data[k]) == v {
				t.Errorf("missing key %s was not regenerated: %q", k, s.Data[k])
			}
			continue
		}
		if string(s.Data[k]) != v {
			t.Errorf("password %s was overwritten", k)
		}
	}
}

// TestEnvtestSamplesAreValid creates every sample under config/samples with a server-side
// dry run: the examples users copy must pass the CRD's validation.
func TestEnvtestSamplesAreValid(t *testing.T) {
	needEnvtest(t)
	c := directClient(t, nil)
	ns := newNamespace(t)
	files, err := filepath.Glob(filepath.Join("..", "..", "config", "samples", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples found: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(b, &meta); err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		var obj client.Object
		switch meta.Kind {
		case "MySQLCluster":
			obj = &dolphinv1.MySQLCluster{}
		case "MySQLBackup":
			obj = &dolphinv1.MySQLBackup{}
		case "MySQLUser":
			obj = &dolphinv1.MySQLUser{}
		case "MySQLDatabase":
			obj = &dolphinv1.MySQLDatabase{}
		case "MySQLBackupStore":
			obj = &dolphinv1.MySQLBackupStore{}
		default:
			t.Errorf("%s: kind %q has no case here", f, meta.Kind)
			continue
		}
		if err := yaml.UnmarshalStrict(b, obj); err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		obj.SetNamespace(ns)
		if err := c.Create(context.Background(), obj, client.DryRunAll); err != nil {
			t.Errorf("%s rejected: %v", f, err)
		}
	}
}

// TestEnvtestMySQLConfigTakesNumbers applies manifests as kubectl sends them (YAML read as
// JSON): `max_connections: 500` is a whole number and is accepted, read back as its text; a
// value YAML reads as true (an unquoted ON) or as a decimal (0.5) is refused by the schema
// with a message naming the types allowed (the user quotes it); the one-line rule still holds
// for strings.
func TestEnvtestMySQLConfigTakesNumbers(t *testing.T) {
	needEnvtest(t)
	c := directClient(t, nil)
	ns := newNamespace(t)
	apply := func(name, config string) error {
		manifest := "apiVersion: mysql.dolphin.dev/v1beta1\nkind: MySQLCluster\nmetadata:\n  name: " + name +
			"\n  namespace: " + ns + "\nspec:\n  mysqlConfig:\n" + config
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
			t.Fatal(err)
		}
		return c.Create(context.Background(), &u)
	}
	if err := apply("numbers", "    max_connections: 500\n    long_query_time: \"0.5\"\n    performance_schema: \"ON\"\n"); err != nil {
		t.Fatalf("numbers and a quoted ON: %v", err)
	}
	got := getCluster(t, c, client.ObjectKey{Namespace: ns, Name: "numbers"}).Spec.MySQLConfig
	if got["max_connections"] != "500" || got["long_query_time"] != "0.5" || got["performance_schema"] != "ON" {
		t.Errorf("read back as %v", got)
	}
	for _, tc := range []struct{ name, config, message string }{
		{"unquoted-on", "    performance_schema: ON\n", "performance_schema in body must be of type integer,string"},
		{"decimal", "    long_query_time: 0.5\n", "long_query_time in body must be of type integer,string"},
		{"two-lines", "    sql_mode: \"A\\nB\"\n", "values must be a single line"},
	} {
		err := apply(tc.name, tc.config)
		if err == nil || !strings.Contains(err.Error(), tc.message) {
			t.Errorf("%s: %v; want a refusal naming %q", tc.name, err, tc.message)
		}
		t.Logf("%s: %v", tc.name, err)
	}
}
