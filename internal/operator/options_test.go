package operator

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	dolphinv1 "github.com/dolphin-operator/dolphin/api/v1beta1"
	"github.com/dolphin-operator/dolphin/internal/resources"
)

// parse registers the operator flags on a fresh flag set and parses args.
func parse(t *testing.T, args ...string) Options {
	t.Helper()
	var o Options
	fs := pflag.NewFlagSet("operator", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parsing %q: %v", args, err)
	}
	return o
}

func TestAddFlagsDefaults(t *testing.T) {
	got := parse(t)
	if got.Zap.Development {
		t.Error("zap development mode is on by default, want production (JSON) logs")
	}
	got.Zap = zap.Options{}
	if want := DefaultOptions(); !reflect.DeepEqual(got, want) {
		t.Errorf("empty command line:\n got %+v\nwant %+v", got, want)
	}
}

func TestAddFlagsParse(t *testing.T) {
	got := parse(t,
		"--leader-elect=false",
		"--max-concurrent-reconciles=7",
		"--metrics-secure=false",
		"--metrics-bind-address=:8080",
		"--health-probe-bind-address=:9090",
		"--pprof-bind-address=127.0.0.1:6060",
		"--gc-percent=80",
		"--memory-limit-ratio=0.75",
		"--leader-election-id=other",
		"--leader-election-namespace=dolphin-system",
		"--graceful-shutdown-timeout=45s",
		"--watch-namespace=databases",
		"--instance-address=pod-ip",
		"--agent-image=registry.example/dolphin:v1",
		"--kubeconfig=/tmp/kubeconfig",
		"--sql-resync-interval=30s",
		"--webhook-port=9443",
		"--webhook-host=127.0.0.1",
		"--webhook-namespace=ops",
		"--webhook-cert-secret=wh-cert",
		"--webhook-configuration=wh-config",
		"--webhook-dns-names=a.ops.svc,b.ops.svc",
		"--webhook-ips=127.0.0.1",
		"--zap-devel",
	)
	if !got.Zap.Development {
		t.Error("--zap-devel did not turn on development logging")
	}
	got.Zap = zap.Options{}
	want := Options{
		Kubeconfig:              "/tmp/kubeconfig",
		MetricsBindAddress:      ":8080",
		MetricsSecure:           false,
		HealthProbeBindAddress:  ":9090",
		PprofBindAddress:        "127.0.0.1:6060",
		GCPercent:               80,
		MemoryLimitRatio:        0.75,
		LeaderElect:             false,
		LeaderElectionID:        "other",
		LeaderElectionNamespace: "dolphin-system",
		MaxConcurrentReconciles: 7,
		GracefulShutdownTimeout: 45 * time.Second,
		WatchNamespace:          "databases",
		InstanceAddress:         "pod-ip",
		AgentImage:              "registry.example/dolphin:v1",
		SQLResyncInterval:       30 * time.Second,
		WebhookPort:             9443,
		WebhookHost:             "127.0.0.1",
		WebhookNamespace:        "ops",
		WebhookSecret:           "wh-cert",
		WebhookConfiguration:    "wh-config",
		WebhookDNSNames:         []string{"a.ops.svc", "b.ops.svc"},
		WebhookIPs:              []string{"127.0.0.1"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parsed options:\n got %+v\nwant %+v", got, want)
	}
}

func TestAddFlagsZapLevel(t *testing.T) {
	got := parse(t, "--zap-log-level=error")
	if got.Zap.Level == nil {
		t.Fatal("--zap-log-level=error left the level unset")
	}
	if got.Zap.Level.Enabled(-1) || got.Zap.Level.Enabled(0) {
		t.Error("--zap-log-level=error still enables debug/info logs")
	}
}

func TestValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate  func(*Options)
		wantErr string
	}{
		"defaults":                     {mutate: func(*Options) {}},
		"edge mode":                    {mutate: func(o *Options) { o.LeaderElect, o.LeaderElectionID = false, "" }},
		"no concurrency":               {mutate: func(o *Options) { o.MaxConcurrentReconciles = 0 }, wantErr: "--max-concurrent-reconciles"},
		"negative shutdown":            {mutate: func(o *Options) { o.GracefulShutdownTimeout = -time.Second }, wantErr: "--graceful-shutdown-timeout"},
		"election without ID":          {mutate: func(o *Options) { o.LeaderElectionID = "" }, wantErr: "--leader-election-id"},
		"zero shutdown is fine":        {mutate: func(o *Options) { o.GracefulShutdownTimeout = 0 }},
		"pod-ip addresses":             {mutate: func(o *Options) { o.InstanceAddress = "pod-ip" }},
		"unknown addresses":            {mutate: func(o *Options) { o.InstanceAddress = "ip" }, wantErr: "--instance-address"},
		"webhooks without a namespace": {mutate: func(o *Options) { o.WebhookPort = 9443 }, wantErr: "--webhook-namespace"},
		"webhooks in the election namespace": {mutate: func(o *Options) {
			o.WebhookPort, o.LeaderElectionNamespace = 9443, "dolphin-system"
		}},
		"webhook port out of range":          {mutate: func(o *Options) { o.WebhookPort = 70000 }, wantErr: "--webhook-port"},
		"resync too often":                   {mutate: func(o *Options) { o.SQLResyncInterval = time.Millisecond }, wantErr: "--sql-resync-interval"},
		"memory limit above the container's": {mutate: func(o *Options) { o.MemoryLimitRatio = 1.5 }, wantErr: "--memory-limit-ratio"},
		"memory limit NaN":                   {mutate: func(o *Options) { o.MemoryLimitRatio = math.NaN() }, wantErr: "--memory-limit-ratio"},
		"no memory limit":                    {mutate: func(o *Options) { o.MemoryLimitRatio = 0 }},
	} {
		t.Run(name, func(t *testing.T) {
			o := DefaultOptions()
			tc.mutate(&o)
			err := o.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Validate() = %v, want an error naming %s", err, tc.wantErr)
			}
		})
	}
}

func TestControllerOptionsPassMaxConcurrentReconciles(t *testing.T) {
	o := parse(t, "--max-concurrent-reconciles=7")
	if got := controllerOptions(o).MaxConcurrentReconciles; got != 7 {
		t.Errorf("controller MaxConcurrentReconciles = %d, want 7", got)
	}
}

func TestManagerOptions(t *testing.T) {
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}

	mo := managerOptions(DefaultOptions(), scheme, logr.Discard())
	if mo.Scheme != scheme {
		t.Error("manager does not use the given scheme")
	}
	if !mo.LeaderElection || mo.LeaderElectionResourceLock != "leases" || !mo.LeaderElectionReleaseOnCancel {
		t.Errorf("leader election = %v lock %q releaseOnCancel %v, want on, leases, true",
			mo.LeaderElection, mo.LeaderElectionResourceLock, mo.LeaderElectionReleaseOnCancel)
	}
	if mo.LeaderElectionID != DefaultLeaderElectionID {
		t.Errorf("LeaderElectionID = %q, want %q", mo.LeaderElectionID, DefaultLeaderElectionID)
	}
	if mo.GracefulShutdownTimeout == nil || *mo.GracefulShutdownTimeout != 30*time.Second {
		t.Errorf("GracefulShutdownTimeout = %v, want 30s", mo.GracefulShutdownTimeout)
	}
	if !mo.Metrics.SecureServing || mo.Metrics.FilterProvider == nil || mo.Metrics.BindAddress != ":8443" {
		t.Errorf("metrics = secure %v, filter set %v, bind %q; want HTTPS with authn/authz filter on :8443",
			mo.Metrics.SecureServing, mo.Metrics.FilterProvider != nil, mo.Metrics.BindAddress)
	}
	if filter, err := mo.Metrics.FilterProvider(&rest.Config{Host: "https://127.0.0.1:6443"}, nil); err != nil || filter == nil {
		t.Errorf("metrics filter provider = %v, %v; want a filter", filter, err)
	}
	if mo.HealthProbeBindAddress != ":8081" {
		t.Errorf("HealthProbeBindAddress = %q, want :8081", mo.HealthProbeBindAddress)
	}
	if mo.Cache.DefaultNamespaces != nil {
		t.Errorf("cache namespaces = %v, want all namespaces", mo.Cache.DefaultNamespaces)
	}
	checkCacheSelectors(t, mo)
	checkCacheKeepsOwnManagedFields(t, mo)
	if mo.Controller.SkipNameValidation != nil {
		t.Error("controller name validation is skipped by default")
	}

	local := parse(t, "--metrics-secure=false", "--leader-elect=false", "--watch-namespace=databases")
	local.SkipControllerNameValidation = true
	mo = managerOptions(local, scheme, logr.Discard())
	if mo.Metrics.SecureServing || mo.Metrics.FilterProvider != nil {
		t.Error("--metrics-secure=false still serves HTTPS or filters requests")
	}
	if mo.LeaderElection {
		t.Error("--leader-elect=false still elects a leader")
	}
	if _, ok := mo.Cache.DefaultNamespaces["databases"]; !ok || len(mo.Cache.DefaultNamespaces) != 1 {
		t.Errorf("cache namespaces = %v, want only databases", mo.Cache.DefaultNamespaces)
	}
	checkCacheSelectors(t, mo)
	if s := mo.Controller.SkipNameValidation; s == nil || !*s {
		t.Error("SkipControllerNameValidation is not passed to the manager")
	}
}

// checkCacheSelectors: the manager caches only Dolphin's Secrets, pods and claims.
func checkCacheSelectors(t *testing.T, mo ctrl.Options) {
	t.Helper()
	want := map[string]string{
		"*v1.Secret":                "mysql.dolphin.dev/credentials=true",
		"*v1.Pod":                   "app.kubernetes.io/managed-by=dolphin",
		"*v1.PersistentVolumeClaim": "app.kubernetes.io/instance,app.kubernetes.io/name=mysql",
		"*v1.ConfigMap":             "app.kubernetes.io/managed-by=dolphin",
	}
	got := map[string]string{}
	for obj, by := range mo.Cache.ByObject {
		if by.Label != nil {
			got[fmt.Sprintf("%T", obj)] = by.Label.String()
		}
	}
	for typ, sel := range want {
		if got[typ] != sel {
			t.Errorf("the cache selects %s by %q, want %q", typ, got[typ], sel)
		}
	}
}

func TestNewScheme(t *testing.T) {
	s, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range []runtime.Object{
		&dolphinv1.MySQLCluster{}, &dolphinv1.MySQLClusterList{}, &corev1.Pod{}, &coordinationv1.Lease{},
	} {
		if _, _, err := s.ObjectKinds(obj); err != nil {
			t.Errorf("scheme does not know %T: %v", obj, err)
		}
	}
	other, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	if other == s {
		t.Error("NewScheme returned the same scheme twice, want one per manager")
	}
}

// checkCacheKeepsOwnManagedFields fails when the cache drops Dolphin's managedFields entries,
// which the reconciler's skip of no-op applies reads (controller.applyChild), or when a cached
// kind keeps the entries of other managers (memory the operator never reads).
func checkCacheKeepsOwnManagedFields(t *testing.T, mo ctrl.Options) {
	t.Helper()
	if mo.Cache.DefaultTransform != nil {
		t.Error("a default cache transform is set: it would apply to kinds Dolphin writes with Update")
	}
	for obj, by := range mo.Cache.ByObject {
		// Dolphin writes its own kinds with Update: a trimmed managedFields list sent in an
		// Update would replace the server's, so they must never get the transform.
		if strings.Contains(fmt.Sprintf("%T", obj), "v1beta1.") {
			t.Errorf("the cache selects or transforms Dolphin's own kind %T; it is written with Update", obj)
			continue
		}
		if by.Transform == nil {
			t.Errorf("the cache keeps every managedFields entry of %T", obj)
			continue
		}
		fields := []metav1.ManagedFieldsEntry{
			{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status"},
			{Manager: resources.FieldManager, Operation: metav1.ManagedFieldsOperationApply},
			{Manager: "kubectl-edit", Operation: metav1.ManagedFieldsOperationUpdate},
			{Manager: resources.TopologyFieldManager, Operation: metav1.ManagedFieldsOperationApply},
		}
		in := obj.DeepCopyObject().(client.Object)
		in.SetManagedFields(fields)
		out, err := by.Transform(in)
		if err != nil {
			t.Fatal(err)
		}
		got := out.(client.Object).GetManagedFields()
		if len(got) != 2 || got[0].Manager != resources.FieldManager || got[1].Manager != resources.TopologyFieldManager {
			t.Errorf("cached managedFields of %T = %v, want Dolphin's two entries only", obj, got)
		}
	}
}

// TestLogTimestampsHaveMilliseconds: the operator's logs carry milliseconds by default (a
// failover's steps are a fraction of a second apart), and --zap-time-encoding still decides.
func TestLogTimestampsHaveMilliseconds(t *testing.T) {
	ts := func(args ...string) string {
		o := parse(t, args...)
		var buf strings.Builder
		o.Zap.DestWriter = &buf
		o.NewLogger().Info("hello")
		var line struct {
			TS any `json:"ts"`
		}
		if err := json.Unmarshal([]byte(buf.String()), &line); err != nil {
			t.Fatalf("log line %q: %v", buf.String(), err)
		}
		return fmt.Sprint(line.TS)
	}
	if got := ts(); !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d)$`).MatchString(got) {
		t.Errorf("default timestamp %q, want RFC 3339 with milliseconds", got)
	}
	if got := ts("--zap-time-encoding=epoch"); strings.Contains(got, "T") {
		t.Errorf("--zap-time-encoding=epoch gave %q, want seconds since the epoch", got)
	}
}

// TestGCPercentDefault: the operator runs with DefaultGCPercent unless GOGC is set, which is
// then left to decide.
func TestGCPercentDefault(t *testing.T) {
	t.Setenv("GOGC", "")
	os.Unsetenv("GOGC")
	if got := parse(t).GCPercent; got != DefaultGCPercent {
		t.Errorf("GCPercent %d without GOGC, want %d", got, DefaultGCPercent)
	}
	t.Setenv("GOGC", "200")
	if got := parse(t).GCPercent; got != 0 {
		t.Errorf("GCPercent %d with GOGC=200, want 0 (Go's own setting)", got)
	}
}
